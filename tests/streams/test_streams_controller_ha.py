"""Standby controllers (issue #36) on a real broker: a standby serves reads and sends writes to
the active one (NOT_CONTROLLER with its endpoint); a fenced controller steps down, never answering
UNKNOWN_SERVER_ERROR; a standby takes over a silent active within its session timeout; a retried
request is applied once and gets the first answer, and a --stop whose connection broke says so
truthfully."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from coordinator.states import ErrorCode, MirrorState
from records.framing import ApiMessageAndVersion
from records.registry import default_schemas
from streams.admin import cli
from streams.admin.client import ClusterMirrorAdmin
from streams.admin.controller import ClusterMirrorController
from streams.config import WorkerConfig, ensure_topics, metadata_topic_spec
from streams.state import mirror_state_codec as mss
from streams.state.metadata_log import MetadataLogReader, MetadataLogWriter
from controller_rig import die_inside_a_transaction

pytestmark = pytest.mark.brokers("noida-db", "apache-kafka")

S = default_schemas()
ADMIN = "User:admin"
TOPICS = {"orders": uuid.UUID(int=101), "payments": uuid.UUID(int=102)}


def amv(_message: str, /, **fields: object) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(S.struct(_message)(**fields), 0, S.spec(_message).api_key)  # type: ignore[arg-type]


def endpoint(c: ClusterMirrorController) -> str:
    assert c.address is not None
    return f"{c.address[0]}:{c.address[1]}"


def member(cfg: WorkerConfig, name: str, tmp_path: Path) -> ClusterMirrorController:
    own = dataclasses.replace(cfg, controller_id=name, data_dir=str(tmp_path / name))
    return ClusterMirrorController(own, super_users=frozenset({ADMIN}))


@pytest.fixture
async def pair(worker_config: WorkerConfig, tmp_path: Path) -> AsyncIterator[tuple[ClusterMirrorController, ClusterMirrorController]]:
    first, second = member(worker_config, "c1", tmp_path), member(worker_config, "c2", tmp_path)
    await first.start()
    try:
        await second.start()
        try:
            records = [amv("TopicRecord", name=n, topic_id=t) for n, t in TOPICS.items()]
            records += [amv("PartitionRecord", partition_id=0, topic_id=t, replicas=(1,), isr=(1,), leader=1) for t in TOPICS.values()]
            await first.append(records)
            async with ClusterMirrorAdmin(endpoint(first), principal=ADMIN) as a:
                assert (await a.create("a-to-b", {"bootstrap.servers": "127.0.0.1:1"})).response.error_code == 0  # type: ignore[attr-defined]
                assert (await a.start("a-to-b", list(TOPICS))).response.error_code == 0  # type: ignore[attr-defined]
            await mirroring(worker_config)
            yield first, second
        finally:
            await second.stop()
    finally:
        await first.stop()


async def mirroring(cfg: WorkerConfig) -> None:
    """What the workers would persist: every partition MIRRORING on __mirror_state."""
    codec = mss.default_codec()
    producer = AIOKafkaProducer(bootstrap_servers=cfg.bootstrap_servers)
    await producer.start()
    try:
        for tid in TOPICS.values():
            key = codec.state_key("a-to-b", tid, 0)
            value = codec.encode_value(codec.state_value(state=int(MirrorState.MIRRORING), retry_attempt=0, error_message=None))
            await producer.send_and_wait(cfg.mirror_state_topic_name, key=key, value=value,
                                         partition=mss.partition_for_key(key, cfg.state_partitions))  # fmt: skip
    finally:
        await producer.stop()


async def caught_up(c: ClusterMirrorController, offset: int) -> None:
    deadline = time.monotonic() + 10
    while c.metadata_offset < offset:
        assert time.monotonic() < deadline, f"{c.controller_id} stuck at {c.metadata_offset} < {offset}"
        await asyncio.sleep(0.02)


async def log_records(cfg: WorkerConfig) -> list[object]:
    async with MetadataLogReader(cfg.bootstrap_servers, cfg.metadata_topic_name, dlq=None) as reader:
        return [e.record.message async for e in reader.read(0, follow=False)]  # type: ignore[union-attr]


async def test_a_standby_serves_reads_and_sends_writes_to_the_active_one(pair: tuple[ClusterMirrorController, ...]) -> None:
    first, second = pair
    assert first.active and not second.active
    await caught_up(second, first.metadata_offset)
    async with ClusterMirrorAdmin(endpoint(second), principal=ADMIN, retry_timeout=0) as a:
        described = (await a.describe(["a-to-b"], offsets=False)).response
        assert described.error_code == 0 and described.mirrors[0].mirror_name == "a-to-b"  # type: ignore[attr-defined]
        assert [m.mirror_name for m in (await a.list()).response.mirrors] == ["a-to-b"]  # type: ignore[attr-defined]
        refused = await a._call_once("PauseMirrorTopics", a._req("PauseMirrorTopics", mirror_name="a-to-b",
                                     topics=a._topics("PauseMirrorTopics", ["orders"]), state_validation_offset=-1), 0, uuid.uuid4())  # fmt: skip
    assert refused.response.error_code == ErrorCode.NOT_CONTROLLER  # type: ignore[attr-defined]
    assert refused.active_controller == endpoint(first)
    assert endpoint(first) in refused.response.error_message  # type: ignore[attr-defined]
    # The CLI given both endpoints, the standby's first, follows the answer to the active one.
    async with ClusterMirrorAdmin(f"{endpoint(second)},{endpoint(first)}", principal=ADMIN) as a:
        stopped = (await a.stop("a-to-b", ["orders"])).response
        assert stopped.error_code == 0 and stopped.topics[0].error_code == 0, stopped  # type: ignore[attr-defined]
        assert a.retries == 1


async def test_a_fenced_controller_steps_down_answers_not_controller_and_keeps_serving_reads(
        pair: tuple[ClusterMirrorController, ...], worker_config: WorkerConfig) -> None:  # fmt: skip
    first, second = pair
    # Another writer of the log fences the active one, as a second controller's start did.
    intruder = MetadataLogWriter(worker_config.bootstrap_servers, worker_config.metadata_topic_name)
    await intruder.start()
    await intruder.stop()
    async with ClusterMirrorAdmin(endpoint(first), principal=ADMIN, retry_timeout=0) as a:
        r = await a._call_once("PauseMirrorTopics", a._req("PauseMirrorTopics", mirror_name="a-to-b",
                               topics=a._topics("PauseMirrorTopics", ["orders"]), state_validation_offset=-1), 0, uuid.uuid4())  # fmt: skip
        assert r.response.error_code == ErrorCode.NOT_CONTROLLER, r  # type: ignore[attr-defined]
        assert not first.active
        assert (await a.describe(["a-to-b"], offsets=False)).response.error_code == 0  # type: ignore[attr-defined]
    # No active controller is left: the lowest id of the live ones (c1) takes over again, a term later.
    deadline = time.monotonic() + worker_config.controller_session_timeout_ms / 1000 + 5
    while not (first.active or second.active):
        assert time.monotonic() < deadline, "no controller took over"
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)
    assert [c.controller_id for c in pair if c.active] == ["c1"]
    # A controller that takes over from a live one (forced here) makes the other step down when
    # it reads the new term, with no write needed.
    await second.control.take_over()
    deadline = time.monotonic() + 5
    while first.active:
        assert time.monotonic() < deadline, "c1 did not step down"
        await asyncio.sleep(0.02)
    async with ClusterMirrorAdmin(f"{endpoint(first)},{endpoint(second)}", principal=ADMIN) as a:
        stopped = (await a.stop("a-to-b", ["payments"])).response
        assert stopped.error_code == 0 and stopped.topics[0].error_code == 0, stopped  # type: ignore[attr-defined]
    terms = [m for m in await log_records(worker_config) if type(m).__name__ == "ClusterMirrorControllerRecord"]
    assert [t.controller_id for t in terms] == ["c1", "c1", "c2"]  # type: ignore[attr-defined]
    assert [t.epoch for t in terms] == sorted({t.epoch for t in terms})  # type: ignore[attr-defined]


async def test_a_standby_takes_over_a_silent_active_within_its_session_timeout(
        pair: tuple[ClusterMirrorController, ...], worker_config: WorkerConfig) -> None:  # fmt: skip
    first, second = pair
    # The active one goes silent, as a SIGKILLed one: no heartbeat, no answer.
    assert first.control._election is not None and first._server is not None
    first.control._election.cancel()
    first._server.close()
    silent_at = time.monotonic()
    session = worker_config.controller_session_timeout_ms / 1000
    while not second.active:
        assert time.monotonic() - silent_at < session + 3, "the standby did not take over"
        await asyncio.sleep(0.02)
    took = time.monotonic() - silent_at
    assert took <= session + 1.5, took
    async with ClusterMirrorAdmin(f"{endpoint(first)},{endpoint(second)}", principal=ADMIN) as a:
        stopped = (await a.stop("a-to-b", ["orders"])).response
        assert stopped.error_code == 0 and stopped.topics[0].error_code == 0, stopped  # type: ignore[attr-defined]


async def test_a_retried_request_is_applied_once_and_gets_the_first_answer(
        pair: tuple[ClusterMirrorController, ...], worker_config: WorkerConfig) -> None:  # fmt: skip
    first, second = pair
    rid = uuid.uuid4()
    async with ClusterMirrorAdmin(endpoint(first), principal=ADMIN) as a:
        body = a._req("StopMirrorTopics", mirror_name="a-to-b", topics=a._topics("StopMirrorTopics", ["orders"]),
                      patterns=[], state_validation_offset=-1, consistent_cut=False)  # fmt: skip
        once = await a.call("StopMirrorTopics", body, request_id=rid)
        again = await a.call("StopMirrorTopics", body, request_id=rid)
    await caught_up(second, once.metadata_offset)
    async with ClusterMirrorAdmin(endpoint(second), principal=ADMIN, retry_timeout=0) as b:
        from_standby = await b.call("StopMirrorTopics", body, request_id=rid)  # the log has the answer
    assert once.response.error_code == 0 and once.response.topics[0].error_code == 0  # type: ignore[attr-defined]
    assert again.response == once.response == from_standby.response
    messages = await log_records(worker_config)
    stops = [m for m in messages if type(m).__name__ == "MirrorTopicStateChangeRecord" and m.desired_state == 1]  # type: ignore[attr-defined]
    assert len(stops) == 1
    kept = [m for m in messages if type(m).__name__ == "ClusterMirrorRequestRecord" and m.request_id == rid]  # type: ignore[attr-defined]
    assert len(kept) == 1 and S.decode("StopMirrorTopicsResponse", kept[0].response, 0) == once.response  # type: ignore[attr-defined]


async def test_a_stop_whose_connection_broke_is_retried_and_reported_as_applied(
        pair: tuple[ClusterMirrorController, ...], worker_config: WorkerConfig, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    first, _ = pair
    from streams.admin import controller as module

    real = module.encode_response
    broke: list[int] = []

    def break_the_first_stop_answer(correlation_id, offset, response, *rest, **kw):  # type: ignore[no-untyped-def]
        if type(response).__name__ == "StopMirrorTopicsResponse" and not broke:  # applied; its answer is lost
            broke.append(offset)
            raise ConnectionResetError("the connection broke")
        return real(correlation_id, offset, response, *rest, **kw)

    monkeypatch.setattr(module, "encode_response", break_the_first_stop_answer)
    out, err = io.StringIO(), io.StringIO()
    os.environ["KIP1279_PRINCIPAL"] = ADMIN
    try:
        code = await asyncio.to_thread(cli.main, ["--bootstrap-server", endpoint(first), "--stop", "--mirror", "a-to-b",
                                                  "--topics", "orders"], out, err)  # fmt: skip
    finally:
        os.environ.pop("KIP1279_PRINCIPAL", None)
    assert broke, "the stop's connection was not broken"
    assert code == 0, (out.getvalue(), err.getvalue())
    assert "orders" in out.getvalue() and "Error" not in out.getvalue()
    stops = [m for m in await log_records(worker_config)
             if type(m).__name__ == "MirrorTopicStateChangeRecord" and m.desired_state == 1]  # type: ignore[attr-defined]  # fmt: skip
    assert len(stops) == 1


async def test_a_stop_no_controller_answers_says_that_whether_it_applied_is_unknown() -> None:
    async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)  # the request came; the controller dies before answering
        writer.close()

    server = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    out, err = io.StringIO(), io.StringIO()
    try:
        code = await asyncio.to_thread(cli.main, ["--bootstrap-server", f"127.0.0.1:{port}", "--retry-timeout", "0.5",
                                                  "--stop", "--mirror", "a-to-b", "--topics", "orders"], out, err)  # fmt: skip
    finally:
        server.close()
    assert code == 1
    assert "whether it was applied is unknown" in err.getvalue() and "StopMirrorTopics request" in err.getvalue()


async def test_a_controller_restarted_over_a_dead_writers_open_transaction_serves_at_once(
        worker_config: WorkerConfig, tmp_path: Path) -> None:  # fmt: skip
    first = member(worker_config, "c1", tmp_path)
    await first.start()
    await first.stop()
    die_inside_a_transaction(worker_config)
    t0 = time.monotonic()
    second = member(worker_config, "c1", tmp_path)
    await second.start()
    try:
        took = time.monotonic() - t0
        assert second.active
        assert took <= 5.0, took
        names = [type(m).__name__ for m in await log_records(worker_config)]
        assert "NoOpRecord" not in names  # aborted by the new writer's fencing, never replayed
    finally:
        await second.stop()


async def test_a_read_committed_fetch_past_an_aborted_transaction_returns_that_producers_later_records(
        worker_config: WorkerConfig) -> None:  # fmt: skip
    """noida-db 0.2.3 lists an aborted transaction in every later fetch, also one from past its
    ABORT marker; aiokafka alone would drop every later batch of that producer ID, which a
    transactional id keeps across epochs. The metadata log's reader keeps a batch its
    producer's next marker commits (``streams.state.aborted_transactions``), on both brokers."""
    await ensure_topics(worker_config.bootstrap_servers, [metadata_topic_spec(worker_config.metadata_topic_name)])
    die_inside_a_transaction(worker_config)
    async with MetadataLogWriter(worker_config.bootstrap_servers, worker_config.metadata_topic_name) as writer:
        [offset] = await writer.append([amv("NoOpRecord")])
    async with MetadataLogReader(worker_config.bootstrap_servers, worker_config.metadata_topic_name, dlq=None) as reader:
        assert [e.offset async for e in reader.read(0, follow=False)] == [offset]
        assert [e.offset async for e in reader.read(offset, follow=False)] == [offset]


