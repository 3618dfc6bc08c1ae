"""Metadata image and delta: every-prefix replay, snapshot round-trips, problems, local_changes."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.changes import LocalChanges, MirrorPartitionKey, local_changes
from coordinator.delta import MetadataDelta, ProblemKind, Replayer, SnapshotError, load_snapshot, replay_log
from coordinator.image import (
    EMPTY_IMAGE,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    ConfigResourceType,
    MetadataImage,
    MetadataProvenance,
    PatternType,
)
from coordinator.states import DesiredState
from records.framing import MetadataRecordSerde
from records.registry import SchemaSet, default_schemas, schemas_at
from records.schema import parse_schema_text
from reference_data import REFERENCE

S = default_schemas()
SERDE = MetadataRecordSerde(S)
MIRROR = int(ConfigResourceType.CLUSTER_MIRROR)


class R:
    """Record constructors with the defaults a controller would write."""

    Topic = S.struct("TopicRecord")
    Partition = S.struct("PartitionRecord")
    Change = S.struct("PartitionChangeRecord")
    RemoveTopic = S.struct("RemoveTopicRecord")
    Config = S.struct("ConfigRecord")
    State = S.struct("MirrorTopicStateChangeRecord")
    Acl = S.struct("AccessControlEntryRecord")
    RemoveAcl = S.struct("RemoveAccessControlEntryRecord")
    NoOp = S.struct("NoOpRecord")
    Feature = S.struct("FeatureLevelRecord")
    Begin = S.struct("BeginTransactionRecord")
    End = S.struct("EndTransactionRecord")
    Abort = S.struct("AbortTransactionRecord")
    Impact = S.struct("MirrorFailoverImpactRecord")
    ImpactTopic = S.nested("MirrorFailoverImpactRecord", "TopicImpact")
    ImpactPart = S.nested("MirrorFailoverImpactRecord", "PartitionImpact")
    ImpactTxn = S.nested("MirrorFailoverImpactRecord", "AbortedTransaction")
    ImpactGroup = S.nested("MirrorFailoverImpactRecord", "GroupImpact")

    @staticmethod
    def impact(mirror: str, tid: uuid.UUID, partitions: list[int], n: int, missing: str | None = None) -> Any:
        """A stop's prediction, figures varied by ``n``; with ``missing``, none and why."""
        parts = [] if missing else [R.ImpactPart(
            partition_index=p, destination_end_offset=10 * n + p, source_high_watermark=-1 if n % 3 == 0 else 12 * n + p,
            lost_records=-1 if n % 3 == 0 else 2 * n, oldest_lost_age_ms=-1 if n % 2 else n,
            transactions=[R.ImpactTxn(producer_id=n, producer_epoch=1, first_offset=p, record_count=2)] if n % 2 else [],
            groups=[R.ImpactGroup(group_id=f"g{n % 2}", group_type="consumer", source_committed_offset=5 * n,
                                  synced_offset=4 * n, re_read_records=n)]) for p in partitions]  # fmt: skip
        return R.Impact(mirror_name=mirror, predicted_at_ms=1000 + n, missing_reason=missing, source_available=n % 3 != 0,
                        topics=[R.ImpactTopic(topic_id=tid, partitions=parts)], active_groups=[f"busy{n}"] if n % 4 == 0 else [])  # fmt: skip

    @staticmethod
    def topic(name: str, tid: uuid.UUID, partitions: int = 1, leader: int = 1) -> list[Any]:
        return [R.Topic(name=name, topic_id=tid)] + [R.part(tid, p, leader) for p in range(partitions)]

    @staticmethod
    def part(tid: uuid.UUID, p: int, leader: int = 1) -> Any:
        return R.Partition(partition_id=p, topic_id=tid, replicas=(1, 2, 3), isr=(1, 2, 3),
                           leader=leader, leader_epoch=0, partition_epoch=0)

    @staticmethod
    def mirror(name: str, **configs: str) -> list[Any]:
        configs = {"bootstrap.servers": "source:9092", **configs}
        return [R.Config(resource_type=MIRROR, resource_name=name, name=k, value=v) for k, v in configs.items()]

    @staticmethod
    def state(tid: uuid.UUID, mirror: str | None, desired: DesiredState = DesiredState.START) -> Any:
        return R.State(topic_id=tid, mirror_name=mirror, desired_state=int(desired))


