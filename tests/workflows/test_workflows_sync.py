"""Group offset sync (VK12 double clamp, active groups, stopped mirrors) and ACL sync (RS16)."""

from __future__ import annotations

import uuid

from workflow_harness import FAST, World, all_in, run_until

from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState, Step, advance
from coordinator.ports import AclBinding, GroupType, IsrStatus, PartitionOffsets, ReplicaState
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.config import MirrorConfig
from coordinator.workflows.stop import FinalSync, StopObservation, begin_stop, decide_stop

ONE_BATCH_PER_ROUND = MirrorConfig(metadata_refresh_interval_ms=0, fetch_backoff_ms=0, fetch_response_max_bytes=1,
                                   groups_exclude=("secret-.*",))


def _offsets(cluster, group):
    return {(o.partition): (o.offset, o.leader_epoch) for o in cluster.group_offsets(group)}


def _topic_g(records: int):
    """Clusters a and b, and topic g on a with one partition holding ``records`` records."""
    w = World("a", "b")
    a = w["a"]
    topic = a.add_topic("g", partitions=1)
    for i in range(records):
        a.produce("g", 0, [(b"k", f"v{i}".encode())])
    return w, topic, a.tp("g", 0)


def _lagging_mirror():
    w, topic, tp = _topic_g(3)
    a, b = w["a"], w["b"]
    m = w.mirror("a", "b", ONE_BATCH_PER_ROUND)
    m.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING) and b.list_offsets(tp).leo == 3)
    a.elect_leader("g", 0)  # later records carry another epoch
    for i in range(3, 10):
        a.produce("g", 0, [(b"k", f"v{i}".encode())])
    return w, topic, tp, m


def test_group_offsets_clamped_into_destination_range():
    w, topic, tp, m = _lagging_mirror()
    a, b = w["a"], w["b"]
    a.commit_offset("app", "g", 0, 10)  # ahead of the lagging destination
    a.commit_offset("early", "g", 0, 1)  # behind the destination's log start (after retention)
    a.commit_offset("exact", "g", 0, 2)
    a.commit_offset("secret-x", "g", 0, 2)  # excluded by groups.exclude
    a.commit_offset("share-1", "g", 0, 2, group_type=GroupType.SHARE)
    b.delete_records("g", 0, 2)  # destination retention moved its log start
    w.step()
    leo = b.list_offsets(tp).leo
    assert 3 < leo < 10, "still lagging"
    (status,) = m.runner.describe()
    assert (status.source_hw, status.dest_leo, status.lag) == (10, leo, 10 - leo)
    synced, epoch = _offsets(b, "app")[0]
    assert synced == leo, "min(sourceCommitted, destLEO)"
    assert epoch == b.partition(tp).leader_log.batches[-1].leader_epoch == 1, "epoch of the record before, looked up locally"
    assert _offsets(b, "early")[0][0] == 2, "max(destLogStart, ...)"
    assert _offsets(b, "exact")[0] == _offsets(a, "exact")[0], "unclamped: offset and epoch as committed"
    assert b.group_offsets("secret-x") == []
    assert [g.group_type for g in b.list_groups() if g.group_id == "share-1"] == [GroupType.SHARE]
    run_until(w, lambda: b.list_offsets(tp).leo == 10)
    w.step()
    assert m.runner.describe()[0].lag == 0
    assert _offsets(b, "app")[0] == _offsets(a, "app")[0]
    for g in ("app", "early", "exact"):
        off = b.list_offsets(tp)
        assert off.log_start <= _offsets(b, g)[0][0] <= off.leo


def test_active_destination_groups_and_stopped_mirrors_are_not_overwritten():
    w, topic, tp, m = _lagging_mirror()
    a, b = w["a"], w["b"]
    run_until(w, lambda: b.list_offsets(tp).leo == 10)
    b.commit_offset("live", "g", 0, 1)
    b.join_group("live", "consumer-1")
    a.commit_offset("live", "g", 0, 9)
    a.commit_offset("app", "g", 0, 5)
    w.step(rounds=2)
    assert _offsets(b, "live")[0][0] == 1, "active on the destination: its members own it"
    assert _offsets(b, "app")[0][0] == 5

    m.set_desired(topic.topic_id, DesiredState.PAUSE)
    w.step()
    a.commit_offset("app", "g", 0, 7)
    w.step(rounds=2)
    assert _offsets(b, "app")[0][0] == 5, "paused: no sync"

    m.set_desired(topic.topic_id, DesiredState.STOP)
    run_until(w, lambda: all_in(m, MirrorState.STOPPED))
    b.commit_offset("app", "g", 0, 6)  # a consumer on the failed-over side
    a.commit_offset("app", "g", 0, 9)
    w.step(rounds=3)
    assert _offsets(b, "app")[0][0] == 6, "a stopped mirror never overwrites local progress"


def _acl(rt, name, principal, op="READ", perm="ALLOW"):
    return AclBinding(rt, name, "LITERAL", principal, "*", op, perm)


def test_acl_sync_default_scope_mirrors_source_keeps_cluster_mirror_acls():
    w = World("a", "b")
    a, b = w["a"], w["b"]
    topic = a.add_topic("s", partitions=1)
    src = [_acl("TOPIC", "s", "User:alice"), _acl("GROUP", "app", "User:alice")]
    for acl in src + [_acl("CLUSTER_MIRROR", "a-to-x", "User:ops", "ALTER")]:
        a.add_acl(acl)
    mirror_acl = _acl("CLUSTER_MIRROR", "a-to-b", "User:ops", "ALTER")
    local_deny = _acl("TOPIC", "*", "User:mallory", "ALL", "DENY")
    b.add_acl(mirror_acl)
    b.add_acl(local_deny)
    m = w.mirror("a", "b")
    m.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING))
    w.step()
    assert set(b.describe_acls()) == set(src) | {mirror_acl}, "in scope: local ACLs go (RS16); CLUSTER_MIRROR stays"
    a.delete_acls([src[1]])
    w.step()
    assert set(b.describe_acls()) == {src[0], mirror_acl}, "removed on the source, removed here (RS16 case 1)"


