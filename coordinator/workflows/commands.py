"""Commands: what a decision asks the shell to do against the ports, as frozen values.

A decision returns ``Decision(state, commands, last_mirror_epoch)``. The executor
(``streams.runner.runner``) runs the commands in order, then persists the state (fenced) and the
LastMirrorEpochs record. A crash between the two re-runs the decision from the old state, so
every command here is idempotent against what the decision will observe again:
truncations are "to offset N", bumps are "to at least N", ABORT markers are only emitted for
transactions the destination still reports open, and MIRROR_PID_RESET is only emitted when the
coordinator's own tail of the log holds none.
"""

from __future__ import annotations

import uuid

import msgspec

from coordinator.partition_state import LastMirrorEpoch, MirrorPartitionState
from coordinator.ports import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    AclBinding,
    Batch,
    ControlType,
    GroupOffset,
    GroupType,
    TopicPartition,
)


class Command(msgspec.Struct, frozen=True, tag=True, gc=False):
    """Base of every command (a tagged union: the class name is the tag)."""


# ---- topic level ----------------------------------------------------------------------------


class CreateTopic(Command, frozen=True, tag=True):
    """Create the mirror topic with the source's topic ID, read-only, attached to the mirror."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: tuple[tuple[str, str], ...]
    mirror_name: str
    source_cluster_id: str


class CreatePartitions(Command, frozen=True, tag=True):
    topic_id: uuid.UUID
    total_count: int


class SetReadOnly(Command, frozen=True, tag=True):
    topic_id: uuid.UUID
    read_only: bool


class SetMirror(Command, frozen=True, tag=True):
    topic_id: uuid.UUID
    mirror_name: str | None
    source_cluster_id: str | None


class AlterConfigs(Command, frozen=True, tag=True):
    topic_id: uuid.UUID
    set_configs: tuple[tuple[str, str], ...]
    delete_configs: tuple[str, ...] = ()


# ---- partition level ------------------------------------------------------------------------


class AddFetcher(Command, frozen=True, tag=True):
    """Put the partition in a fetch session; it fetches from the destination LEO."""

    tp: TopicPartition


class RemoveFetcher(Command, frozen=True, tag=True):
    tp: TopicPartition


class TruncateTo(Command, frozen=True, tag=True):
    tp: TopicPartition
    offset: int


class TruncateFullyAndStartAt(Command, frozen=True, tag=True):
    tp: TopicPartition
    offset: int


class AppendBatches(Command, frozen=True, tag=True):
    tp: TopicPartition
    batches: tuple[Batch, ...]


class BumpLeaderEpoch(Command, frozen=True, tag=True):
    """Raise the DLE to at least ``min_epoch`` (a no-op when it is already there)."""

    tp: TopicPartition
    min_epoch: int


class AppendControl(Command, frozen=True, tag=True):
    tp: TopicPartition
    control_type: ControlType
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    source_cluster_id: str | None = None


class SetLastMirroredEpoch(Command, frozen=True, tag=True):
    """Publish the LME on the destination cluster, where a later failback asks for it."""

    mirror_name: str
    tp: TopicPartition
    epoch: int | None
    cut_offset: int | None = None  # a --consistent-cut stop's: a failback truncates to it at most


# ---- mirror level (syncs) -------------------------------------------------------------------


class CommitGroupOffsets(Command, frozen=True, tag=True):
    group_id: str
    group_type: GroupType
    offsets: tuple[GroupOffset, ...]


class CreateAcls(Command, frozen=True, tag=True):
    acls: tuple[AclBinding, ...]


class DeleteAcls(Command, frozen=True, tag=True):
    acls: tuple[AclBinding, ...]


class Decision(msgspec.Struct, frozen=True, gc=False):
    """What one decision step produced: the state to persist, the commands to run first, records.

    ``state is`` the input state when nothing is to be persisted (the executor skips the write).
    """

    state: MirrorPartitionState
    commands: tuple[Command, ...] = ()
    last_mirror_epoch: LastMirrorEpoch | None = None


def unchanged(state: MirrorPartitionState, *commands: Command) -> Decision:
    return Decision(state, tuple(commands))