def tid_(n: int) -> uuid.UUID:
    return uuid.UUID(int=n)


def replay_all(records: list[Any], image: MetadataImage = EMPTY_IMAGE, start: int | None = None) -> MetadataDelta:
    d = MetadataDelta(image)
    first = image.offset + 1 if start is None else start
    for i, r in enumerate(records):
        d.replay(r, first + i, 1)
    return d


def image_of(records: list[Any]) -> MetadataImage:
    d = replay_all(records)
    assert d.problems == [], d.problems
    return d.apply()


# ------------------------------------------------------------------------ generated logs


class LogBuilder:
    """Turns opcodes into a plausible metadata log, with some bad records mixed in."""

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.topics: dict[uuid.UUID, list[int]] = {}  # tid -> partition ids
        self.names: dict[uuid.UUID, str] = {}
        self.mirrors: dict[str, set[str]] = {}
        self.acls: list[uuid.UUID] = []
        self.n = 0

    def pick(self, seq: list[Any], i: int) -> Any:
        return seq[i % len(seq)] if seq else None

    def op(self, kind: int, a: int, b: int, c: int) -> None:
        rec = self.records.append
        tids = list(self.topics)
        tid = self.pick(tids, a)
        mirror_names = sorted(self.mirrors)
        if kind == 0 or (tid is None and kind in (1, 2, 3, 7, 8, 9, 12, 15)):
            self.n += 1
            t = tid_(self.n)
            self.topics[t], self.names[t] = list(range(1 + a % 3)), f"t{self.n}.x"
            self.records.extend(R.topic(self.names[t], t, 1 + a % 3, leader=b % 3))
        elif kind == 1:
            p = len(self.topics[tid])
            self.topics[tid].append(p)
            rec(R.part(tid, p))
        elif kind == 2:
            rec(R.Change(topic_id=tid, partition_id=self.pick(self.topics[tid], b), leader=c % 4 - 1))
        elif kind == 3:
            rec(R.Change(topic_id=tid, partition_id=self.pick(self.topics[tid], b), isr=tuple(range(1, 1 + c % 3))))
        elif kind == 4:
            name = f"m{a % 3}"
            self.mirrors.setdefault(name, set()).update({"bootstrap.servers"})
            self.records.extend(R.mirror(name))
        elif kind in (5, 6) and not mirror_names:
            rec(R.NoOp())
        elif kind == 5:
            name, key = self.pick(mirror_names, a), f"k{b % 3}"
            value = None if c == 0 else f"v{c}"
            (self.mirrors[name].add if value else self.mirrors[name].discard)(key)
            rec(R.Config(resource_type=MIRROR, resource_name=name, name=key, value=value))
        elif kind == 6:
            name = self.pick(mirror_names, a)
            for key in sorted(self.mirrors.pop(name)):
                rec(R.Config(resource_type=MIRROR, resource_name=name, name=key, value=None))
        elif kind == 7:
            if not mirror_names:
                self.mirrors["m0"] = {"bootstrap.servers"}
                self.records.extend(R.mirror("m0"))
            rec(R.state(tid, self.pick(sorted(self.mirrors), b), DesiredState(c % 3)))
        elif kind == 8:
            rec(R.state(tid, None, DesiredState.STOP))
        elif kind == 9:
            del self.topics[tid]
            rec(R.RemoveTopic(topic_id=tid))
        elif kind == 10:
            self.n += 1
            self.acls.append(tid_(1 << 64 | self.n))
            rtype = AclResourceType.CLUSTER_MIRROR if b % 2 else AclResourceType.TOPIC
            rec(R.Acl(id=self.acls[-1], resource_type=int(rtype), resource_name=f"m{c}", pattern_type=int(PatternType.LITERAL),
                      principal="User:alice", host="*", operation=int(AclOperation.ALTER), permission_type=int(AclPermissionType.ALLOW)))
        elif kind == 11:
            rec(R.RemoveAcl(id=self.acls.pop(a % len(self.acls)) if self.acls else tid_(999)))
        elif kind == 12:
            rec(R.Config(resource_type=int(ConfigResourceType.TOPIC), resource_name=self.names[tid],
                         name="retention.ms", value=None if c == 0 else str(c)))
        elif kind == 13:
            rec(R.NoOp() if a % 2 else R.Feature(name="metadata.version", feature_level=20))
        elif kind == 15:  # a stop, its prediction appended first (as the controller does)
            if not mirror_names:
                self.mirrors["m0"] = {"bootstrap.servers"}
                self.records.extend(R.mirror("m0"))
            mirror = self.pick(sorted(self.mirrors), b)
            rec(R.impact(mirror, tid, self.topics[tid], a, missing="more than 2000 partitions" if c == 3 else None))
            rec(R.state(tid, mirror, DesiredState.STOP))
        else:  # records a good controller would not write: reported, then skipped
            bad = [R.part(tid_(10**6 + a), 0), R.state(tid_(10**6 + a), "m0"),
                   R.state(tid or tid_(1), "no-such-mirror"), R.State(topic_id=tid or tid_(1), mirror_name="m0", desired_state=7),
                   R.Change(topic_id=tid or tid_(1), partition_id=99, leader=1)]
            rec(bad[b % len(bad)])


