"""The local model server: malformed requests, loopback only, snapshots across restarts, async client."""

from __future__ import annotations

import asyncio
import socket
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest

from clustermodel.client import AsyncClusterClient, ClusterClient
from clustermodel.protocol import decode_error, frame, response_decoder
from clustermodel.server import is_loopback, main
from coordinator.ports import (
    ControlType,
    InvalidRequest,
    IsolationLevel,
    OffsetOutOfRange,
    PartitionOffsets,
    TopicPartition,
    UnknownTopicId,
)


def raw_exchange(port: int, data: bytes) -> Any:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        header = _recv_exact(sock, 4)
        return response_decoder.decode(_recv_exact(sock, int.from_bytes(header, "big")))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "server closed the connection"
        buf += chunk
    return buf


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1garbage",  # not msgpack
        msgspec.msgpack.encode({"id": 1}),  # not a request array
        msgspec.msgpack.encode([7, "default", "nope", []]),  # unknown method
        msgspec.msgpack.encode([8, "missing", "cluster_id", []]),  # unknown cluster
        msgspec.msgpack.encode([9, "default", "fetch", ["not a tp", 0, 10]]),  # bad argument types
        msgspec.msgpack.encode([10, "default", "list_offsets", []]),  # missing argument
    ],
)
def test_malformed_requests_get_error_replies(model_server: Any, payload: bytes) -> None:
    resp = raw_exchange(model_server.port, frame(payload))
    assert not resp.ok
    assert isinstance(decode_error(resp.result), InvalidRequest)
    with ClusterClient(model_server.port) as client:
        assert client.ping() == "pong"  # still serving


def test_oversized_frame_is_refused_and_connection_closed(model_server: Any) -> None:
    resp = raw_exchange(model_server.port, (1 << 31).to_bytes(4, "big"))
    assert not resp.ok and resp.id == -1
    with ClusterClient(model_server.port) as client:
        assert client.ping() == "pong"


def test_typed_errors_travel_back(model_server: Any) -> None:
    with ClusterClient(model_server.port) as client:
        client.add_cluster("errs", 5)
        errs = client.for_cluster("errs")
        errs.add_topic("t")
        tp = errs.tp("t")
        with pytest.raises(OffsetOutOfRange) as info:
            errs.fetch(tp, 3, 100)
        assert info.value.topic_partition == tp and info.value.leo == 0
        results = errs.pipeline([("list_offsets", (tp,)), ("fetch", (tp, 9, 10))] * 50)
        assert all(isinstance(r, PartitionOffsets) for r in results[::2])
        assert all(isinstance(r, OffsetOutOfRange) for r in results[1::2])
        errs.close()


def test_async_client_pipelines_concurrent_calls(model_server: Any) -> None:
    async def run() -> list[Any]:
        async with AsyncClusterClient(model_server.port) as client:
            await client.call("add_cluster", "async1", 3, 3)
        async with AsyncClusterClient(model_server.port, "async1") as client:
            await client.add_topic("t", 1)
            tp = await client.tp("t", 0)
            await client.produce("t", 0, [(b"k", b"v")])
            outs = await asyncio.gather(*(client.list_offsets(tp) for _ in range(200)), return_exceptions=True)
            with pytest.raises(OffsetOutOfRange):
                await client.fetch(tp, 5, 10)
            return outs

    outs = asyncio.run(run())
    assert len(outs) == 200 and all(o.leo == 1 for o in outs)


def test_non_loopback_host_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.com")
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert main(["--host", "0.0.0.0"]) == 2
    assert "loopback" in capsys.readouterr().err


