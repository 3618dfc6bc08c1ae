"""The executor: runs the core's commands against the destination port, pipelined by position, and
says which partitions' commands failed (a partition's commands always run in order).

Fencing (``coordinator.fencing``): every mutating call carries the job's owner fence, for the
cluster to check, and before each wave the job's host says whether it still owns the work (its
group generation unchanged): a worker that woke from a pause sends nothing more. A fenced wave
fails every partition still queued with ``FencedOwnerEpoch``, which drops their steps."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from coordinator.fencing import MUTATING_METHODS, OwnerFence
from coordinator.ports import (
    DestinationCluster,
    FencedOwnerEpoch,
    PortError,
    TopicPartition,
)
from coordinator.workflows import commands as c
from coordinator.workflows.fetcher import fetcher_of
from streams.runner.driver import K, Call, run_calls


class Executor:
    """Runs commands against the destination port and the fetch sessions, in order."""

    def __init__(self, dest: DestinationCluster, sessions: list[set[TopicPartition]], num_fetchers: int) -> None:
        self.dest = dest
        self.sessions = sessions
        self.num_fetchers = num_fetchers
        # The destination's position per partition as our last append left it (``fetch_round``):
        # any other command on the partition may move it, so it is forgotten then.
        self.positions: dict[TopicPartition, Any] = {}
        # Per partition, the destination LEO a fetch round's append was fetched for: the append
        # is refused if the log is elsewhere (a new leader of B truncated it), so no gap is made.
        self.expected_leo: dict[TopicPartition, int] = {}
        # The job's owner fence (set by its host at the job's start; None: unfenced, e.g. a tool)
        # and the host's own check that it still owns the work, made before every wave.
        self.fence: OwnerFence | None = None
        self.owner_check: Callable[[], bool] | None = None
        self.fenced: FencedOwnerEpoch | None = None  # the first refusal of this job, if any

    def run(self, commands: Iterable[c.Command]) -> None:
        for cmd in commands:
            self.run_one(cmd)

    def run_one(self, cmd: c.Command) -> None:
        call = self.plan(cmd)
        if call is not None:
            self.check_owner()
            port, method, args, kwargs = call
            try:
                getattr(port, method)(*args, **(kwargs or {}))
            except FencedOwnerEpoch as e:
                self.fenced = self.fenced or e
                raise

    def check_owner(self) -> None:
        """Raises FencedOwnerEpoch once the job's host no longer owns the work (or was refused)."""
        if self.fenced is not None:
            raise self.fenced
        if self.owner_check is not None and not self.owner_check():
            fence = self.fence
            self.fenced = FencedOwnerEpoch(fence.scope if fence else "", fence.epoch if fence else -1, -1)
            raise self.fenced

    def run_many(self, commands: dict[K, Sequence[c.Command]]) -> dict[K, PortError]:
        """Each key's commands in order, the keys side by side: wave i is every key's i-th port
        call, pipelined. A key whose command fails runs nothing after it; its error is returned.
        Once fenced, no wave goes out: every key still queued fails with the fencing."""
        # [key, its commands, the index of its next one]: no copy of each queue, no pop(0)
        queues: list[list[Any]] = [[k, cmds, 0] for k, cmds in commands.items() if cmds]
        failed: dict[K, PortError] = {}
        plan = self.plan
        while queues:
            try:
                self.check_owner()
            except FencedOwnerEpoch as e:
                failed.update(dict.fromkeys((q[0] for q in queues), e))
                break
            keys: list[K] = []
            calls: list[Call] = []
            left: list[list[Any]] = []
            for q in queues:
                cmds, i = q[1], q[2]
                n = len(cmds)
                call = None
                while i < n and call is None:
                    call = plan(cmds[i])
                    i += 1
                if call is not None:
                    keys.append(q[0])
                    calls.append(call)
                if i < n:
                    q[2] = i
                    left.append(q)
            for k, r in zip(keys, run_calls(calls)):
                if isinstance(r, PortError):
                    failed[k] = r
                    if isinstance(r, FencedOwnerEpoch) and self.fenced is None:
                        self.fenced = r  # a newer owner claimed the work: nothing more goes out
            queues = [q for q in left if q[0] not in failed] if failed else left
        return failed

    def plan(self, cmd: c.Command) -> Call | None:
        """A fetch-session change is applied here (None); anything else is the port call to make."""
        kind = type(cmd)
        if kind is not c.AppendBatches and self.positions and (tp := getattr(cmd, "tp", None)) is not None:
            self.positions.pop(tp, None)
        how = _PLANS.get(kind)
        if how is None:
            raise TypeError(f"unknown command {cmd!r}")
        call = how(self, cmd)
        if call is None or self.fence is None or call[1] not in MUTATING_METHODS:
            return call
        port, method, args, kwargs = call
        return port, method, args, {**kwargs, "fence": self.fence} if kwargs else {"fence": self.fence}

    def _append_batches(self, cmd: c.AppendBatches) -> Call:
        leo = self.expected_leo.get(cmd.tp)
        return (self.dest, "append_mirror_batches", (cmd.tp, cmd.batches), None if leo is None else {"expected_leo": leo})