# mirror state changes and topic lifecycle weigh most; every kind still shows up
KINDS = st.sampled_from([0, 0, 1, 2, 2, 3, 4, 5, 6, 7, 7, 7, 7, 8, 9, 10, 11, 12, 13, 14, 15, 15])
OPS = st.lists(st.tuples(KINDS, st.integers(0, 50), st.integers(0, 50), st.integers(0, 3)), min_size=8, max_size=40)


def assert_same_decisions(from_delta: LocalChanges, from_images: LocalChanges,
                          left: dict[tuple[str, uuid.UUID], int]) -> None:
    """Equal but for the topics that left a mirror within the delta: for those, the delta
    reports every departure the image diff reports (and more), and may start them afresh."""
    seen = {tid for _, tid in left}
    kinds = ("start", "stop", "pause", "resume", "added", "removed", "leader_changes")
    for kind in kinds:
        a = [k for k in getattr(from_delta, kind) if k.topic_id not in seen]
        b = [k for k in getattr(from_images, kind) if k.topic_id not in seen]
        assert a == b, kind
    assert set(from_images.removed) <= set(from_delta.removed)
    assert set(from_images.removed_at) <= set(from_delta.removed_at) == set(left)
    departed = {(k.mirror_name, k.topic_id) for k in from_delta.removed}
    assert departed <= set(left)


def build_log(ops: list[tuple[int, int, int, int]]) -> list[Any]:
    b = LogBuilder()
    for op in ops:
        b.op(*op)
    return b.records


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_every_prefix_then_the_rest_equals_the_whole_log(ops: list[tuple[int, int, int, int]]) -> None:
    log = build_log(ops)
    whole = replay_all(log, start=0)
    final = whole.apply()
    assert final.provenance == MetadataProvenance(len(log) - 1, 1)
    for k in range(len(log) + 1):
        head = replay_all(log[:k], start=0)
        mid = head.apply()
        tail = replay_all(log[k:], mid, start=k)
        assert tail.apply() == final
        assert head.problems + tail.problems == whole.problems
        # deciding from the delta (what it touched) or from a diff of the images agrees, except
        # that only the delta sees a topic leave a mirror and join it again (or join and leave)
        assert_same_decisions(local_changes(tail), local_changes(mid, final), tail.mirrors.left)
        # snapshot: image -> records -> image
        assert load_snapshot(mid.to_records(), mid.provenance) == mid


def test_every_prefix_of_one_long_log() -> None:
    rng = random.Random(1279)
    kinds = [0, 0, 1, 2, 2, 3, 4, 5, 6, 7, 7, 7, 7, 8, 9, 10, 11, 12, 13, 14, 15, 15]
    log = build_log([(rng.choice(kinds), rng.randrange(50), rng.randrange(50), rng.randrange(4)) for _ in range(250)])
    assert len(log) > 300
    final = replay_all(log, start=0).apply()
    assert final.mirrors.topics and final.mirrors.mirrors and final.acls.acls and final.mirrors.impacts  # every domain
    for k in range(len(log) + 1):
        mid = replay_all(log[:k], start=0).apply()
        assert replay_all(log[k:], mid, start=k).apply() == final
        if k % 25 == 0:
            assert load_snapshot(mid.to_records(), mid.provenance) == mid


