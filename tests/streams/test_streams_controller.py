"""The controller and ``kafka-cluster-mirrors`` on a real broker: KIP error codes, ACLs,
redaction of credentials, StateValidationOffset races, describe and progress."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from coordinator.image import AclOperation
from coordinator.states import ErrorCode, MirrorState
from records.framing import ApiMessageAndVersion
from records.redact import REDACTED
from records.registry import default_schemas
from streams.admin import cli
from streams.state import mirror_state_codec as mss
from streams.admin.client import ClusterMirrorAdmin
from streams.config import WorkerConfig
from streams.admin.controller import ClusterMirrorController
from streams.state.changelog_view import MirrorStateChangelogView

# Each broker test runs on noida-db and on Apache Kafka (tests/streams/conftest.py).
pytestmark = pytest.mark.brokers("noida-db", "apache-kafka")

S = default_schemas()
ADMIN = "User:admin"
SECRET = "pa55-w0rd-XYZZY"
TOPICS = {"orders": uuid.UUID(int=101), "payments": uuid.UUID(int=102), "audit": uuid.UUID(int=103)}


def amv(_message: str, /, **fields: object) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(S.struct(_message)(**fields), 0, S.spec(_message).api_key)  # type: ignore[arg-type]


@pytest.fixture
async def controller(worker_config: WorkerConfig) -> AsyncIterator[ClusterMirrorController]:
    c = ClusterMirrorController(worker_config, super_users=frozenset({ADMIN}))
    await c.start()
    try:
        records = []
        for name, tid in TOPICS.items():
            records.append(amv("TopicRecord", name=name, topic_id=tid))
            records += [amv("PartitionRecord", partition_id=p, topic_id=tid, replicas=(1,), isr=(1,), leader=1)
                        for p in range(2)]
        await c.append(records)  # the destination's topics, as the metadata sync would record them
        yield c
    finally:
        await c.stop()


def endpoint(c: ClusterMirrorController) -> str:
    assert c.address is not None
    return f"{c.address[0]}:{c.address[1]}"


async def run_cli(c: ClusterMirrorController, *argv: str, principal: str = ADMIN) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = ["--bootstrap-server", endpoint(c), *argv]

    def call() -> int:
        import os

        os.environ["KIP1279_PRINCIPAL"] = principal
        try:
            return cli.main(args, out=out, err=err)
        finally:
            os.environ.pop("KIP1279_PRINCIPAL", None)

    code = await asyncio.to_thread(call)
    return code, out.getvalue(), err.getvalue()


def mirror_config(tmp_path: Path) -> Path:
    path = tmp_path / "a-to-b.properties"
    path.write_text(
        "bootstrap.servers=127.0.0.1:19092\n"
        "security.protocol=SASL_SSL\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" password=\"{SECRET}\";\n"
        f"ssl.truststore.password={SECRET}\n"
    )
    return path


async def create_mirror(c: ClusterMirrorController, tmp_path: Path) -> None:
    code, out, _ = await run_cli(c, "--create", "--mirror", "a-to-b", "--mirror-config", str(mirror_config(tmp_path)))
    assert code == 0, out


async def test_create_redacts_credentials_everywhere(controller: ClusterMirrorController, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    code, out, err = await run_cli(controller, "--verbose", "--create", "--mirror", "a-to-b",
                                   "--mirror-config", str(mirror_config(tmp_path)))
    assert code == 0 and "Created cluster mirror a-to-b" in out and REDACTED in out
    again = await run_cli(controller, "--create", "--mirror", "a-to-b", "--mirror-config", str(mirror_config(tmp_path)))
    assert again[0] == 1 and "CLUSTER_MIRROR_ALREADY_EXISTS" in again[1]
    listed = await run_cli(controller, "--list")
    described = await run_cli(controller, "--describe", "--json")
    everything = out + err + again[1] + again[2] + listed[1] + described[1] + caplog.text
    assert "a-to-b" in listed[1] and "127.0.0.1:19092" in listed[1]
    assert "a-to-b" in caplog.text  # the controller did log the request...
    assert SECRET not in everything  # ...but never the credentials


MIRRORING_ALL = {(t, p): (MirrorState.MIRRORING, 0, None) for t in ("orders", "payments") for p in range(2)}


async def test_refused_requests_get_kip_error_codes(controller: ClusterMirrorController, worker_config: WorkerConfig,
                                                    tmp_path: Path) -> None:
    async with ClusterMirrorAdmin(endpoint(controller), principal=ADMIN) as a:
        r = (await a.start("nope", ["orders"])).response
        assert r.error_code == ErrorCode.UNKNOWN_CLUSTER_MIRROR
        await create_mirror(controller, tmp_path)
        r = (await a.start("a-to-b", ["orders", "payments"])).response
        assert r.error_code == 0 and [t.error_code for t in r.topics] == [0, 0]
        offset = controller.metadata_offset
        r = (await a.start("a-to-b", ["orders"])).response  # already started: accepted, nothing to write
        assert [t.error_code for t in r.topics] == [ErrorCode.NONE] and controller.metadata_offset == offset
        r = (await a.stop("a-to-b", ["audit"])).response
        assert [(t.name, t.error_code) for t in r.topics] == [("audit", ErrorCode.TOPIC_NOT_IN_CLUSTER_MIRROR)]
        assert r.topics[0].error_message
        r = (await a.pause("a-to-b", ["orders"])).response  # no worker has reported a state yet
        assert r.topics[0].error_code == ErrorCode.INVALID_CLUSTER_MIRROR_STATES and "UNKNOWN" in r.topics[0].error_message
        await _write_states(worker_config, MIRRORING_ALL)
        r = (await a.pause("a-to-b", ["orders"])).response
        assert r.topics[0].error_code == 0
        r = (await a.pause("a-to-b", ["orders"])).response
        assert r.topics[0].error_code == ErrorCode.MIRROR_TOPIC_ALREADY_PAUSED
        r = (await a.resume("a-to-b", ["payments"])).response
        assert r.topics[0].error_code == ErrorCode.MIRROR_TOPIC_NOT_PAUSED
        r = (await a.delete("a-to-b")).response
        assert r.error_code == ErrorCode.CLUSTER_MIRROR_NOT_EMPTY
    # Only the accepted commands reached the metadata log.
    members = controller.image.mirrors.topics
    assert {m.topic_id: int(m.desired_state) for m in members.values()} == {TOPICS["orders"]: 2, TOPICS["payments"]: 0}
    code, out, _ = await run_cli(controller, "--stop", "--mirror", "a-to-b", "--topics", "audit")
    assert code == 1 and "TOPIC_NOT_IN_CLUSTER_MIRROR" in out


async def test_authorization_denial_and_grant(controller: ClusterMirrorController, tmp_path: Path) -> None:
    await create_mirror(controller, tmp_path)
    offset_before = controller.metadata_offset
    code, out, _ = await run_cli(controller, "--start", "--mirror", "a-to-b", "--topics", "orders", principal="User:bob")
    assert code == 1 and "CLUSTER_MIRROR_AUTHORIZATION_FAILED" in out
    assert controller.metadata_offset == offset_before  # a denied command appends nothing
    code, out, _ = await run_cli(controller, "--describe", "--mirror", "a-to-b", principal="User:bob")
    assert code == 1 and "CLUSTER_MIRROR_AUTHORIZATION_FAILED" in out
    code, out, _ = await run_cli(controller, "--list", principal="User:bob")
    assert code == 0 and "a-to-b" not in out  # unauthorized mirrors are left out of a listing
    await controller.create_acls("User:bob", [AclOperation.ALTER], mirror="a-to-b")
    code, out, _ = await run_cli(controller, "--start", "--mirror", "a-to-b", "--topics", "orders", principal="User:bob")
    assert code == 0, out
    async with ClusterMirrorAdmin(endpoint(controller), principal="User:bob") as bob:
        r = (await bob.delete("a-to-b")).response
        assert r.error_code == ErrorCode.CLUSTER_MIRROR_AUTHORIZATION_FAILED  # ALTER does not grant DELETE
        r = (await bob.create("b-to-a", {"bootstrap.servers": "x:1"})).response
        assert r.error_code == ErrorCode.CLUSTER_MIRROR_AUTHORIZATION_FAILED


async def test_state_validation_offset_refuses_a_raced_request(controller: ClusterMirrorController, tmp_path: Path) -> None:
    await create_mirror(controller, tmp_path)
    async with ClusterMirrorAdmin(endpoint(controller), principal=ADMIN) as alice, \
            ClusterMirrorAdmin(endpoint(controller), principal=ADMIN) as bob:
        await alice.start("a-to-b", ["orders", "payments"])
        await _write_states(controller.config, MIRRORING_ALL)
        seen = (await alice.describe(["a-to-b"])).metadata_offset
        assert seen == controller.metadata_offset
        assert (await bob.pause("a-to-b", ["orders"])).response.topics[0].error_code == 0  # bob gets there first
        raced = (await alice.stop("a-to-b", ["orders"], state_validation_offset=seen)).response
        assert raced.error_code == ErrorCode.INVALID_CLUSTER_MIRROR_STATES and "orders" in raced.error_message
        assert controller.image.mirrors.topics[TOPICS["orders"]].desired_state == 2  # still paused, not stopped
        fresh = (await alice.describe(["a-to-b"])).metadata_offset
        ok = (await alice.stop("a-to-b", ["payments"], state_validation_offset=fresh)).response
        assert ok.error_code == 0 and ok.topics[0].error_code == 0
    code, out, _ = await run_cli(controller, "--stop", "--mirror", "a-to-b", "--topics", "orders", "--validate-states")
    assert code == 0, out


async def _write_states(cfg: WorkerConfig, states: dict[tuple[str, int], tuple[MirrorState, int, str | None]]) -> None:
    """What the workers persist: MirrorPartitionState records on __mirror_state."""
    codec = mss.default_codec()
    producer = AIOKafkaProducer(bootstrap_servers=cfg.bootstrap_servers)
    await producer.start()
    try:
        for (topic, p), (state, retries, error) in states.items():
            key = codec.state_key("a-to-b", TOPICS[topic], p)
            value = codec.encode_value(codec.state_value(state=int(state), retry_attempt=retries, error_message=error))
            await producer.send_and_wait(cfg.mirror_state_topic_name, key=key, value=value,
                                         partition=mss.partition_for_key(key, cfg.state_partitions))
    finally:
        await producer.stop()


async def test_describe_failed_and_mass_stop_progress(controller: ClusterMirrorController, worker_config: WorkerConfig,
                                                      tmp_path: Path) -> None:
    await create_mirror(controller, tmp_path)
    code, out, _ = await run_cli(controller, "--start", "--mirror", "a-to-b", "--topics", ".*", "--exclude", "audit")
    assert code == 0, out
    assert {m.topic_id for m in controller.image.mirrors.topics.values()} == {TOPICS["orders"], TOPICS["payments"]}
    await _write_states(worker_config, {("orders", 0): (MirrorState.MIRRORING, 0, None),
                                        ("orders", 1): (MirrorState.FAILED, 3, "source unreachable"),
                                        ("payments", 0): (MirrorState.MIRRORING, 0, None)})
    code, out, _ = await run_cli(controller, "--describe", "--mirror", "a-to-b", "--json", "--failed")
    rows = json.loads(out)
    assert [(r["topic"], r["partition"], r["state"], r["retryAttempt"], r["errorMessage"]) for r in rows] == \
        [("orders", 1, "FAILED", 3, "source unreachable")]
    code, table, _ = await run_cli(controller, "--describe")
    assert "SOURCE-OFFSET" in table and "DESTINATION-OFFSET" in table and "UNKNOWN" in table  # payments-1 has no state yet
    await _write_states(worker_config, {("payments", 1): (MirrorState.MIRRORING, 0, None)})

    async def workers_stop_partitions() -> None:
        await asyncio.sleep(0.8)
        for key in [("orders", 0), ("orders", 1), ("payments", 0)]:
            await _write_states(worker_config, {key: (MirrorState.STOPPED, 0, None)})
            await asyncio.sleep(0.6)
        await _write_states(worker_config, {("payments", 1): (MirrorState.STOPPED, 0, None)})

    stopper = asyncio.create_task(workers_stop_partitions())
    code, out, err = await run_cli(controller, "--stop", "--mirror", "a-to-b", "--topics", ".*", "--wait", "30")
    await stopper
    assert code == 0, out + err
    progress = [line for line in err.splitlines() if "partitions STOPPED" in line]
    assert progress[-1] == "4/4 partitions STOPPED" and len(progress) >= 3  # it showed the way there
    assert progress[0].startswith(("0/4", "1/4"))


async def test_controller_restart_loads_its_snapshot_and_the_tail(worker_config: WorkerConfig, tmp_path: Path) -> None:
    from coordinator.delta import replay_log
    from streams.state.metadata_log import MetadataLogReader
    from streams.state.snapshots import SnapshotPolicy

    first = ClusterMirrorController(worker_config, super_users=frozenset({ADMIN}),
                                    snapshot_policy=SnapshotPolicy(max_records=4, max_interval_ms=10**9))
    await first.start()
    try:
        await first.append([amv("TopicRecord", name=n, topic_id=t) for n, t in TOPICS.items()])
        async with ClusterMirrorAdmin(endpoint(first), principal=ADMIN) as a:
            await a.create("a-to-b", {"bootstrap.servers": "x:1", "sasl.jaas.config": f"password={SECRET}"})
            await a.start("a-to-b", ["orders", "payments"])
        before = first.image
        # due while it served those requests: written once it is quiet (streams.admin.controller._serving)
        folder = worker_config.snapshot_dir / "controller"
        deadline = asyncio.get_running_loop().time() + 15
        while not list(folder.glob("*.checkpoint")) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.2)
    finally:
        await first.stop()
    snapshots = sorted((worker_config.snapshot_dir / "controller").glob("*.checkpoint"))
    assert snapshots, "4 records per snapshot were due"

    second = ClusterMirrorController(worker_config, super_users=frozenset({ADMIN}))
    await second.start()
    try:
        assert second.loader.loaded_snapshot is not None
        # The same image, but for the record of the second one's term (ClusterMirrorControllerRecord).
        assert second.image.control.controller.controller_id == second.controller_id
        assert _without_term(second.image, before) == before
        async with ClusterMirrorAdmin(endpoint(second), principal=ADMIN) as a:
            r = (await a.create("a-to-b", {"bootstrap.servers": "y:1"})).response
            assert r.error_code == ErrorCode.CLUSTER_MIRROR_ALREADY_EXISTS  # it remembers
    finally:
        await second.stop()
    async with MetadataLogReader(worker_config.bootstrap_servers, worker_config.metadata_topic_name, dlq=None) as reader:
        entries = [(e.offset, e.leader_epoch, e.record) async for e in reader.read(0, follow=False)]
    full, problems = replay_log(entries)
    assert not problems and _without_term(full, before) == before


def _without_term(image: Any, before: Any) -> Any:
    """``image`` with ``before``'s provenance and control part."""
    import dataclasses

    return dataclasses.replace(image, provenance=before.provenance, control=before.control)


