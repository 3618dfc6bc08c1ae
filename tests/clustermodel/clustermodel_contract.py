"""The port contract: one abstract suite, run against every implementation of the ports.

Subclasses provide ``new_cluster(name)``, returning an object with the port methods and the
model's control methods (add_topic, produce, ...): the in-process ClusterModel, a server client, or
the Kafka source port over a server's Kafka listeners. ``not_supported`` names the tests of
operations an implementation does not have, each with the reason it is skipped.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest

from clustermodel.reference_fetcher import mirror_partition
from coordinator.ports import (
    UNDEFINED_EPOCH,
    AclBinding,
    ControlType,
    DestinationCluster,
    EpochEndOffset,
    FencedLeaderEpoch,
    GroupNotEmpty,
    GroupOffset,
    GroupType,
    InvalidRequest,
    IsolationLevel,
    NotLeader,
    OffsetOutOfRange,
    ReadOnlyTopic,
    SourceCluster,
    SourceUnavailable,
    TopicAlreadyExists,
    UnexpectedAppendOffset,
    UnknownLeaderEpoch,
    UnknownTopicId,
)

RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED
_names = itertools.count()


def recs(*values: bytes) -> list[tuple[bytes | None, bytes | None]]:
    return [(b"k", v) for v in values]


class PortContract:
    """Every test here must pass for every port implementation."""

    #: test name -> why this implementation skips it (an operation it does not have).
    not_supported: dict[str, str] = {}

    def new_cluster(self, name: str) -> Any:
        raise NotImplementedError

    @pytest.fixture(autouse=True)
    def _skip_not_supported(self, request: pytest.FixtureRequest) -> None:
        reason = self.not_supported.get(request.node.originalname)
        if reason:
            pytest.skip(reason)

    @pytest.fixture
    def src(self) -> Any:
        c = self.new_cluster(f"src{next(_names)}")
        c.add_topic("t", 2)
        return c

    @pytest.fixture
    def dst(self) -> Any:
        return self.new_cluster(f"dst{next(_names)}")

    def test_implements_both_protocols(self, src: Any) -> None:
        assert isinstance(src, SourceCluster)
        assert isinstance(src, DestinationCluster)

    def test_cluster_id_and_topic_metadata(self, src: Any) -> None:
        cid = src.cluster_id()
        assert uuid.UUID(cid) and src.cluster_id() == cid
        (md,) = src.describe_topics()
        assert md.name == "t" and len(md.partitions) == 2
        p0 = md.partitions[0]
        assert p0.leader in p0.replicas and set(p0.isr) == set(p0.replicas) and p0.leader_epoch == 0
        assert src.describe_topics([md.topic_id]) == [md]
        missing = uuid.UUID(int=1)
        with pytest.raises(UnknownTopicId) as info:
            src.describe_topics([missing])
        assert info.value.topic_id == missing

    def test_list_offsets_and_fetch(self, src: Any) -> None:
        tp = src.tp("t", 0)
        for i in range(4):
            src.produce("t", 0, recs(b"%d" % i * 100))
        offs = src.list_offsets(tp)
        assert (offs.log_start, offs.lso, offs.hw, offs.leo, offs.leader_epoch) == (0, 4, 4, 4, 0)
        full = src.fetch(tp, 0, 1 << 20)
        assert [b.base_offset for b in full.batches] == [0, 1, 2, 3]
        assert (full.hw, full.lso, full.log_start, full.leader_epoch) == (4, 4, 0, 0)
        one = src.fetch(tp, 0, 1)  # below one batch: still one whole batch
        assert len(one.batches) == 1
        two = src.fetch(tp, 1, 2 * full.batches[0].size_in_bytes)
        assert [b.base_offset for b in two.batches] == [1, 2]
        assert src.fetch(tp, 4, 100).batches == ()
        with pytest.raises(OffsetOutOfRange) as info:
            src.fetch(tp, 5, 100)
        assert (info.value.offset, info.value.log_start, info.value.leo) == (5, 0, 4)
        assert info.value.topic_partition == tp
        with pytest.raises(UnknownTopicId):
            src.list_offsets(src.tp("t", 0).__class__(tp.topic_id, 9))

    def test_epochs_and_fencing(self, src: Any) -> None:
        tp = src.tp("t", 1)
        src.produce("t", 1, recs(b"a"))
        src.elect_leader("t", 1)
        src.produce("t", 1, recs(b"b"))
        assert src.latest_epoch(tp) == 1
        assert src.end_offset_for_epoch(tp, 0) == EpochEndOffset(0, 1)
        assert src.end_offset_for_epoch(tp, 1, 1) == EpochEndOffset(1, 2)
        with pytest.raises(FencedLeaderEpoch) as fenced:
            src.fetch(tp, 0, 100, RC, 0)
        assert (fenced.value.request_epoch, fenced.value.leader_epoch) == (0, 1)
        with pytest.raises(UnknownLeaderEpoch):
            src.fetch(tp, 0, 100, RC, 5)
        diverged = src.fetch(tp, 2, 100, RC, 1, 0)  # our log says epoch 0 runs to 2; the leader says 1
        assert diverged.batches == () and diverged.diverging_epoch == EpochEndOffset(0, 1)

    def test_offline_partition_is_not_leader(self, src: Any) -> None:
        # Two replicas of three brokers: a live broker still answers, as in Kafka, where an offline
        # partition shows as leader -1 (LEADER_NOT_AVAILABLE) in Metadata.
        src.add_topic("o", 1, 2)
        tp = src.tp("o", 0)
        src.list_offsets(tp)  # a reader that knew the old leader
        md = next(t for t in src.describe_topics() if t.name == "o").partitions[0]
        for broker in md.replicas:
            src.crash_broker(broker)
        with pytest.raises(NotLeader):
            src.list_offsets(tp)
        for broker in md.replicas:
            src.restart_broker(broker)
        assert src.list_offsets(tp).leader_epoch > 0

    def test_leadership_moves_and_crashes_are_followed(self, src: Any) -> None:
        tp = src.tp("t", 0)
        src.produce("t", 0, recs(b"a"))
        assert src.fetch(tp, 0, 1 << 20).hw == 1  # a reader that knows the first leader
        first = src.describe_topics()[0].partitions[0]
        moved_to = next(b for b in first.isr if b != first.leader)
        src.elect_leader("t", 0, moved_to)
        src.produce("t", 0, recs(b"b"))
        # The old leader answers NOT_LEADER_OR_FOLLOWER: the reader finds the new one and retries.
        moved = src.fetch(tp, 0, 1 << 20, RC, 1)
        assert [b.base_offset for b in moved.batches] == [0, 1] and moved.leader_epoch == 1
        with pytest.raises(FencedLeaderEpoch):
            src.fetch(tp, 0, 100, RC, 0)
        # The new leader crashes: its connections close, another ISR member leads at epoch 2.
        src.crash_broker(moved_to)
        src.produce("t", 0, recs(b"c"))
        assert src.end_offset_for_epoch(tp, 1, 2) == EpochEndOffset(1, 2)
        after = src.fetch(tp, 2, 1 << 20, RC, 2, 1)
        assert [b.base_offset for b in after.batches] == [2] and (after.hw, after.leader_epoch) == (3, 2)
        assert src.list_offsets(tp).leader_epoch == 2
        now = src.describe_topics()[0].partitions[0]
        assert now.leader not in (moved_to, -1) and now.leader_epoch == 2 and moved_to not in now.isr
        src.restart_broker(moved_to)
        assert [b.base_offset for b in src.fetch(tp, 0, 1 << 20).batches] == [0, 1, 2]

    def test_transactions_lso_and_aborted(self, src: Any) -> None:
        tp = src.tp("t", 0)
        ident = src.init_producer_id("tx")
        src.begin_transaction("tx")
        src.produce_transactional("tx", "t", 0, recs(b"x"))
        src.abort_transaction("tx")
        src.begin_transaction("tx")
        src.produce_transactional("tx", "t", 0, recs(b"open"))
        offs = src.list_offsets(tp)
        assert (offs.lso, offs.hw) == (2, 3)
        (txn,) = src.open_transactions(tp)
        assert (txn.producer_id, txn.producer_epoch, txn.first_offset) == (ident.producer_id, 0, 2)
        result = src.fetch(tp, 0, 1 << 20, RC)
        assert [b.base_offset for b in result.batches] == [0, 1]
        assert [(a.producer_id, a.first_offset) for a in result.aborted_transactions] == [(ident.producer_id, 0)]
        assert len(src.fetch(tp, 0, 1 << 20, RU).batches) == 3

    def test_mirror_topic_append_truncate_and_epochs(self, src: Any, dst: Any) -> None:
        tp = src.tp("t", 0)
        src.produce("t", 0, recs(b"a", b"b"))
        src.elect_leader("t", 0)
        src.produce("t", 0, recs(b"c"))
        md = dst.create_topic("t", tp.topic_id, 2, {"retention.ms": "-1"}, None, True, "a-to-b", src.cluster_id())
        assert md.topic_id == tp.topic_id and md.read_only and md.mirror_name == "a-to-b"
        with pytest.raises(TopicAlreadyExists):
            dst.create_topic("t", tp.topic_id, 2)
        with pytest.raises(ReadOnlyTopic):
            dst.produce("t", 0, recs(b"local"))
        batches = src.fetch(tp, 0, 1 << 20).batches
        assert dst.bump_leader_epoch(tp, 5) == 5
        assert dst.append_mirror_batches(tp, batches) == 3
        assert dst.fetch(tp, 0, 1 << 20, RU).batches == batches
        assert dst.latest_epoch(tp) == 1 and dst.list_offsets(tp).leader_epoch == 5
        with pytest.raises(UnexpectedAppendOffset):
            dst.append_mirror_batches(tp, batches[:1])
        status = dst.isr_status(tp)
        assert status.leo == 3 and status.isr_caught_up()
        after = dst.truncate_to(tp, 2)
        assert after.leo == 2 and after.hw <= 2
        assert dst.isr_status(tp).isr_truncated_to(2)
        assert dst.end_offset_for_epoch(tp, 0) == EpochEndOffset(0, 2)
        restarted = dst.truncate_fully_and_start_at(tp, 10)
        assert (restarted.log_start, restarted.leo) == (10, 10)
        assert dst.latest_epoch(tp) == UNDEFINED_EPOCH
        assert dst.create_partitions(tp.topic_id, 3).partitions[2].partition == 2

    def test_stop_sequence_markers_and_writable(self, src: Any, dst: Any) -> None:
        tp = src.tp("t", 0)
        src.init_producer_id("tx")
        src.begin_transaction("tx")
        src.produce_transactional("tx", "t", 0, recs(b"in-flight"))
        dst.create_topic("t", tp.topic_id, 2, mirror_name="a-to-b")
        dst.append_mirror_batches(tp, src.fetch(tp, 0, 1 << 20, RU).batches)
        (txn,) = dst.open_transactions(tp)
        assert dst.list_offsets(tp).lso == 0
        dst.set_last_mirrored_epoch("a-to-b", tp, 0)
        dst.bump_leader_epoch(tp, 1)
        marker = dst.append_control_batch(tp, ControlType.ABORT, txn.producer_id, txn.producer_epoch)
        assert marker.is_control and marker.control_type == ControlType.ABORT and marker.leader_epoch == 1
        assert dst.open_transactions(tp) == []
        with pytest.raises(InvalidRequest):
            dst.append_control_batch(tp, ControlType.MIRROR_PID_RESET)
        reset = dst.append_control_batch(tp, ControlType.MIRROR_PID_RESET, -1, -1, src.cluster_id())
        assert reset.base_offset == 2 and reset.producer_id == -1
        dst.set_read_only(tp.topic_id, False)
        assert dst.produce("t", 0, recs(b"local")).leader_epoch == 1
        offs = dst.list_offsets(tp)
        assert offs.lso == offs.hw == offs.leo == 4
        assert dst.last_mirrored_epoch("a-to-b", tp) == 0
        dst.set_last_mirrored_epoch("a-to-b", tp, None)
        assert dst.last_mirrored_epoch("a-to-b", tp) is None

    def test_groups(self, src: Any, dst: Any) -> None:
        tp = src.tp("t", 0)
        src.produce("t", 0, recs(b"a", b"b"))
        src.commit_offset("g1", "t", 0, 2)
        src.join_group("g1", "member-1")
        src.join_group("s1", "m", GroupType.SHARE)
        groups = {g.group_id: g for g in src.list_groups()}
        assert groups["g1"].active and groups["s1"].group_type == GroupType.SHARE
        assert src.is_group_active("g1") and not src.is_group_active("nope")
        (committed,) = src.group_offsets("g1")
        assert (committed.offset, committed.leader_epoch) == (2, 0)
        dst.create_topic("t", tp.topic_id, 2)
        dst.commit_group_offsets("g1", [committed])
        assert dst.group_offsets("g1") == [committed]
        dst.join_group("g1", "local")
        with pytest.raises(GroupNotEmpty):
            dst.commit_group_offsets("g1", [GroupOffset("g1", tp.topic_id, 0, 1, 0)])
        with pytest.raises(UnknownTopicId):
            dst.commit_group_offsets("g2", [GroupOffset("g2", uuid.UUID(int=3), 0, 1)])

    def test_configs_and_acls(self, src: Any) -> None:
        topic_id = src.tp("t").topic_id
        src.alter_configs(topic_id, {"retention.ms": "1000", "cleanup.policy": "delete"})
        src.alter_configs(topic_id, {}, ["cleanup.policy"])
        assert src.describe_configs(topic_id) == {"retention.ms": "1000"}
        acl = AclBinding("TOPIC", "t", "LITERAL", "User:alice", "*", "READ", "ALLOW")
        mirror_acl = AclBinding("CLUSTER_MIRROR", "a-to-b", "LITERAL", "User:op", "*", "ALTER", "ALLOW")
        src.create_acls([acl, mirror_acl, acl])
        assert src.describe_acls() == [acl, mirror_acl]
        src.delete_acls([acl])
        assert src.describe_acls() == [mirror_acl]

    def test_unreachable_source(self, src: Any) -> None:
        tp = src.tp("t", 0)
        src.set_unreachable(True)
        with pytest.raises(SourceUnavailable) as info:
            src.fetch(tp, 0, 100)
        assert info.value.retriable
        src.set_unreachable(False)
        assert src.fetch(tp, 0, 100).batches == ()

    def test_mirror_converges_with_reference_fetcher(self, src: Any, dst: Any) -> None:
        tp = src.tp("t", 0)
        dst.create_topic("t", tp.topic_id, 2)
        for i in range(20):
            src.produce("t", 0, recs(b"v%d" % i))
            if i % 7 == 3:
                src.elect_leader("t", 0)
        assert mirror_partition(src, dst, tp, max_bytes=300) == 20
        assert dst.fetch(tp, 0, 1 << 20, RU).batches == src.fetch(tp, 0, 1 << 20, RC).batches
        assert dst.list_offsets(tp).leader_epoch >= src.list_offsets(tp).leader_epoch