@settings(max_examples=25, deadline=None)
@given(OPS, st.data())
def test_framed_log_replays_like_decoded_records(ops: list[tuple[int, int, int, int]], data: st.DataObject) -> None:
    log = build_log(ops)
    framed = [SERDE.encode(r, 0) for r in log]
    garbage_at = data.draw(st.integers(0, len(framed)))
    framed.insert(garbage_at, b"\x01\x02\x00\x07trunc")  # a TopicRecord cut short
    decoded = list(log)
    decoded.insert(garbage_at, R.NoOp())  # same slot, so the offsets line up
    img_f, problems_f = replay_log(enumerate(framed))
    img_d, _ = replay_log(enumerate(decoded))
    assert img_f == img_d
    assert any(p.offset == garbage_at and p.kind is ProblemKind.UNDECODABLE for p in problems_f)
    snap = [SERDE.decode(SERDE.encode(a.message, a.version)) for a in img_f.to_records()]
    assert load_snapshot(snap, img_f.provenance) == img_f


def test_unchanged_parts_are_shared() -> None:
    a, b = tid_(1), tid_(2)
    img = image_of(R.topic("a", a, 3) + R.topic("b", b, 3) + R.mirror("m"))
    d = replay_all([R.Change(topic_id=a, partition_id=1, leader=2)], img)
    new = d.apply()
    assert new.topics.by_id[b] is img.topics.by_id[b]
    assert new.topics.by_id[a].partitions[0] is img.topics.by_id[a].partitions[0]
    assert new.mirrors is img.mirrors and new.acls is img.acls and new.configs is img.configs
    assert replay_all([R.NoOp()], img).apply().topics is img.topics


def test_applying_mid_stream_never_changes_an_image_already_handed_out() -> None:
    t = tid_(1)
    d = replay_all(R.topic("a", t, 1))
    first = d.apply()
    assert d.apply() is first  # cached until the next record
    d.replay(R.part(t, 1), 10)
    d.replay(R.Change(topic_id=t, partition_id=0, leader=3), 11)
    second = d.apply()
    assert list(first.topics.by_id[t].partitions) == [0] and first.topics.by_id[t].partitions[0].leader == 1
    assert list(second.topics.by_id[t].partitions) == [0, 1] and second.topics.by_id[t].partitions[0].leader == 3


def test_partition_change_follows_kraft_merge() -> None:
    t = tid_(1)
    img = image_of(R.topic("a", t, 1, leader=1))
    steps = [R.Change(topic_id=t, partition_id=0, leader=2), R.Change(topic_id=t, partition_id=0, isr=(2,)),
             R.Change(topic_id=t, partition_id=0, leader=2)]  # the same leader again: an epoch bump
    p = replay_all(steps, img).apply().topics.by_id[t].partitions[0]
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (2, 2, 3, (2,))


def test_remove_topic_takes_configs_and_membership_with_it() -> None:
    t = tid_(1)
    img = image_of(R.topic("a", t, 2) + R.mirror("m") + [R.state(t, "m"),
                   R.Config(resource_type=int(ConfigResourceType.TOPIC), resource_name="a", name="retention.ms", value="1")])
    assert img.topic_configs("a") == {"retention.ms": "1"}
    new = replay_all([R.RemoveTopic(topic_id=t)], img).apply()
    assert new.topics.get_by_name("a") is None and new.topic_configs("a") == {} and new.mirror_topic(t) is None


def test_mirror_exists_while_it_has_configs_and_its_deletion_detaches_topics() -> None:
    t = tid_(1)
    img = image_of(R.topic("a", t) + R.mirror("m", **{"sasl.jaas.config": "x"}) + [R.state(t, "m")])
    assert set(img.mirrors.mirrors["m"].configs) == {"bootstrap.servers", "sasl.jaas.config"}
    d = replay_all([R.Config(resource_type=MIRROR, resource_name="m", name=k, value=None)
                    for k in ("bootstrap.servers", "sasl.jaas.config")], img)
    new = d.apply()
    assert new.mirrors.get("m") is None and new.mirror_topic(t) is None
    assert local_changes(d).removed == (MirrorPartitionKey("m", t, 0),)


def test_a_consistent_cut_stop_keeps_its_cut_in_the_image_and_its_snapshot() -> None:
    t = tid_(1)
    part = S.nested("MirrorTopicStateChangeRecord", "CutPartition")
    stop = R.State(topic_id=t, mirror_name="m", desired_state=int(DesiredState.STOP), cut_timestamp=1_234,
                   cut_partitions=[part(partition_index=1, cut_offset=9), part(partition_index=0, cut_offset=7)])  # fmt: skip
    img = image_of(R.topic("a", t, 2) + R.mirror("m") + [R.state(t, "m"), stop])
    cut = img.mirror_topic(t).cut
    assert cut is not None and (cut.timestamp, cut.offsets) == (1_234, ((0, 7), (1, 9))) and cut.offset_of(1) == 9
    assert load_snapshot(img.to_records(), img.provenance) == img
    restarted = replay_all([R.state(t, "m")], img).apply()  # a later start: no cut any more
    assert restarted.mirror_topic(t).cut is None