def test_snapshot_survives_server_restart(server_factory: Any, tmp_path: Path) -> None:
    snapshot = tmp_path / "clusters.msgpack"
    first = server_factory("--cluster", "a", "--cluster", "b", "--seed", "4", "--snapshot", str(snapshot))
    with ClusterClient(first.port, "a") as a:
        a.add_topic("orders", 2)
        a.produce("orders", 1, [(b"k", b"v1"), (b"k", b"v2")])
        a.init_producer_id("tx")
        a.begin_transaction("tx")
        a.produce_transactional("tx", "orders", 1, [(b"k", b"open")])
        tp = a.tp("orders", 1)
        before = a.list_offsets(tp)
        cluster_id = a.cluster_id()
    assert first.stop() == 0 and snapshot.exists()
    second = server_factory("--cluster", "a", "--snapshot", str(snapshot))
    with ClusterClient(second.port, "a") as a:
        assert a.cluster_id() == cluster_id
        assert a.list_offsets(tp) == before
        assert [o.first_offset for o in a.open_transactions(tp)] == [2]
        a.commit_transaction("tx")  # the transaction coordinator state survived too
        assert a.list_offsets(tp).lso == 4
        assert sorted(a.call("list_clusters")) == ["a", "b"]


def test_long_pipeline_of_large_requests_does_not_deadlock(model_server: Any) -> None:
    with ClusterClient(model_server.port, timeout=20) as admin:
        admin.add_cluster("big", 6)
    with ClusterClient(model_server.port, "big", timeout=20) as client:
        client.add_topic("t", 1, 1)
        replies = client.pipeline([("produce", ("t", 0, [(None, b"z" * 65536)]))] * 300)
        assert [r.base_offset for r in replies] == list(range(300))
        tp = client.tp("t")
        fetched = client.pipeline([("fetch", (tp, i, 1 << 20)) for i in range(0, 300, 10)])
        assert all(f.batches for f in fetched)