async def test_malformed_request_gets_invalid_request(controller: ClusterMirrorController) -> None:
    from streams.admin.client import RequestHeader, decode_response, read_frame

    host, port = controller.address  # type: ignore[misc]
    reader, writer = await asyncio.open_connection(host, port)
    try:
        good = S.struct("DeleteClusterMirrorRequest")(mirror_name="m", state_validation_offset=-1)
        from streams.admin.client import encode_request

        frame = encode_request(RequestHeader(104, 0, 77, "t", ADMIN), good)
        broken = frame[:-3]  # cut the body short, fix the size prefix
        writer.write(len(broken[4:]).to_bytes(4, "big") + broken[4:])
        await writer.drain()
        reply = await read_frame(reader)
        assert reply is not None
        header, response = decode_response(reply, "DeleteClusterMirrorResponse", 0)
        assert header.correlation_id == 77 and response.error_code == ErrorCode.INVALID_REQUEST
    finally:
        writer.close()
    # The controller is still serving.
    async with ClusterMirrorAdmin(endpoint(controller), principal=ADMIN) as a:
        assert (await a.list()).response.error_code == 0


class _CountingView(MirrorStateChangelogView):
    """The default view with a fake offsets lookup that records what it was asked."""

    def __init__(self, cfg: WorkerConfig) -> None:
        super().__init__(cfg.bootstrap_servers, cfg.mirror_state_topic_name, cfg.state_partitions, offsets=self._lookup)
        self.asked: list[set[tuple[str, uuid.UUID, int]]] = []

    async def _lookup(self, keys: Sequence[tuple[str, uuid.UUID, int]]) -> dict[tuple[str, uuid.UUID, int], tuple[int, int]]:
        self.asked.append(set(keys))
        return {k: (10 * k[1].int + k[2], 10 * k[1].int) for k in keys}  # HW, LEO: lag = partition