# ------------------------------------------------------------------------------ problems


def test_unknown_api_key_undecodable_frame_and_unknown_topic_are_reported_and_replay_goes_on() -> None:
    t = tid_(1)
    d = MetadataDelta()
    d.replay_framed(SERDE.encode(R.Topic(name="a", topic_id=t), 0), 0)
    p1 = d.replay_framed(b"\x01\x63\x00\x00", 1)  # apiKey 99: not a metadata record
    p2 = d.replay_framed(SERDE.encode(R.part(t, 0), 0)[:-3], 2)  # truncated body
    p3 = d.replay_framed(b"\x00\x02\x00", 3)  # frame version 0
    p4 = d.replay(R.part(tid_(2), 0), 4)  # unknown topic
    p5 = d.replay(R.state(tid_(2), "m"), 5)
    p6 = d.replay_framed(SERDE.encode(R.part(t, 1), 0) + b"\x00", 6)  # trailing garbage
    d.replay_framed(SERDE.encode(R.part(t, 0), 0), 7)
    assert [(p.offset, p.kind) for p in (p1, p2, p3, p4, p5, p6)] == [
        (1, ProblemKind.UNKNOWN_RECORD_TYPE), (2, ProblemKind.UNDECODABLE), (3, ProblemKind.UNDECODABLE),
        (4, ProblemKind.UNKNOWN_TOPIC), (5, ProblemKind.UNKNOWN_TOPIC), (6, ProblemKind.UNDECODABLE)]
    assert "apiKey 99" in p1.message and "byte" in p2.message and "frame version" in p3.message
    assert "garbage" in p6.message
    img = d.apply()
    assert img.provenance.offset == 7 and list(img.topics.by_id[t].partitions) == [0]
    assert d.problems == [p1, p2, p3, p4, p5, p6]


def test_invalid_desired_state_unknown_mirror_and_acl_are_reported() -> None:
    t = tid_(1)
    d = replay_all(R.topic("a", t) + [R.State(topic_id=t, mirror_name="m", desired_state=3), R.state(t, "nope"),
                                      R.RemoveAcl(id=tid_(5)), R.Change(topic_id=t, partition_id=4, leader=1)])
    assert [p.kind for p in d.problems] == [ProblemKind.INVALID_RECORD, ProblemKind.UNKNOWN_MIRROR,
                                            ProblemKind.UNKNOWN_ACL, ProblemKind.UNKNOWN_PARTITION]
    assert [p.offset for p in d.problems] == [2, 3, 4, 5]


def test_redelivered_and_out_of_order_records_are_skipped() -> None:
    t = tid_(1)
    img = image_of(R.topic("a", t, 1))
    d = MetadataDelta(img)
    assert d.replay(R.Change(topic_id=t, partition_id=0, leader=2), img.offset).kind is ProblemKind.STALE_OFFSET
    d.replay(R.Change(topic_id=t, partition_id=0, leader=2), 10)
    assert d.replay(R.Change(topic_id=t, partition_id=0, leader=3), 9).kind is ProblemKind.OUT_OF_ORDER
    assert d.apply().topics.by_id[t].partitions[0].leader_epoch == 1


def schemas_with_an_unknown_record() -> SchemaSet:
    """The project's schemas plus a metadata record type no handler knows (as a newer Kafka's would be)."""
    future = parse_schema_text(
        '{"apiKey": 250, "type": "metadata", "name": "FutureClusterRecord", "validVersions": "0", "flexibleVersions": "0+",'
        ' "fields": [{"name": "BrokerId", "type": "int32", "versions": "0+", "entityType": "brokerId"}]}',
        "FutureClusterRecord.json",
    )
    return SchemaSet([*default_schemas().specs.values(), future], "project schemas + FutureClusterRecord")