def _add_fetcher(e: Executor, cmd: c.AddFetcher) -> None:
    e.sessions[fetcher_of(cmd.tp, e.num_fetchers)].add(cmd.tp)


def _remove_fetcher(e: Executor, cmd: c.RemoveFetcher) -> None:
    e.sessions[fetcher_of(cmd.tp, e.num_fetchers)].discard(cmd.tp)


def _set_lme(e: Executor, cmd: c.SetLastMirroredEpoch) -> Call:
    name, tp, epoch, cut = cmd.mirror_name, cmd.tp, cmd.epoch, cmd.cut_offset
    return (e.dest, "set_last_mirrored_epoch", (name, tp, epoch) if cut is None else (name, tp, epoch, cut), None)


# Each command's plan, by its type (a lookup, not a chain of pattern matches per command: a mass
# stop plans about four per partition).
_PLANS: dict[type, Callable[[Executor, Any], Call | None]] = {
    c.AddFetcher: _add_fetcher,
    c.RemoveFetcher: _remove_fetcher,
    c.TruncateTo: lambda e, cmd: (e.dest, "truncate_to", (cmd.tp, cmd.offset), None),
    c.TruncateFullyAndStartAt: lambda e, cmd: (e.dest, "truncate_fully_and_start_at", (cmd.tp, cmd.offset), None),
    c.AppendBatches: Executor._append_batches,
    c.BumpLeaderEpoch: lambda e, cmd: (e.dest, "bump_leader_epoch", (cmd.tp, cmd.min_epoch), None),
    c.AppendControl: lambda e, cmd: (e.dest, "append_control_batch",
                                     (cmd.tp, cmd.control_type, cmd.producer_id, cmd.producer_epoch, cmd.source_cluster_id),
                                     None),
    c.SetLastMirroredEpoch: _set_lme,
    c.CreateTopic: lambda e, cmd: (e.dest, "create_topic", (cmd.name, cmd.topic_id, cmd.num_partitions, dict(cmd.configs)),
                                   {"read_only": True, "mirror_name": cmd.mirror_name,
                                    "mirror_source_cluster_id": cmd.source_cluster_id}),
    c.CreatePartitions: lambda e, cmd: (e.dest, "create_partitions", (cmd.topic_id, cmd.total_count), None),
    c.SetReadOnly: lambda e, cmd: (e.dest, "set_read_only", (cmd.topic_id, cmd.read_only), None),
    c.SetMirror: lambda e, cmd: (e.dest, "set_mirror", (cmd.topic_id, cmd.mirror_name, cmd.source_cluster_id), None),
    c.AlterConfigs: lambda e, cmd: (e.dest, "alter_configs", (cmd.topic_id, dict(cmd.set_configs), cmd.delete_configs), None),
    c.CommitGroupOffsets: lambda e, cmd: (e.dest, "commit_group_offsets", (cmd.group_id, cmd.offsets, cmd.group_type), None),
    c.CreateAcls: lambda e, cmd: (e.dest, "create_acls", (cmd.acls,), None),
    c.DeleteAcls: lambda e, cmd: (e.dest, "delete_acls", (cmd.acls,), None),
}
