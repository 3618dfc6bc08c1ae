"""Three real Kafka clients behind one small synchronous interface, for the listener scenarios.

Each adapter uses its library the way an application does (its own producer/consumer objects,
its own settings); nothing here speaks the protocol itself.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

TIMEOUT_S = 20.0


class ProduceRefused(Exception):
    """The client reported a produce error; ``code`` is the Kafka error code when the client exposes it."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class Client:
    name = ""

    def produce(self, bootstrap: str, topic: str, values: list[bytes], idempotent: bool = False) -> list[int]:
        raise NotImplementedError

    def transaction(self, bootstrap: str, txn_id: str, topic: str, values: list[bytes], end: str,
                    offsets: tuple[str, int] | None = None) -> None:
        """end: "commit", "abort" or "open" (the producer goes away with the transaction open).
        ``offsets``: (group, offset) of partition 0 sent to the transaction (consume-transform-produce)."""
        raise NotImplementedError

    def consume(self, bootstrap: str, topic: str, isolation: str, group: str, count: int, settle_s: float = 0.7) -> list[tuple[int, int, bytes]]:
        """Subscribe in ``group``, read ``count`` records (and anything more within ``settle_s``), commit."""
        raise NotImplementedError

    def producer(self, bootstrap: str) -> Any:
        """A long-lived producer: ``send(topic, value) -> offset`` (acks=all, waits), ``close()``."""
        raise NotImplementedError


# ---------------------------------------------------------------- aiokafka


class AioKafka(Client):
    name = "aiokafka"

    def produce(self, bootstrap, topic, values, idempotent=False):
        from aiokafka import AIOKafkaProducer
        from aiokafka.errors import KafkaError

        async def run() -> list[int]:
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=idempotent,
                                 acks="all" if idempotent else 1, request_timeout_ms=5000, retry_backoff_ms=50)
            await p.start()
            try:
                out = []
                for v in values:
                    try:
                        md = await p.send_and_wait(topic, v, partition=0)
                    except KafkaError as exc:
                        raise ProduceRefused(repr(exc), getattr(exc, "errno", None)) from exc
                    out.append(md.offset)
                return out
            finally:
                await p.stop()

        return asyncio.run(run())

    def transaction(self, bootstrap, txn_id, topic, values, end, offsets=None):
        from aiokafka import AIOKafkaProducer, TopicPartition

        async def run() -> None:
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id, request_timeout_ms=5000)
            await p.start()
            try:
                await p.begin_transaction()
                for v in values:
                    await p.send_and_wait(topic, v, partition=0)
                if offsets is not None:
                    await p.send_offsets_to_transaction({TopicPartition(topic, 0): offsets[1]}, offsets[0])
                if end == "commit":
                    await p.commit_transaction()
                elif end == "abort":
                    await p.abort_transaction()
            finally:
                await p.stop()

        asyncio.run(run())

    def consume(self, bootstrap, topic, isolation, group, count, settle_s=0.7):
        from aiokafka import AIOKafkaConsumer

        async def run() -> list[tuple[int, int, bytes]]:
            c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, isolation_level=isolation,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 session_timeout_ms=6000, heartbeat_interval_ms=500)
            await c.start()
            try:
                got: list[tuple[int, int, bytes]] = []
                deadline = time.monotonic() + TIMEOUT_S
                settle_until = None
                while time.monotonic() < deadline:
                    batch = await c.getmany(timeout_ms=200)
                    for msgs in batch.values():
                        got.extend((m.partition, m.offset, m.value) for m in msgs)
                    if len(got) >= count:
                        settle_until = settle_until or time.monotonic() + settle_s
                        if time.monotonic() >= settle_until:
                            break
                await c.commit()
                return got
            finally:
                await c.stop()

        return asyncio.run(run())


    def producer(self, bootstrap):
        from aiokafka import AIOKafkaProducer

        async def start() -> AIOKafkaProducer:
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=3000, retry_backoff_ms=50)
            await p.start()
            return p

        loop = asyncio.new_event_loop()
        p = loop.run_until_complete(start())

        class Session:
            def send(self, topic: str, value: bytes) -> int:
                return loop.run_until_complete(p.send_and_wait(topic, value, partition=0)).offset

            def close(self) -> None:
                loop.run_until_complete(p.stop())
                loop.close()

        return Session()


# ---------------------------------------------------------------- kafka-python