async def test_only_describe_looks_up_offsets_and_polls_reuse_them(worker_config: WorkerConfig, tmp_path: Path) -> None:
    view = _CountingView(worker_config)
    c = ClusterMirrorController(worker_config, super_users=frozenset({ADMIN}), status=view)
    await c.start()
    try:
        await c.append([amv("TopicRecord", name=n, topic_id=t) for n, t in TOPICS.items()]
                       + [amv("PartitionRecord", partition_id=p, topic_id=t, replicas=(1,), isr=(1,), leader=1)
                          for t in TOPICS.values() for p in range(2)])  # fmt: skip
        await create_mirror(c, tmp_path)
        assert (await run_cli(c, "--start", "--mirror", "a-to-b", "--topics", "orders,payments"))[0] == 0
        await _write_states(worker_config, MIRRORING_ALL)
        assert (await run_cli(c, "--pause", "--mirror", "a-to-b", "--topics", "orders"))[0] == 0
        assert view.asked == []  # commands validate against states alone
        code, out, _ = await run_cli(c, "--describe", "--mirror", "a-to-b", "--json")
        assert code == 0, out
        assert view.asked == [{("a-to-b", TOPICS[t], p) for t, p in MIRRORING_ALL}]
        rows = {(r["topic"], r["partition"]): r for r in json.loads(out)}
        for (t, p), r in rows.items():
            assert (r["sourceOffset"], r["destinationOffset"], r["lag"]) == (10 * TOPICS[t].int + p, 10 * TOPICS[t].int, p)
        code, again, _ = await run_cli(c, "--describe", "--mirror", "a-to-b", "--json", "--max-age", "3600000")
        assert code == 0 and len(view.asked) == 1  # --max-age: the offsets of a moment ago will do
        assert [r["sourceOffset"] for r in json.loads(again)] == [r["sourceOffset"] for r in json.loads(out)]
        assert all(r["offsetsAgeMs"] >= 0 for r in json.loads(again))
        code, _, _ = await run_cli(c, "--describe", "--mirror", "a-to-b", "--json")
        assert code == 0 and len(view.asked) == 2  # without it: looked up for this describe
        code, _, err = await run_cli(c, "--resume", "--mirror", "a-to-b", "--topics", "orders", "--wait", "5")
        assert len(view.asked) == 2, "--wait polls states alone (IncludeOffsets=false): no lookups"
        assert "partitions MIRRORING" in err
    finally:
        await c.stop()


