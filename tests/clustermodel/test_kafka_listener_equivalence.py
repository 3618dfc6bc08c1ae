"""What a Kafka Fetch returns equals what the model's own port returns, after any history.

Seeded random histories mix Kafka-produced batches (with headers), the model's own batches,
transactions (committed, aborted, open), elections, broker crashes and restarts, compaction and
DeleteRecords. After every step each online partition is fetched through the Kafka listener of
its leader and decoded as a client would; offsets, epochs, producer fields, control markers,
records, HW, LSO, log start and aborted transactions must match the model's port answer.
"""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from clustermodel import ClusterModel
from clustermodel.errors import ElectionError
from clustermodel.kafka import KafkaListeners
from clustermodel.records import decode_records
from coordinator.ports import IsolationLevel
from records.kafka_envelope import decode_response, encode_request
from records.registry import default_schemas
from records.segments import Header, Record, build_batch, decode_batch, encode_batch

S = default_schemas()
BIG = 64 << 20


async def _call(port: int, api_key: int, version: int, body: object) -> object:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(encode_request(api_key, version, 1, "eq", body))
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
        return decode_response(await asyncio.wait_for(reader.readexactly(size), 5), api_key, version)[1]
    finally:
        writer.close()


def _produce_body(partition: int, data: bytes) -> object:
    P = S.nested("ProduceRequest", "PartitionProduceData")
    T = S.nested("ProduceRequest", "TopicProduceData")
    return S.struct("ProduceRequest")(acks=-1, timeout_ms=1000, topic_data=[T(name="t", partition_data=[P(index=partition, records=data)])])


def _fetch_body(partition: int, offset: int, epoch: int, isolation: int) -> object:
    P = S.nested("FetchRequest", "FetchPartition")
    T = S.nested("FetchRequest", "FetchTopic")
    return S.struct("FetchRequest")(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=BIG, isolation_level=isolation,
                                    session_epoch=-1, topics=[T(topic="t", partitions=[
                                        P(partition=partition, current_leader_epoch=epoch, fetch_offset=offset, partition_max_bytes=BIG)])])


async def _check(model: ClusterModel, ports: dict[int, int], rng: random.Random) -> None:
    for p, part in enumerate(model.topic("t").partitions):
        if not part.online:
            continue
        isolation = rng.choice([IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED])
        start = part.leader_log.log_start
        expected = model.read_fetch(part.tp, start, BIG, isolation, part.leader_epoch)
        got = (await _call(ports[part.leader], 1, 12, _fetch_body(p, start, part.leader_epoch, int(isolation)))).responses[0].partitions[0]
        assert got.error_code == 0
        assert (got.high_watermark, got.last_stable_offset, got.log_start_offset) == (expected.hw, expected.lso, expected.log_start)
        if isolation == IsolationLevel.READ_COMMITTED:
            assert [(a.producer_id, a.first_offset) for a in got.aborted_transactions] == [
                (a.producer_id, a.first_offset) for a in expected.aborted_transactions]
        batches, pos = [], 0
        while pos < len(got.records):
            batch, pos = decode_batch(got.records, pos)
            batches.append(batch)
        assert len(batches) == len(expected.batches)
        for kb, mb in zip(batches, expected.batches):
            assert (kb.base_offset, kb.last_offset, kb.partition_leader_epoch, kb.producer_id, kb.producer_epoch,
                    kb.base_sequence, kb.is_transactional, kb.is_control, kb.max_timestamp) == (
                mb.base_offset, mb.last_offset, mb.leader_epoch, mb.producer_id, mb.producer_epoch,
                mb.base_sequence, mb.is_transactional, mb.is_control, mb.timestamp)
            assert [(r.offset_delta, r.key, r.value) for r in kb.records] == [tuple(r) for r in decode_records(mb.payload)]


@pytest.mark.parametrize("seed", range(6))
async def test_kafka_fetch_equals_the_model_after_random_histories(seed: int) -> None:
    rng = random.Random(seed)
    model = ClusterModel("A", seed=seed, brokers=3, journal=False)
    model.add_topic("t", 2, configs={"cleanup.policy": "compact,delete"})
    listeners = KafkaListeners({"A": model})
    await listeners.start()
    cluster = listeners.clusters["A"]
    model.init_producer_id("tx")
    down: list[int] = []
    try:
        for step in range(40):
            p = rng.randrange(2)
            part = model.topic("t").partitions[p]
            op = rng.choice(["kafka", "kafka", "model", "txn", "elect", "crash", "compact", "delete"])
            if op == "kafka" and part.online:
                recs = [Record(i, i * 3, b"k%d" % rng.randrange(4), b"v%d-%d" % (step, i),
                               (Header("h", b"%d" % step),) if i % 2 == 0 else ()) for i in range(rng.randint(1, 4))]
                data = encode_batch(build_batch(recs, base_offset=0, base_timestamp=10_000 + step))
                r = (await _call(cluster.ports[part.leader], 0, 9, _produce_body(p, data))).responses[0].partition_responses[0]
                assert r.error_code == 0
            elif op == "model" and part.online:
                model.produce("t", p, [(b"k%d" % rng.randrange(4), b"m%d" % step)])
            elif op == "txn" and all(x.online for x in model.topic("t").partitions):
                if "tx" not in model.open_transactional_ids():
                    model.begin_transaction("tx")
                model.produce_transactional("tx", "t", p, [(b"k1", b"tx%d" % step)])
                if rng.random() < 0.6:  # else it stays open, holding the LSO, for a while
                    (model.commit_transaction if rng.random() < 0.5 else model.abort_transaction)("tx")
            elif op == "elect":
                try:
                    model.elect_leader("t", p)
                except ElectionError:
                    pass
            elif op == "crash":
                if down and rng.random() < 0.6:
                    model.restart_broker(down.pop())
                elif len(model.live) > 1:
                    b = rng.choice(sorted(model.live))
                    model.crash_broker(b)
                    down.append(b)
            elif op == "compact":
                model.compact("t")
            elif op == "delete" and part.online and part.hw > part.leader_log.log_start:
                model.delete_records("t", p, rng.randint(part.leader_log.log_start, part.hw))
            cluster.sync()
            await _check(model, cluster.ports, rng)
    finally:
        await listeners.stop()