def test_dispatch_comes_from_the_schemas_and_unhandled_types_are_reported() -> None:
    assert MetadataDelta.unhandled() == ()
    if REFERENCE is not None:  # every record type of Kafka's metadata log is replayed or deliberately ignored
        assert MetadataDelta.unhandled(schemas_at(str(REFERENCE / "kafka-metadata"))) == ()
    future = schemas_with_an_unknown_record()
    assert MetadataDelta.unhandled(future) == ("FutureClusterRecord",)
    d = MetadataDelta(EMPTY_IMAGE, future)
    d.replay(future.struct("TopicRecord")(name="a", topic_id=tid_(1)), 0)
    p = d.replay(future.struct("FutureClusterRecord")(broker_id=1), 1)
    assert p is not None and p.kind is ProblemKind.UNHANDLED and p.offset == 1
    assert d.apply().topics.get_by_name("a") is not None


def test_snapshot_that_does_not_replay_cleanly_is_refused() -> None:
    with pytest.raises(SnapshotError, match="unknown_topic"):
        load_snapshot([R.part(tid_(1), 0)], MetadataProvenance(5, 1))


def test_replayer_applies_committed_transactions_and_drops_aborted_ones() -> None:
    a, b = tid_(1), tid_(2)
    r = Replayer()
    log = [R.Begin(name="bootstrap"), *R.topic("a", a), R.End(), R.Begin(), *R.topic("b", b), R.Abort(), R.Begin(), *R.topic("c", tid_(3))]
    for i, rec in enumerate(log):
        r.replay(rec, i)
    img = r.image()
    assert img.topics.get_by_name("a") is not None and img.topics.get_by_name("b") is None
    assert img.topics.get_by_name("c") is None and r.in_transaction  # still open: not applied
    assert img.offset == 7  # the abort marker; the open transaction is not in the image
    r.report(len(log), 0, ProblemKind.UNDECODABLE, "held back with the transaction")
    assert r.problems == []
    r.replay(R.End(), len(log) + 1)
    assert r.image().topics.get_by_name("c") is not None
    assert [(p.offset, p.kind) for p in r.problems] == [(len(log), ProblemKind.UNDECODABLE)]
    delta, image = r.publish()
    assert image.offset == len(log) + 1 and r.delta.image is image and not local_changes(delta).start


# --------------------------------------------------------------------------- local changes


def _setup() -> tuple[MetadataImage, uuid.UUID, uuid.UUID]:
    a, b = tid_(1), tid_(2)
    return image_of(R.topic("a", a, 2) + R.topic("b", b, 1) + R.mirror("m") + R.mirror("n")), a, b


def keys(mirror: str, tid: uuid.UUID, parts: range | list[int]) -> tuple[MirrorPartitionKey, ...]:
    return tuple(MirrorPartitionKey(mirror, tid, p) for p in parts)


def test_local_changes_for_each_kind() -> None:
    img, a, b = _setup()
    d = replay_all([R.state(a, "m"), R.state(b, "m", DesiredState.PAUSE)], img)
    started = d.apply()
    assert local_changes(d) == LocalChanges(start=keys("m", a, range(2)), pause=keys("m", b, [0]))
    d = replay_all([R.state(a, "m", DesiredState.STOP), R.state(b, "m", DesiredState.START)], started)
    assert local_changes(d) == LocalChanges(stop=keys("m", a, range(2)), resume=keys("m", b, [0]))
    stopped = d.apply()
    d = replay_all([R.state(a, "m", DesiredState.START)], stopped)  # failback
    assert local_changes(d) == LocalChanges(start=keys("m", a, range(2)))


def test_local_changes_new_partitions_and_leader_changes() -> None:
    img, a, b = _setup()
    img = replay_all([R.state(a, "m")], img).apply()
    d = replay_all([R.part(a, 2), R.Change(topic_id=a, partition_id=0, leader=3), R.part(b, 1)], img)
    assert local_changes(d) == LocalChanges(added=keys("m", a, [2]), leader_changes=keys("m", a, [0]))


def test_local_changes_removed_by_detach_delete_and_move() -> None:
    img, a, b = _setup()
    img = replay_all([R.state(a, "m", DesiredState.STOP), R.state(b, "m")], img).apply()
    d = replay_all([R.state(a, "n"), R.RemoveTopic(topic_id=b)], img)  # a moves to n (it was stopped)
    at = img.offset
    assert local_changes(d) == LocalChanges(start=keys("n", a, range(2)), removed=keys("m", a, range(2)) + keys("m", b, [0]),
                                            removed_at={("m", a): at + 1, ("m", b): at + 2})
    d = replay_all([R.state(a, None)], img)
    assert local_changes(d) == LocalChanges(removed=keys("m", a, range(2)), removed_at={("m", a): at + 1})