async def test_a_start_that_selects_nothing_says_why(controller: ClusterMirrorController, tmp_path: Path) -> None:
    await create_mirror(controller, tmp_path)
    code, out, _ = await run_cli(controller, "--start", "--mirror", "a-to-b", "--topics", "orders,payments")
    assert code == 0, out
    code, out, _ = await run_cli(controller, "--start", "--mirror", "a-to-b", "--topics", "pay-eu|payments|orders")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[-1] == "Started 0 topic(s) of mirror a-to-b; 2 skipped"
    skipped = [line for line in lines if ": skipped: " in line]
    assert [line.split(":")[0].strip() for line in skipped] == ["orders", "payments"]
    assert all("a pattern does not restart it, start it by name" in line for line in skipped)
    code, out, _ = await run_cli(controller, "--start", "--mirror", "a-to-b", "--topics", "pay-eu|payments", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["topics"] == []
    assert [s["topic"] for s in doc["skipped"]] == ["payments"] and "start it by name" in doc["skipped"][0]["reason"]
    assert {int(m.desired_state) for m in controller.image.mirrors.topics.values()} == {0}  # both still started


async def test_changelog_view_decodes_only_the_latest_value_per_key(worker_config: WorkerConfig) -> None:
    """Each read decodes the latest value of each key written since the last read, once; LME
    records and superseded states are never decoded; a tombstone removes the state."""
    view = MirrorStateChangelogView(worker_config.bootstrap_servers, worker_config.mirror_state_topic_name,
                                    worker_config.state_partitions)  # fmt: skip
    decoded: list[bytes] = []
    decode_value = view.codec.decode_value

    def counting(rtype: mss.RecordType, value: bytes) -> object:
        decoded.append(value)
        return decode_value(rtype, value)

    view.codec = mss.MirrorStateCodec()
    view.codec.decode_value = counting  # type: ignore[method-assign]
    await asyncio.wait_for(ensure_state_topic(worker_config), 30)
    await view.start()
    try:
        for state in (MirrorState.STOPPING, MirrorState.STOPPING, MirrorState.STOPPED):
            await _write_states(worker_config, {("orders", 0): (state, 0, None), ("orders", 1): (state, 0, None)})
        codec = mss.default_codec()
        producer = AIOKafkaProducer(bootstrap_servers=worker_config.bootstrap_servers)
        await producer.start()
        try:
            lme = codec.lme_key("a-to-b", TOPICS["orders"], 0)
            await producer.send_and_wait(worker_config.mirror_state_topic_name, key=lme,
                                         value=codec.encode_value(codec.lme_value(3, 7)),
                                         partition=mss.partition_for_key(lme, worker_config.state_partitions))  # fmt: skip
        finally:
            await producer.stop()
        states = await view.catch_up()
        assert {k: s.state for k, s in states.items()} == {("a-to-b", TOPICS["orders"], 0): MirrorState.STOPPED,
                                                          ("a-to-b", TOPICS["orders"], 1): MirrorState.STOPPED}  # fmt: skip
        # The latest value of each key only; and both are STOPPED without an error: one status, one decode.
        assert len(decoded) == 1
        assert len(await view.catch_up()) == 2 and len(decoded) == 1  # nothing new: nothing decoded
        await _write_states(worker_config, {("orders", 1): (MirrorState.FAILED, 2, "boom")})
        key = codec.state_key("a-to-b", TOPICS["orders"], 0)
        producer = AIOKafkaProducer(bootstrap_servers=worker_config.bootstrap_servers)
        await producer.start()
        try:
            await producer.send_and_wait(worker_config.mirror_state_topic_name, key=key, value=None,
                                         partition=mss.partition_for_key(key, worker_config.state_partitions))  # fmt: skip
        finally:
            await producer.stop()
        states = await view.catch_up()
        assert dict(states) == {("a-to-b", TOPICS["orders"], 1): (MirrorState.FAILED, 2, "boom", -1, -1, -1.0)}
        assert len(decoded) == 2
    finally:
        await view.stop()


async def ensure_state_topic(cfg: WorkerConfig) -> None:
    from streams.config import ensure_topics

    await ensure_topics(cfg.bootstrap_servers, [mss.mirror_state_topic_spec(cfg)])


async def test_state_counts_only_describe_matches_the_details(controller: ClusterMirrorController,
                                                              worker_config: WorkerConfig, tmp_path: Path) -> None:
    """StateCountsOnly (what --wait polls): per topic, the counts the full describe's rows give,
    and no rows."""
    await create_mirror(controller, tmp_path)
    assert (await run_cli(controller, "--start", "--mirror", "a-to-b", "--topics", "orders,payments"))[0] == 0
    await _write_states(worker_config, {("orders", 0): (MirrorState.STOPPED, 0, None),
                                        ("orders", 1): (MirrorState.FAILED, 1, "x"),
                                        ("payments", 0): (MirrorState.STOPPED, 0, None)})  # payments-1: no state yet
    async with ClusterMirrorAdmin(endpoint(controller), principal=ADMIN) as a:
        full = (await a.describe(["a-to-b"], offsets=False)).response
        counts = (await a.describe(["a-to-b"], counts_only=True)).response
    expected: dict[str, dict[int, int]] = {}
    for t in full.mirrors[0].topics:
        for p in t.partitions:
            expected.setdefault(t.topic_name, {}).setdefault(p.state, 0)
            expected[t.topic_name][p.state] += 1
    got = {t.topic_name: {c.state: c.count for c in t.state_counts} for t in counts.mirrors[0].topics}
    assert got == expected == {"orders": {int(MirrorState.STOPPED): 1, int(MirrorState.FAILED): 1},
                               "payments": {int(MirrorState.STOPPED): 1, int(MirrorState.UNKNOWN): 1}}
    assert all(not t.partitions for t in counts.mirrors[0].topics)
    assert counts.mirrors[0].error_code == 0


async def test_changelog_view_fetches_only_while_reading(worker_config: WorkerConfig) -> None:
    """Between reads the view's partitions are paused (no fetches to the broker); each read
    still sees every state written before it, and the counts kept follow them."""
    view = MirrorStateChangelogView(worker_config.bootstrap_servers, worker_config.mirror_state_topic_name,
                                    worker_config.state_partitions)  # fmt: skip
    await asyncio.wait_for(ensure_state_topic(worker_config), 30)
    await view.start()
    try:
        consumer = view._consumer
        assert consumer is not None
        every = set(consumer.assignment())
        assert consumer.paused() == every
        await _write_states(worker_config, MIRRORING_ALL)
        states = await view.catch_up()
        assert {k: s.state for k, s in states.items()} == {("a-to-b", TOPICS[t], p): MirrorState.MIRRORING
                                                           for t, p in MIRRORING_ALL}  # fmt: skip
        assert consumer.paused() == every
        await _write_states(worker_config, {("orders", 0): (MirrorState.STOPPED, 0, None)})
        tally = await view.state_counts()
        assert tally.mirror_counts("a-to-b") == {MirrorState.MIRRORING: 3, MirrorState.STOPPED: 1}
        assert tally.topic_counts("a-to-b", TOPICS["orders"], range(3)) == {
            MirrorState.STOPPED: 1, MirrorState.MIRRORING: 1, MirrorState.UNKNOWN: 1}
        assert consumer.paused() == every
    finally:
        await view.stop()
