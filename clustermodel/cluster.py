"""ClusterModel: one model Kafka cluster, implementing coordinator.ports Source and Destination.

    from clustermodel import ClusterModel
    a = ClusterModel("a", seed=7)
    a.add_topic("orders", partitions=3)
    a.produce("orders", 0, [(b"k", b"v")])
    a.tick(1000)
    a.fetch(a.tp("orders", 0), 0, 1 << 20)
"""

from __future__ import annotations

from pathlib import Path

from coordinator.ports import AclBinding, GroupOffset, GroupType, UNDEFINED_EPOCH

from .adapter import PortsAdapter
from .groups import GroupState
from .journal import Step, journaled
from .persistence import dump_cluster, load_cluster
from .transactions import TransactionsMixin


class ClusterModel(PortsAdapter, TransactionsMixin):
    """A seedable, deterministic model of a Kafka cluster (brokers, replicas, groups, ACLs, faults)."""

    # ---------------------------------------------------------------- groups and ACLs (cluster side)

    @journaled
    def join_group(self, group_id: str, member_id: str, group_type: GroupType = GroupType.CONSUMER) -> None:
        """A member joins: the group becomes active."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = GroupState(group_id, group_type)
        if member_id not in group.members:
            group.members.append(member_id)

    @journaled
    def leave_group(self, group_id: str, member_id: str) -> None:
        """A member leaves; with no members left the group is inactive (empty)."""
        group = self.groups.get(group_id)
        if group is not None and member_id in group.members:
            group.members.remove(member_id)

    @journaled
    def commit_offset(
        self, group_id: str, topic: str, partition: int, offset: int, leader_epoch: int | None = None,
        group_type: GroupType = GroupType.CONSUMER, metadata: str = "",
    ) -> GroupOffset:
        """A consumer's OffsetCommit (with its metadata string); the leader epoch defaults to that of the
        record before ``offset``."""
        tp = self.tp(topic, partition)
        if leader_epoch is None:
            part = self.partition(tp)
            epoch = part.leader_log.epochs.epoch_for_offset(offset - 1) if offset > 0 else None
            leader_epoch = UNDEFINED_EPOCH if epoch is None else epoch
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = GroupState(group_id, group_type)
        committed = GroupOffset(group_id, tp.topic_id, partition, offset, leader_epoch, metadata)
        group.commit(committed)
        return committed

    @journaled
    def add_acl(self, acl: AclBinding) -> None:
        """An ACL created locally on this cluster."""
        self.acls[acl] = None

    # ---------------------------------------------------------------- faults (journaled switches)

    @journaled
    def set_unreachable(self, unreachable: bool) -> None:
        """Every port call fails with SourceUnavailable while set."""
        self.faults.set_unreachable(unreachable)

    @journaled
    def set_slow(self, delay_ms: int) -> None:
        """Every port call costs ``delay_ms`` of logical time (and real time on the server)."""
        self.faults.set_slow(delay_ms)

    @journaled
    def set_flapping(self, up_ms: int, down_ms: int) -> None:
        """Reachable ``up_ms``, then unreachable ``down_ms``, repeating on the logical clock."""
        self.faults.set_flapping(up_ms, down_ms, self.now_ms)

    @journaled
    def set_failure_rate(self, rate: float) -> None:
        """Each port call fails with probability ``rate`` (seeded)."""
        self.faults.set_failure_rate(rate)

    @journaled
    def change_leader_on_next_fetch(self, topic: str, partition: int) -> None:
        """The next fetch of this partition finds that leadership moved mid-request (NotLeader)."""
        self.faults.change_leader_on_next_fetch(self.tp(topic, partition))

    @journaled
    def clear_faults(self) -> None:
        """All fault switches off."""
        self.faults.clear()

    # ---------------------------------------------------------------- persistence and replay

    def snapshot(self) -> bytes:
        """The whole model as msgpack bytes."""
        return dump_cluster(self)

    @classmethod
    def from_snapshot(cls, data: bytes) -> ClusterModel:
        return load_cluster(data, cls)

    def save(self, path: str | Path) -> None:
        """Write a snapshot file (atomically: temp file, then rename)."""
        target = Path(path)
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_bytes(self.snapshot())
        tmp.replace(target)

    @classmethod
    def load(cls, path: str | Path) -> ClusterModel:
        return cls.from_snapshot(Path(path).read_bytes())

    @classmethod
    def replay(cls, steps: list[Step], **init: object) -> ClusterModel:
        """A new model built with ``init`` and the same steps; errors raised then are raised-and-kept again."""
        model = cls(**init)  # type: ignore[arg-type]
        for step in steps:
            try:
                getattr(model, step.method)(*step.args, **step.kwargs)
            except Exception:  # noqa: BLE001 - the original run saw the same error at this step
                pass
        return model