def test_a_small_pipeline_needs_no_selector_and_a_long_one_keeps_its_own(model_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # A copy job's two round trips each made (and closed) a selector: syscalls and Python per call.
    import selectors

    made: list[Any] = []
    real = selectors.DefaultSelector
    monkeypatch.setattr(selectors, "DefaultSelector", lambda: made.append(1) or real())
    with ClusterClient(model_server.port, timeout=20) as admin:
        admin.add_cluster("sel", 7)
    with ClusterClient(model_server.port, "sel", timeout=20) as client:
        client.add_topic("t", 1, 1)
        tp = client.tp("t")
        for _ in range(3):
            assert [type(r) for r in client.pipeline([("list_offsets", (tp,)), ("fetch", (tp, 9, 10))])] == [
                PartitionOffsets, OffsetOutOfRange]
        assert made == []
        for _ in range(2):  # requests larger than the socket buffers: sent and read interleaved
            replies = client.pipeline([("produce", ("t", 0, [(None, b"z" * 65536)]))] * 4)
            assert len(replies) == 4 and not any(isinstance(r, BaseException) for r in replies)
        assert made == [1]
        assert client.list_offsets(tp).leo == 8


def test_call_many_batches_per_method_and_answers_each_call_on_its_own(model_server: Any) -> None:
    with ClusterClient(model_server.port, timeout=20) as admin:
        admin.add_cluster("many", 8)
    with ClusterClient(model_server.port, "many", timeout=20) as client:
        client.add_topic("t", 3)
        tps = [client.tp("t", p) for p in range(3)]
        for p, n in enumerate((1, 2, 3)):
            client.produce("t", p, [(None, b"x")] * n)
        unknown = TopicPartition(uuid.UUID(int=7), 0)
        sent: list[Any] = []
        pipeline = client.pipeline
        client.pipeline = lambda calls: sent.append(list(calls)) or pipeline(calls)  # type: ignore[method-assign]
        calls: list[Any] = [("list_offsets", (tp,), None) for tp in tps]
        calls += [("list_offsets", (unknown,), None), ("describe_topics", (), None),
                  ("fetch", (tps[2], 1, 1 << 20), {"isolation": IsolationLevel.READ_COMMITTED}),
                  ("fetch", (tps[0], 9, 1 << 20), None)]  # fmt: skip
        got = client.call_many(calls)
        # one round trip: the four ListOffsets in one batch request, the two fetches in another
        assert len(sent) == 1 and sorted(c[0] for c in sent[0]) == ["batch", "batch", "describe_topics"]
        assert [o.leo for o in got[:3]] == [1, 2, 3]
        assert isinstance(got[3], UnknownTopicId)  # one failing call fails only itself
        assert [t.name for t in got[4]] == ["t"]  # a list result from a lone call stays whole
        assert got[5].batches and got[5].batches[0].last_offset == 2  # the batch holding offset 1
        assert isinstance(got[6], OffsetOutOfRange)
        assert [r.leo for r in client.call_many([("list_offsets", (tps[1],), None)])] == [2]


def test_a_batch_with_a_malformed_call_answers_the_others(model_server: Any) -> None:
    """A batch's calls are decoded at once; one malformed call sends the batch down the call-by-call
    path, so it alone fails (InvalidRequest) and the others are answered in order."""
    with ClusterClient(model_server.port, timeout=20) as admin:
        admin.add_cluster("malformed", 9)
    with ClusterClient(model_server.port, "malformed", timeout=20) as client:
        client.add_topic("t", 2)
        tps = [client.tp("t", p) for p in range(2)]
        client.produce("t", 1, [(None, b"x")])
        got = client.pipeline([("batch", ("list_offsets", [[tps[0]], ["not a partition"], [tps[1]]]))])[0]
        assert [o.leo for o in (got[0], got[2])] == [0, 1]
        assert isinstance(got[1], InvalidRequest) and "bad arguments for list_offsets" in str(got[1])


def test_a_stop_in_batches_leaves_the_logs_of_the_same_calls_one_by_one(server_factory: Any) -> None:
    """The stop's destination calls (LME, bump, ABORT of open transactions, MIRROR_PID_RESET) sent
    as the worker sends them (call_many: one batch per method) leave every replica's log, epoch
    cache, producer state and offsets exactly as the same calls made one at a time."""
    server = server_factory("--cluster", "default", "--no-kafka-listeners")
    with ClusterClient(server.port, timeout=20) as admin:
        for name in ("batched", "single"):
            admin.add_cluster(name, 4)  # the same seed: the same placement, producer IDs, clock
    clients = {n: ClusterClient(server.port, n, timeout=30) for n in ("batched", "single")}
    try:
        for c in clients.values():
            c.add_topic("t", 6)
            c.init_producer_id("txn")
            c.begin_transaction("txn")
            for p in (1, 4):  # two partitions with an open transaction to abort
                c.produce_transactional("txn", "t", p, [(None, b"open")])
            for p in range(6):
                c.produce("t", p, [(None, b"x")] * (p + 1))
        tps = {n: [c.tp("t", p) for p in range(6)] for n, c in clients.items()}
        opens = {(n, tp): c.open_transactions(tp) for n, c in clients.items() for tp in tps[n]}
        assert sum(map(len, opens.values())) == 4

        def stop_calls(name: str, tp: TopicPartition) -> list[list[Any]]:
            aborts = [("append_control_batch", (tp, ControlType.ABORT, t.producer_id, t.producer_epoch), None)
                      for t in opens[name, tp]]  # fmt: skip
            return [[("set_last_mirrored_epoch", ("m", tp, 0), None)], [("bump_leader_epoch", (tp, 7), None)],
                    aborts, [("append_control_batch", (tp, ControlType.MIRROR_PID_RESET, -1, -1, "src"), None)]]  # fmt: skip

        for position in range(4):  # the worker's waves: every partition's i-th calls together
            wave = [call for tp in tps["batched"] for call in stop_calls("batched", tp)[position]]
            assert not any(isinstance(r, Exception) for r in clients["batched"].call_many(wave))
            for tp in tps["single"]:
                for method, args, _ in stop_calls("single", tp)[position]:
                    clients["single"].call(method, *args)
        seen = {}
        for name, c in clients.items():
            seen[name] = [(c.fetch(tp, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED), c.list_offsets(tp),
                           c.isr_status(tp).replicas, c.open_transactions(tp), c.latest_epoch(tp),
                           c.end_offset_for_epoch(tp, 0), c.last_mirrored_epoch("m", tp)) for tp in tps[name]]  # fmt: skip
        assert seen["batched"] == seen["single"]
        assert all(fetched.batches[-1].control_type == ControlType.MIRROR_PID_RESET for fetched, *_ in seen["batched"])
    finally:
        for c in clients.values():
            c.close()
