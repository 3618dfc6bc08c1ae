"""Topic level: create the mirror topic, follow source changes, refuse loops and foreign topic IDs.

Runs before the partition workflows in each round. For a topic whose desired state is START or
PAUSE:

- the source no longer knows the topic ID (deleted): every partition that is still a live mirror
  goes to FAILED, non-retryable (UNKNOWN_TOPIC_ID); a STOP is how the operator moves on;
- a destination topic with the source's name but another topic ID: FAILED, non-retryable,
  INCONSISTENT_TOPIC_ID; the coordinator never writes into that topic;
- mirror loop: the source topic is itself a live mirror (read-only) fed by this cluster. The
  partitions about to start go to FAILED, retryable (during a quick failback the other side may
  still be STOPPING), and the local topic is left untouched: nothing is made read-only;
- otherwise the topic is created (source topic ID, filtered configs, read-only, attached) or
  brought in line: partitions added on the source are added here, and the topic is made read-only
  and attached to the mirror before any partition truncates.

For a STOP, the topic becomes writable once every partition is STOPPED (or never started); it
stays attached to the mirror, which is how a later failback finds the LME under the mirror's name.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import msgspec

from coordinator.partition_state import NON_RETRYABLE, UNKNOWN_STATE, MirrorPartitionState
from coordinator.ports import TopicMetadata
from coordinator.retry import fail
from coordinator.states import DesiredState, ErrorCode, MirrorState
from coordinator.workflows.commands import Command, CreatePartitions, CreateTopic, SetMirror, SetReadOnly
from coordinator.workflows.config import MirrorConfig
from coordinator.workflows.sync_configs import filter_configs

# States whose partition is (or is about to become) a live mirror of the source.
_LIVE = frozenset({MirrorState.PREPARING, MirrorState.EPOCH_FENCING, MirrorState.MIRRORING,
                   MirrorState.PAUSING, MirrorState.PAUSED, MirrorState.UNKNOWN, MirrorState.FAILED})
_STARTING = frozenset({MirrorState.UNKNOWN, MirrorState.STOPPED, MirrorState.PREPARING})


class TopicObservation(msgspec.Struct, frozen=True, kw_only=True):
    topic_id: uuid.UUID
    source_topic: TopicMetadata | None  # None: the source answered and does not know the topic ID
    dest_topic: TopicMetadata | None  # the destination topic with this topic ID
    dest_same_name: TopicMetadata | None = None  # a destination topic with the source's name
    source_cluster_id: str
    dest_cluster_id: str


class TopicDecision(msgspec.Struct, frozen=True):
    commands: tuple[Command, ...]
    states: dict[int, MirrorPartitionState]  # every known partition, changed or not
    ready: bool  # the topic is (once the commands ran) a read-only mirror topic of this mirror


def is_mirror_loop(obs: TopicObservation) -> bool:
    src = obs.source_topic
    return src is not None and src.read_only and src.mirror_source_cluster_id == obs.dest_cluster_id


def decide_topic(
    mirror_name: str,
    obs: TopicObservation,
    desired: DesiredState,
    states: Mapping[int, MirrorPartitionState],
    now_ms: int,
    config: MirrorConfig,
) -> TopicDecision:
    out = dict(states)
    dest = obs.dest_topic
    if desired is DesiredState.STOP:
        done = all(s.state in (MirrorState.STOPPED, MirrorState.UNKNOWN) for s in out.values())
        commands: tuple[Command, ...] = ()
        if dest is not None and dest.read_only and done:
            commands = (SetReadOnly(obs.topic_id, False),)
        return TopicDecision(commands, out, False)
    src = obs.source_topic
    if src is None:
        # By the mirror topic's name (the same on both sides), the topic ID after it.
        name = f"{dest.name} (topic ID {obs.topic_id})" if dest is not None else f"with topic ID {obs.topic_id}"
        for p, s in out.items():
            if s.state in _LIVE and s.retryable:
                out[p] = fail(s, ErrorCode.UNKNOWN_TOPIC_ID, f"source topic {name} was deleted", now_ms, config,
                              retryable=False)
        return TopicDecision((), out, False)
    for p in range(len(src.partitions)):
        out.setdefault(p, UNKNOWN_STATE)
    other = obs.dest_same_name
    if other is not None and other.topic_id != obs.topic_id:
        msg = f"destination topic {src.name} has topic ID {other.topic_id}, source has {obs.topic_id}"
        for p, s in out.items():
            if s.state is not MirrorState.FAILED or s.retry_attempt != NON_RETRYABLE:
                out[p] = fail(s, ErrorCode.INCONSISTENT_TOPIC_ID, msg, now_ms, config, retryable=False)
        return TopicDecision((), out, False)
    if is_mirror_loop(obs):
        msg = f"mirror loop: source topic {src.name} is mirrored from this cluster by {src.mirror_name}"
        for p, s in out.items():
            if s.state in _STARTING:
                out[p] = fail(s, ErrorCode.INVALID_CLUSTER_MIRROR_STATES, msg, now_ms, config)
        return TopicDecision((), out, False)
    cmds: list[Command] = []
    if dest is None:
        configs = tuple(filter_configs(src.configs, config.topic_properties_exclude).items())
        cmds.append(CreateTopic(src.name, obs.topic_id, len(src.partitions), configs, mirror_name, obs.source_cluster_id))
    else:
        if len(dest.partitions) < len(src.partitions):
            cmds.append(CreatePartitions(obs.topic_id, len(src.partitions)))
        if not dest.read_only:
            cmds.append(SetReadOnly(obs.topic_id, True))
        if dest.mirror_name != mirror_name or dest.mirror_source_cluster_id != obs.source_cluster_id:
            cmds.append(SetMirror(obs.topic_id, mirror_name, obs.source_cluster_id))
    return TopicDecision(tuple(cmds), out, True)