def test_acl_sync_narrow_scope_leaves_local_acls_alone():
    w = World("a", "b")
    a, b = w["a"], w["b"]
    topic = a.add_topic("s", partitions=1)
    a.add_acl(_acl("TOPIC", "s", "User:alice"))
    a.add_acl(_acl("GROUP", "app", "User:alice"))
    local = _acl("GROUP", "dr-only", "User:bob")
    b.add_acl(local)
    cfg = MirrorConfig(**{**{f: getattr(FAST, f) for f in FAST.__struct_fields__}, "acls_include": ("TOPIC;s",)})
    m = w.mirror("a", "b", cfg)
    m.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING))
    w.step()
    assert set(b.describe_acls()) == {_acl("TOPIC", "s", "User:alice"), local}


def test_stopping_runs_a_last_group_sync_for_consumer_and_share_groups():
    """The observed loss: offsets committed on A after the last periodic sync, then a stop. STOPPING
    syncs them once more (clamped, active groups skipped) before the topic turns writable."""
    w, topic, tp = _topic_g(12)
    a, b = w["a"], w["b"]
    slow_sync = MirrorConfig(metadata_refresh_interval_ms=3_600_000, fetch_backoff_ms=0)
    m = w.mirror("a", "b", slow_sync)
    a.commit_offset("app", "g", 0, 6)
    a.commit_offset("shared", "g", 0, 6, group_type=GroupType.SHARE)
    a.commit_offset("live", "g", 0, 6)
    m.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING) and b.list_offsets(tp).leo == 12)
    w.step(rounds=2)
    assert _offsets(b, "app")[0][0] == _offsets(b, "shared")[0][0] == 6, "the periodic sync ran once"
    b.join_group("live", "consumer-1")  # someone already consumes on B
    for g in ("app", "shared", "live"):
        a.commit_offset(g, "g", 0, 11, group_type=GroupType.SHARE if g == "shared" else GroupType.CONSUMER)
    w.step(rounds=3)
    assert _offsets(b, "app")[0][0] == 6, "no periodic sync due for an hour"

    m.set_desired(topic.topic_id, DesiredState.STOP)
    run_until(w, lambda: all_in(m, MirrorState.STOPPED))
    assert _offsets(b, "app")[0][0] == 11 and _offsets(b, "shared")[0][0] == 11
    assert [g.group_type for g in b.list_groups() if g.group_id == "shared"] == [GroupType.SHARE]
    assert _offsets(b, "live")[0][0] == 6, "a group active on B is still skipped"
    assert not b.topic("g").read_only


def test_last_group_sync_is_clamped_to_what_the_destination_has():
    w, topic, tp, m = _lagging_mirror()
    a, b = w["a"], w["b"]
    m.set_desired(topic.topic_id, DesiredState.STOP)
    a.commit_offset("app", "g", 0, 10)  # the source is ahead of what was mirrored
    run_until(w, lambda: all_in(m, MirrorState.STOPPED))
    state = m.runner.state(tp)
    assert state.stop_offset < 10
    assert state.stop_offset <= _offsets(b, "app")[0][0] <= b.list_offsets(tp).leo


def test_stop_wait_isr_waits_for_the_isr_and_the_last_group_sync_without_a_step_of_its_own():
    """Pure: STOP_WAIT_ISR ends in STOPPED only once the ISR has everything and the last group sync
    ran (or failed for ``group_sync_timeout_ms``); no extra persisted step between them."""
    key = MirrorPartitionKey("m", uuid.UUID(int=1), 0)
    state = advance(begin_stop(MirrorPartitionState(state=MirrorState.MIRRORING), key.topic_partition, now_ms=1_000).state,
                    step=Step.STOP_WAIT_ISR)  # fmt: skip
    dest = PartitionOffsets(log_start=0, lso=9, hw=9, leo=9, leader_epoch=3)

    def isr(follower_leo: int) -> IsrStatus:
        replicas = (ReplicaState(1, 9, True, True), ReplicaState(2, follower_leo, True, True))
        return IsrStatus(key.topic_id, 0, leader=1, leader_epoch=3, leo=9, hw=9, replicas=replicas)

    def decide(follower_leo: int, final: FinalSync | None, now_ms: int = 1_500) -> MirrorState:
        obs = StopObservation(dest=dest, isr=isr(follower_leo), final_sync=final)
        got = decide_stop(state, key, obs, now_ms, group_sync_timeout_ms=3_000)
        assert got.state.state is MirrorState.STOPPED or got.state is state, "no step in between"
        return got.state.state

    assert decide(8, FinalSync.RAN) is MirrorState.STOPPING, "a follower lags"
    assert decide(9, None) is MirrorState.STOPPING, "the last sync has not been tried"
    assert decide(9, FinalSync.FAILED) is MirrorState.STOPPING, "tried again within the bound"
    assert decide(9, FinalSync.FAILED, now_ms=4_000) is MirrorState.STOPPED, "the bound passed"
    assert decide(9, FinalSync.RAN) is MirrorState.STOPPED
