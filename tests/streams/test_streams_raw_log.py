"""``RawLogReader``: a topic's partitions read up to given offsets as whole record batches
straight from Fetch responses, on a paused consumer's connections (``streams.state.raw_log``),
through a real broker: every record once, in order, none at or past the end, compressed batches
too, a read that ends inside a batch resumed there, and a log start that moved past the position."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete

from controller_rig import die_inside_a_transaction_on
from streams.config import ensure_topics
from streams.state.raw_log import RawLogReader

pytestmark = pytest.mark.brokers("noida-db", "apache-kafka")


async def produce(bootstrap: str, topic: str, partition: int, values: range, compression: str | None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type=compression, linger_ms=50)
    await producer.start()
    try:
        sent = [await producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=partition) for i in values]
        await asyncio.gather(*sent)  # several records to a batch (linger), several batches
    finally:
        await producer.stop()


def test_the_raw_reader_reads_every_record_once_up_to_the_end_and_resumes_there(kafka_broker: Any) -> None:
    bootstrap, topic = kafka_broker.bootstrap, f"raw-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        await ensure_topics(bootstrap, [NewTopic(topic, 2, 1)])
        await produce(bootstrap, topic, 0, range(0, 300), "lz4")
        await produce(bootstrap, topic, 0, range(300, 500), None)
        await produce(bootstrap, topic, 1, range(0, 40), None)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest")  # fmt: skip
        await consumer.start()
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        consumer.pause(*tps)
        got: dict[int, list[tuple[bytes | None, bytes | None, int]]] = {0: [], 1: []}
        reader = RawLogReader(consumer)
        try:
            # partition 0 ends inside a batch (the producer's batches hold ~10-300 records)
            await reader.read_to(tps, {tps[0]: 257, tps[1]: 40}, lambda k, v, o: None)
            assert [await consumer.position(tp) for tp in tps] == [257, 40]
            await consumer.seek_to_beginning(*tps)

            def apply_to(p: int) -> Any:
                return lambda k, v, o: got[p].append((k, v, o))

            for tp in tps:  # one partition at a time, to tell the records apart
                await reader.read_to([tp], {tp: 257 if tp.partition == 0 else 40}, apply_to(tp.partition))
            assert got[0] == [(b"k%d" % i, b"v%d" % i, i) for i in range(257)]
            assert got[1] == [(b"k%d" % i, b"v%d" % i, i) for i in range(40)]
            await reader.read_to([tps[0]], {tps[0]: 500}, apply_to(0))
            assert got[0] == [(b"k%d" % i, b"v%d" % i, i) for i in range(500)], "resumed inside the batch, none twice"
            assert await consumer.position(tps[0]) == 500
        finally:
            await consumer.stop()

    asyncio.run(scenario())


@pytest.mark.brokers("apache-kafka")
def test_a_log_start_past_the_position_is_read_from_the_new_start(kafka_broker: Any) -> None:
    bootstrap, topic = kafka_broker.bootstrap, f"raw-{uuid.uuid4().hex[:8]}"

    async def scenario() -> list[int]:
        await ensure_topics(bootstrap, [NewTopic(topic, 1, 1)])
        await produce(bootstrap, topic, 0, range(0, 100), None)
        tp = TopicPartition(topic, 0)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        await consumer.start()
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        consumer.pause(tp)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.delete_records({tp: RecordsToDelete(before_offset=60)})  # as retention would
            offsets: list[int] = []
            await RawLogReader(consumer).read_to([tp], {tp: 100}, lambda k, v, o: offsets.append(o))
            return offsets
        finally:
            await admin.close()
            await consumer.stop()

    assert asyncio.run(scenario()) == list(range(60, 100))


def test_a_read_past_an_aborted_transaction_keeps_the_same_transactional_ids_committed_records(kafka_broker: Any) -> None:
    """A producer died inside a transaction; the next one of its transactional id (the same
    producer ID on noida-db, a bumped epoch) commits a record. Read from past the ABORT marker,
    that record is there: noida-db 0.2.3 still lists the aborted transaction, and its marker is
    not in the fetch, but the record's own COMMIT marker is."""
    bootstrap, topic, txn_id = kafka_broker.bootstrap, f"raw-{uuid.uuid4().hex[:8]}", f"raw-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        await ensure_topics(bootstrap, [NewTopic(topic, 1, 1)])
        await asyncio.to_thread(die_inside_a_transaction_on, bootstrap, txn_id, topic, b"aborted")
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id, enable_idempotence=True, acks="all")
        await producer.start()  # InitProducerId: the dead producer's transaction is aborted
        try:
            async with producer.transaction():
                sent = await producer.send(topic, key=b"k", value=b"committed", partition=0)
            offset = (await sent).offset
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    isolation_level="read_committed")  # fmt: skip
        await consumer.start()
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.pause(tp)
        try:
            end = (await consumer.end_offsets([tp]))[tp]
            for start in (offset, 0):  # past the ABORT marker, and from before the aborted record
                got: list[tuple[bytes | None, bytes | None, int]] = []
                consumer.seek(tp, start)
                await RawLogReader(consumer).read_to([tp], {tp: end}, lambda k, v, o: got.append((k, v, o)))
                assert got == [(b"k", b"committed", offset)], (start, got)
        finally:
            await consumer.stop()

    asyncio.run(scenario())