def test_a_mass_stops_kept_answer_stays_under_a_records_size_with_its_refused_topics(tmp_path: Path) -> None:
    from streams.admin.client import RequestHeader
    from streams.admin.control_plane import MAX_KEPT_RESPONSE_BYTES

    c = ClusterMirrorController(WorkerConfig(data_dir=str(tmp_path), controller_listener="127.0.0.1:0"))
    result = S.nested("StopMirrorTopicsResponse", "TopicResult")
    topics = [result(name=f"orders-{i:06d}-{'x' * 40}", error_code=145 if i % 1000 == 0 else 0, error_message=None)
              for i in range(20_000)]  # fmt: skip
    response = S.struct("StopMirrorTopicsResponse")(throttle_time_ms=0, error_code=0, error_message=None, topics=topics)
    assert len(S.encode(response, 0)) > MAX_KEPT_RESPONSE_BYTES
    record = c.control.request_record(uuid.uuid4(), RequestHeader(96, 0, 1, "t", None), response)
    assert len(record.message.response) < MAX_KEPT_RESPONSE_BYTES  # type: ignore[attr-defined]
    kept = S.decode("StopMirrorTopicsResponse", record.message.response, 0)  # type: ignore[attr-defined]
    assert [t.name for t in kept.topics] == [t.name for t in topics if t.error_code]
    small = response.__class__(throttle_time_ms=0, error_code=0, error_message=None, topics=tuple(topics[:10]))
    assert S.decode("StopMirrorTopicsResponse", c.control.request_record(uuid.uuid4(), RequestHeader(96, 0, 1, "t", None), small)
                    .message.response, 0) == small  # type: ignore[attr-defined]  # fmt: skip
