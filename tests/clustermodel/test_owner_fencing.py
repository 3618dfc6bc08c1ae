"""Owner fencing at the cluster (``coordinator.fencing``): a mutating call whose owner epoch is
below the highest the cluster has seen for its group changes nothing, through the model server's
request path (single calls and batches), and the highest epoch survives a snapshot."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from clustermodel import ClusterModel
from clustermodel.persistence import dump_cluster, load_cluster
from clustermodel.protocol import BATCH, METHODS, decode_error, encode_request, response_decoder
from clustermodel.server import ModelServer
from coordinator.fencing import MUTATING_METHODS, OwnerEpochs, OwnerFence
from coordinator.ports import AclBinding, FencedOwnerEpoch, GroupOffset, IsolationLevel, TopicPartition
from coordinator.states import ErrorCode
from records.segments import ControlType

SCOPE = "kip1279-workers-B"
MIRROR = "a-to-b"
ACL = AclBinding("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW")


def clusters() -> tuple[ClusterModel, ClusterModel, list[Any]]:
    """A source with data and a destination mirroring it (two topics, a group, an ACL); the
    source's batches, for appends."""
    src, dst = ClusterModel("A", seed=3, journal=False), ClusterModel("B", seed=4, journal=False)
    src.add_topic("orders", partitions=2)
    tp = src.tp("orders")
    for i in range(4):
        src.produce("orders", 0, [(b"k%d" % i, b"v%d" % i)])
    src.tick(1000)
    batches = src.fetch(tp, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches
    dst.create_topic("orders", tp.topic_id, 2, mirror_name=MIRROR, mirror_source_cluster_id=src.cluster_id())
    dst.append_mirror_batches(tp, batches[:2])
    dst.commit_group_offsets("g", [GroupOffset("g", tp.topic_id, 0, 1)])
    dst.create_acls([ACL])
    return src, dst, batches


_SRC, _DST, _BATCHES = clusters()
_TP = TopicPartition(_DST.tp("orders").topic_id, 0)
_TOPIC = _TP.topic_id

# One call of each mutating method, with arguments that change the destination when admitted.
CALLS: dict[str, tuple[Any, ...]] = {
    "create_topic": ("other", uuid.UUID(int=77), 1),
    "create_partitions": (_TOPIC, 3),
    "set_read_only": (_TOPIC, False),
    "set_mirror": (_TOPIC, None),
    "append_mirror_batches": (_TP, _BATCHES[2:]),
    "truncate_to": (_TP, 1),
    "truncate_fully_and_start_at": (_TP, 9),
    "bump_leader_epoch": (_TP, 40),
    "append_control_batch": (_TP, ControlType.MIRROR_PID_RESET),
    "set_last_mirrored_epoch": (MIRROR, _TP, 5),
    "commit_group_offsets": ("g", [GroupOffset("g", _TOPIC, 0, 2)]),
    "alter_configs": (_TOPIC, {"retention.ms": "1000"}),
    "create_acls": ([AclBinding("GROUP", "g", "LITERAL", "User:bob", "*", "READ", "ALLOW")],),
    "delete_acls": ([ACL],),
}


def test_every_mutating_port_method_is_fenced_and_every_one_is_exercised() -> None:
    assert set(CALLS) == MUTATING_METHODS
    assert FencedOwnerEpoch.error_code == ErrorCode.OWNER_EPOCH_FENCED == 1279


def request(server: ModelServer, method: str, args: tuple[Any, ...], fence: tuple[str, int] | None, batch: bool) -> Any:
    positional = METHODS[method].positional(args, {})
    if batch:
        payload = encode_request(1, "B", BATCH, [method, [positional, positional]], fence)
    else:
        payload = encode_request(1, "B", method, positional, fence)
    reply, _ = server.dispatch(bytes(payload[4:]))
    return response_decoder.decode(reply[4:])


@settings(max_examples=60, deadline=None)
@given(claimed=st.integers(1, 50),
       calls=st.lists(st.tuples(st.sampled_from(sorted(CALLS)), st.integers(0, 60), st.booleans()), min_size=1, max_size=12))
def test_a_stale_owner_epoch_never_changes_a_log_a_flag_or_a_group(claimed: int, calls: list[tuple[str, int, bool]]) -> None:
    dst = load_cluster(dump_cluster(_DST), ClusterModel)
    server = ModelServer({"B": dst})
    assert dst.claim_owner_epoch(SCOPE, claimed) == claimed
    highest = claimed
    for method, epoch, batch in calls:
        before = dump_cluster(dst)
        resp = request(server, method, CALLS[method], (SCOPE, epoch), batch)
        if epoch < highest:
            assert not resp.ok, f"{method} at owner epoch {epoch} < {highest} was admitted"
            err = decode_error(resp.result)
            assert isinstance(err, FencedOwnerEpoch) and (err.request_epoch, err.owner_epoch) == (epoch, highest)
            assert dump_cluster(dst) == before, f"a refused {method} changed the cluster"
        else:
            highest = epoch  # admitted (whatever the call's own answer): the cluster's epoch moves up
        assert dst.owner_epochs.highest[SCOPE] == highest


def test_an_unfenced_call_and_a_read_are_not_checked_and_another_group_is_its_own_scope() -> None:
    dst = load_cluster(dump_cluster(_DST), ClusterModel)
    server = ModelServer({"B": dst})
    dst.claim_owner_epoch(SCOPE, 9)
    assert request(server, "bump_leader_epoch", (_TP, 50), None, False).ok  # a tool's call, unfenced
    assert request(server, "list_offsets", (_TP,), (SCOPE, 1), False).ok  # reads carry no check
    assert request(server, "bump_leader_epoch", (_TP, 51), ("another-coordinator", 1), False).ok
    refused = request(server, "bump_leader_epoch", (_TP, 52), (SCOPE, 8), False)
    assert not refused.ok and isinstance(decode_error(refused.result), FencedOwnerEpoch)


def test_a_claim_below_the_held_epoch_is_refused_and_the_epoch_survives_a_snapshot() -> None:
    dst = load_cluster(dump_cluster(_DST), ClusterModel)
    dst.claim_owner_epoch(SCOPE, 7)
    restored = load_cluster(dump_cluster(dst), ClusterModel)
    try:
        restored.claim_owner_epoch(SCOPE, 6)
    except FencedOwnerEpoch as e:
        assert (e.request_epoch, e.owner_epoch) == (6, 7)
    else:
        raise AssertionError("a stale claim was admitted after a restart")
    assert restored.claim_owner_epoch(SCOPE, 8) == 8


@given(st.lists(st.tuples(st.sampled_from(["g1", "g2"]), st.integers(-1, 20)), max_size=30))
def test_owner_epochs_admit_exactly_the_calls_at_or_above_the_highest_so_far(calls: list[tuple[str, int]]) -> None:
    epochs, highest = OwnerEpochs(), {}
    for scope, epoch in calls:
        held = highest.get(scope, -1)
        try:
            epochs.check(scope, epoch)
            admitted = True
        except FencedOwnerEpoch:
            admitted = False
        assert admitted == (epoch >= held)
        highest[scope] = max(held, epoch)
    assert OwnerFence("g", 3) == ("g", 3)  # what a request frame carries


# ---------------------------------------------------------------- the worker's executor, on the wire


def test_a_fenced_executor_over_the_model_server_changes_nothing_once_a_newer_owner_claimed(model_server: Any) -> None:
    """The worker's path: commands planned by the executor, batched by the client, checked by the
    server. Once another owner claims a newer epoch, every command of the old one is refused,
    single or batched, and the executor sends nothing more."""
    from clustermodel.client import ClusterClient
    from coordinator.workflows import commands as c
    from streams.runner.executor import Executor
    from streams.worker.ports import ReconnectingClient

    scope = f"scope-{uuid.uuid4().hex[:8]}"
    with ClusterClient(model_server.port, "default") as admin:
        topic = f"fenced-{uuid.uuid4().hex[:8]}"
        topic_id = admin.add_topic(topic, partitions=4).topic_id
        tps = [TopicPartition(topic_id, p) for p in range(4)]
        dest = ReconnectingClient(model_server.port, "default", 5.0)
        old = Executor(dest, [set()], 1)
        old.fence = OwnerFence(scope, 5)
        assert old.run_many({tp: [c.BumpLeaderEpoch(tp, 10)] for tp in tps}) == {}  # batched: admitted at epoch 5
        old.run_one(c.BumpLeaderEpoch(tps[0], 11))  # single: admitted
        assert admin.claim_owner_epoch(scope, 6) == 6  # the new owner takes over
        epochs = [admin.list_offsets(tp).leader_epoch for tp in tps]
        failed = old.run_many({tp: [c.BumpLeaderEpoch(tp, 30), c.TruncateTo(tp, 0)] for tp in tps})
        assert set(failed) == set(tps) and all(isinstance(e, FencedOwnerEpoch) for e in failed.values())
        assert isinstance(old.fenced, FencedOwnerEpoch) and old.fenced.owner_epoch == 6
        try:
            old.run_one(c.BumpLeaderEpoch(tps[1], 40))
        except FencedOwnerEpoch:
            pass
        else:
            raise AssertionError("a fenced executor sent a command")
        assert [admin.list_offsets(tp).leader_epoch for tp in tps] == epochs

        # The owner's own check, made before every wave: a job whose worker left the generation
        # sends its first wave and nothing after it.
        new = Executor(dest, [set()], 1)
        new.fence = OwnerFence(scope, 6)
        waves = iter([True, False])
        new.owner_check = lambda: next(waves, False)
        failed = new.run_many({tp: [c.BumpLeaderEpoch(tp, 50), c.BumpLeaderEpoch(tp, 60)] for tp in tps})
        assert set(failed) == set(tps) and new.fenced is not None
        assert {admin.list_offsets(tp).leader_epoch for tp in tps} == {50}
        dest.close()


def test_a_group_whose_generation_started_again_claims_by_compare_and_set_and_a_stale_claim_cannot() -> None:
    """The destination holds epoch 12 from the group's earlier life; its coordinator lost the
    group, which starts again at generation 3. A worker confirmed in generation 3 replaces 12;
    a paused worker of generation 2 that was refused at 12 before its pause cannot replace it
    any more, and the new generation's peers claim as usual."""
    epochs = OwnerEpochs({SCOPE: 12})
    try:
        epochs.check(SCOPE, 3)
    except FencedOwnerEpoch as e:
        refused_at = e.owner_epoch
    assert epochs.check(SCOPE, 3, replace=refused_at) == 3
    try:
        epochs.check(SCOPE, 2, replace=12)  # the paused worker, waking
    except FencedOwnerEpoch as e:
        assert (e.request_epoch, e.owner_epoch) == (2, 3)
    else:
        raise AssertionError("a stale compare-and-set was admitted")
    assert epochs.check(SCOPE, 3, replace=12) == 3  # a peer of generation 3, refused at 12 too
    assert epochs.check(SCOPE, 4) == 4
