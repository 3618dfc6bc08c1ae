"""The executor: runs the core's commands against the destination port, pipelined by position, and
says which partitions' commands failed (a partition's commands always run in order)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from coordinator.ports import (
    DestinationCluster,
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

    def run(self, commands: Iterable[c.Command]) -> None:
        for cmd in commands:
            self.run_one(cmd)

    def run_one(self, cmd: c.Command) -> None:
        call = self.plan(cmd)
        if call is not None:
            port, method, args, kwargs = call
            getattr(port, method)(*args, **(kwargs or {}))

    def run_many(self, commands: dict[K, Sequence[c.Command]]) -> dict[K, PortError]:
        """Each key's commands in order, the keys side by side: wave i is every key's i-th port
        call, pipelined. A key whose command fails runs nothing after it; its error is returned."""
        queues = {k: list(cmds) for k, cmds in commands.items() if cmds}
        failed: dict[K, PortError] = {}
        while queues:
            wave: list[tuple[K, Call]] = []
            for k in list(queues):
                q = queues[k]
                call = None
                while q and call is None:
                    call = self.plan(q.pop(0))
                if call is not None:
                    wave.append((k, call))
                if not q:
                    del queues[k]
            for (k, _), r in zip(wave, run_calls([call for _, call in wave])):
                if isinstance(r, PortError):
                    failed[k] = r
                    queues.pop(k, None)
        return failed

    def plan(self, cmd: c.Command) -> Call | None:  # noqa: C901 - one arm per command, on purpose
        """A fetch-session change is applied here (None); anything else is the port call to make."""
        d = self.dest
        if type(cmd) is c.AppendBatches:  # a copy's one command: before the match's class checks
            leo = self.expected_leo.get(cmd.tp)
            return (d, "append_mirror_batches", (cmd.tp, cmd.batches), None if leo is None else {"expected_leo": leo})
        if (tp := getattr(cmd, "tp", None)) is not None:
            self.positions.pop(tp, None)
        match cmd:
            case c.AddFetcher(tp=tp):
                self.sessions[fetcher_of(tp, self.num_fetchers)].add(tp)
                return None
            case c.RemoveFetcher(tp=tp):
                self.sessions[fetcher_of(tp, self.num_fetchers)].discard(tp)
                return None
            case c.TruncateTo(tp=tp, offset=offset):
                return (d, "truncate_to", (tp, offset), None)
            case c.TruncateFullyAndStartAt(tp=tp, offset=offset):
                return (d, "truncate_fully_and_start_at", (tp, offset), None)
            case c.AppendBatches(tp=tp, batches=batches):
                leo = self.expected_leo.get(tp)
                return (d, "append_mirror_batches", (tp, batches), None if leo is None else {"expected_leo": leo})
            case c.BumpLeaderEpoch(tp=tp, min_epoch=epoch):
                return (d, "bump_leader_epoch", (tp, epoch), None)
            case c.AppendControl():
                return (d, "append_control_batch",
                        (cmd.tp, cmd.control_type, cmd.producer_id, cmd.producer_epoch, cmd.source_cluster_id), None)  # fmt: skip
            case c.SetLastMirroredEpoch(mirror_name=name, tp=tp, epoch=epoch, cut_offset=cut):
                return (d, "set_last_mirrored_epoch", (name, tp, epoch) if cut is None else (name, tp, epoch, cut), None)
            case c.CreateTopic():
                return (d, "create_topic", (cmd.name, cmd.topic_id, cmd.num_partitions, dict(cmd.configs)),
                        {"read_only": True, "mirror_name": cmd.mirror_name, "mirror_source_cluster_id": cmd.source_cluster_id})  # fmt: skip
            case c.CreatePartitions(topic_id=topic_id, total_count=n):
                return (d, "create_partitions", (topic_id, n), None)
            case c.SetReadOnly(topic_id=topic_id, read_only=read_only):
                return (d, "set_read_only", (topic_id, read_only), None)
            case c.SetMirror(topic_id=topic_id, mirror_name=name, source_cluster_id=source):
                return (d, "set_mirror", (topic_id, name, source), None)
            case c.AlterConfigs(topic_id=topic_id, set_configs=to_set, delete_configs=to_delete):
                return (d, "alter_configs", (topic_id, dict(to_set), to_delete), None)
            case c.CommitGroupOffsets(group_id=group, group_type=kind, offsets=offsets):
                return (d, "commit_group_offsets", (group, offsets, kind), None)
            case c.CreateAcls(acls=acls):
                return (d, "create_acls", (acls,), None)
            case c.DeleteAcls(acls=acls):
                return (d, "delete_acls", (acls,), None)
            case _:
                raise TypeError(f"unknown command {cmd!r}")