def test_a_mirror_deleted_and_recreated_in_one_delta_starts_its_topics_afresh() -> None:
    """Delete (detach the stopped topic, tombstone the configs), create again under the same
    name, start the topic: the net image only shows STOP -> START, the delta shows the departure
    at its offset, so the workers drop the old state before the new start."""
    img, a, _ = _setup()
    img = replay_all([R.state(a, "m", DesiredState.STOP)], img).apply()
    at = img.offset
    delete = [R.state(a, None), R.Config(resource_type=MIRROR, resource_name="m", name="bootstrap.servers", value=None)]
    d = replay_all(delete + R.mirror("m") + [R.state(a, "m")], img)
    assert d.problems == []
    assert local_changes(d) == LocalChanges(start=keys("m", a, range(2)), removed=keys("m", a, range(2)),
                                            removed_at={("m", a): at + 1})
    assert local_changes(img, d.apply()) == LocalChanges(start=keys("m", a, range(2)))  # what a diff can see
    # a mirror deleted with its topic still attached: the config tombstone detaches it
    d = replay_all([delete[1]], img)
    assert local_changes(d) == LocalChanges(removed=keys("m", a, range(2)), removed_at={("m", a): at + 1})


def test_local_changes_keeps_only_owned_partitions() -> None:
    img, a, _ = _setup()
    d = replay_all([R.state(a, "m")], img)
    assert local_changes(d, owns=lambda k: k.partition == 1).start == keys("m", a, [1])
    assert local_changes(img, img).is_empty()


def test_a_stops_prediction_replays_without_changing_mirror_state_and_lasts_until_the_topic_moves_on() -> None:
    t, m = tid_(1), "m"
    base = R.topic("t", t, 2) + R.mirror(m) + [R.state(t, m)]
    before = image_of(base)
    d = replay_all([R.impact(m, t, [0, 1], 5)], before)
    assert d.problems == []
    img = d.apply()
    assert img.mirrors.topics == before.mirrors.topics and img.topics == before.topics  # no mirror state moved
    pred = img.mirrors.impacts[t]
    assert (pred.offset, pred.mirror_name, pred.missing_reason) == (before.offset + 1, m, None)
    p1 = pred.partition(1)
    assert (p1.dest_leo, p1.source_hw, p1.lost_records, p1.oldest_lost_age_ms) == (51, 61, 10, None)
    assert [(a.producer_id, a.first_offset, a.record_count) for a in p1.aborts] == [(5, 1, 2)]
    assert [(g.group_id, g.source_committed, g.synced, g.reread) for g in p1.groups] == [("g1", 25, 20, 5)]
    # the stop itself keeps it, and so does a snapshot, with the offset of the record it came from
    stopped = replay_all([R.state(t, m, DesiredState.STOP)], img).apply()
    assert stopped.mirrors.impacts[t] == pred
    snap = load_snapshot(stopped.to_records(), stopped.provenance)
    assert snap == stopped and snap.mirrors.impacts[t].offset == pred.offset != snap.offset
    # a start (failback) or a pause drops it; so does the topic's removal
    for after in ([R.state(t, m, DesiredState.START)], [R.state(t, m, DesiredState.PAUSE)], [R.RemoveTopic(topic_id=t)]):
        assert t not in replay_all(after, snap).apply().mirrors.impacts


def test_a_prediction_missing_says_why_and_one_for_an_unknown_mirror_or_topic_is_reported() -> None:
    t, m = tid_(1), "m"
    img = image_of(R.topic("t", t, 1) + R.mirror(m) + [R.state(t, m), R.impact(m, t, [0], 1, missing="no answer within 5 s")])
    assert img.mirrors.impacts[t].missing_reason == "no answer within 5 s" and img.mirrors.impacts[t].partitions == ()
    d = replay_all([R.impact("nope", t, [0], 1), R.impact(m, tid_(9), [0], 1)], img)
    assert [p.kind for p in d.problems] == [ProblemKind.UNKNOWN_MIRROR, ProblemKind.UNKNOWN_TOPIC]
    assert d.apply().mirrors.impacts == img.mirrors.impacts