class KafkaPython(Client):
    name = "kafka-python"

    def produce(self, bootstrap, topic, values, idempotent=False):
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        p = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=idempotent, acks="all" if idempotent else 1,
                          retries=2 if not idempotent else 5, request_timeout_ms=5000, retry_backoff_ms=50)
        try:
            out = []
            for v in values:
                try:
                    out.append(p.send(topic, v, partition=0).get(timeout=TIMEOUT_S).offset)
                except KafkaError as exc:
                    raise ProduceRefused(repr(exc), getattr(exc, "errno", None)) from exc
            return out
        finally:
            p.close(timeout=5)

    def transaction(self, bootstrap, txn_id, topic, values, end, offsets=None):
        from kafka import KafkaProducer, TopicPartition
        from kafka.structs import OffsetAndMetadata

        p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id, request_timeout_ms=5000)
        try:
            p.init_transactions()
            p.begin_transaction()
            for v in values:
                p.send(topic, v, partition=0).get(timeout=TIMEOUT_S)
            if offsets is not None:
                p.send_offsets_to_transaction({TopicPartition(topic, 0): OffsetAndMetadata(offsets[1], "", -1)}, offsets[0])
            if end == "commit":
                p.commit_transaction()
            elif end == "abort":
                p.abort_transaction()
        finally:
            p.close(timeout=5)

    def consume(self, bootstrap, topic, isolation, group, count, settle_s=0.7):
        from kafka import KafkaConsumer

        c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, isolation_level=isolation,
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          session_timeout_ms=6000, heartbeat_interval_ms=500)
        try:
            got: list[tuple[int, int, bytes]] = []
            deadline = time.monotonic() + TIMEOUT_S
            settle_until = None
            while time.monotonic() < deadline:
                for msgs in c.poll(timeout_ms=200).values():
                    got.extend((m.partition, m.offset, m.value) for m in msgs)
                if len(got) >= count:
                    settle_until = settle_until or time.monotonic() + settle_s
                    if time.monotonic() >= settle_until:
                        break
            c.commit()
            return got
        finally:
            c.close()


    def producer(self, bootstrap):
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=3000, retry_backoff_ms=50)

        class Session:
            def send(self, topic: str, value: bytes) -> int:
                return p.send(topic, value, partition=0).get(timeout=TIMEOUT_S).offset

            def close(self) -> None:
                p.close(timeout=5)

        return Session()


# ---------------------------------------------------------------- confluent-kafka (librdkafka)


class Confluent(Client):
    name = "confluent-kafka"

    def produce(self, bootstrap, topic, values, idempotent=False):
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": idempotent, "acks": "all" if idempotent else "1",
                      "message.timeout.ms": 10000, "retry.backoff.ms": 50, "linger.ms": 0})
        results: list[Any] = []

        def report(err: Any, msg: Any) -> None:
            results.append((err, msg.offset() if err is None else None))

        out = []
        for v in values:
            p.produce(topic, v, partition=0, on_delivery=report)
            p.flush(TIMEOUT_S)
            err, offset = results[-1]
            if err is not None:
                raise ProduceRefused(str(err), err.code())
            out.append(offset)
        return out

    def transaction(self, bootstrap, txn_id, topic, values, end, offsets=None):
        from confluent_kafka import Consumer, Producer, TopicPartition

        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 0})
        p.init_transactions(TIMEOUT_S)
        p.begin_transaction()
        for v in values:
            p.produce(topic, v, partition=0)
        p.flush(TIMEOUT_S)
        if offsets is not None:
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": offsets[0]})
            try:
                p.send_offsets_to_transaction([TopicPartition(topic, 0, offsets[1])], c.consumer_group_metadata(), TIMEOUT_S)
            finally:
                c.close()
        if end == "commit":
            p.commit_transaction(TIMEOUT_S)
        elif end == "abort":
            p.abort_transaction(TIMEOUT_S)
        del p

    def consume(self, bootstrap, topic, isolation, group, count, settle_s=0.7):
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": isolation,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        c.subscribe([topic])
        try:
            got: list[tuple[int, int, bytes]] = []
            deadline = time.monotonic() + TIMEOUT_S
            settle_until = None
            while time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    got.append((m.partition(), m.offset(), m.value()))
                if len(got) >= count:
                    settle_until = settle_until or time.monotonic() + settle_s
                    if time.monotonic() >= settle_until:
                        break
            if got:
                c.commit(asynchronous=False)
            return got
        finally:
            c.close()


    def producer(self, bootstrap):
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "retry.backoff.ms": 50,
                      "message.timeout.ms": 15000})

        class Session:
            def send(self, topic: str, value: bytes) -> int:
                out: list[Any] = []
                p.produce(topic, value, partition=0, on_delivery=lambda err, msg: out.append((err, msg)))
                p.flush(TIMEOUT_S)
                err, msg = out[0]
                if err is not None:
                    raise ProduceRefused(str(err), err.code())
                return msg.offset()

            def close(self) -> None:
                p.flush(5)

        return Session()


def available_clients() -> list[Any]:
    import pytest

    out: list[Any] = [AioKafka(), KafkaPython()]
    try:
        import confluent_kafka  # noqa: F401

        out.append(Confluent())
    except ImportError:
        out.append(pytest.param(None, marks=pytest.mark.skip(reason="confluent-kafka is not installed")))
    return out
