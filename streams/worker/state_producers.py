"""The state writes' fencing token: one transactional producer per owned table partition.

Every write of table partition ``p`` to ``__mirror_state`` goes through a producer whose
``transactional.id`` is ``{app id}-mirror-state-{p}`` (Kafka Streams' EOS-alpha: one id per
input partition). A worker that takes ``p`` on, or holds it at a new group generation, starts a
new producer for it: its InitProducerId bumps the producer epoch, which aborts the previous
owner's open transaction, and the broker refuses that owner's later Produce, AddPartitionsToTxn
and EndTxn (KIP-98's zombie fencing). So the token is the producer epoch, and the receiver, the
broker, checks it; readers read ``read_committed``.

A producer is made only for an owned table partition and closed when the partition goes. One
that the broker fenced (or left in a fatal state) is never started again for the same
generation: that would fence the new owner in turn (``WorkerTable``).
"""

from __future__ import annotations

import asyncio
import logging

import aiokafka.errors as Errors
from aiokafka import AIOKafkaProducer
from aiokafka.producer.transaction_manager import TransactionState

from streams.config import WorkerConfig

log = logging.getLogger(__name__)
# What a producer whose epoch a newer InitProducerId bumped is told. PRODUCER_FENCED (90) comes
# as UnknownError from aiokafka 0.14's handlers (it has no class for it); a producer left in a
# fatal state by any error is treated alike (``usable``).
FENCED_ERRORS = (Errors.ProducerFenced, Errors.InvalidProducerEpoch, Errors.InvalidProducerIdMapping,
                 Errors.TransactionCoordinatorFenced)  # fmt: skip


def transactional_id(config: WorkerConfig, partition: int) -> str:
    return f"{config.faust_app_id}-mirror-state-{partition}"


class StateProducers:
    """The transactional producers of the owned table partitions, by partition."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self._producers: dict[int, AIOKafkaProducer] = {}
        self.inits = 0  # InitProducerIds sent (tests, metrics)

    def get(self, partition: int) -> AIOKafkaProducer | None:
        return self._producers.get(partition)

    def partitions(self) -> set[int]:
        return set(self._producers)

    def usable(self, partition: int) -> bool:
        """Can the partition's producer still begin a transaction? False once fenced or fatal."""
        producer = self._producers.get(partition)
        if producer is None:
            return False
        txn = producer._txn_manager
        task = producer._sender.sender_task
        return txn.state in (TransactionState.READY, TransactionState.IN_TRANSACTION) and not (task and task.done())

    async def fence(self, partitions: set[int]) -> None:
        """(Re)starts the producers of ``partitions``: each start is an InitProducerId, which fences
        whoever held the transactional id before (this worker's own older producer included)."""
        await self.release(partitions)
        started = await asyncio.gather(*(self._start(p) for p in sorted(partitions)), return_exceptions=True)
        failed = None
        for p, got in zip(sorted(partitions), started):
            if isinstance(got, BaseException):
                failed = failed or got
            else:
                self._producers[p] = got
        if failed is not None:
            raise failed

    async def _start(self, partition: int) -> AIOKafkaProducer:
        c = self.config
        # Whole record batches (``write_durably``), acks=all, lz4: see ``WorkerTable.persist``.
        producer = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", enable_idempotence=True,
                                    linger_ms=0, max_batch_size=1 << 19, compression_type="lz4",
                                    transactional_id=transactional_id(c, partition),
                                    client_id=f"{c.faust_app_id}-mirror-state-{partition}")  # fmt: skip
        try:
            await producer.start()  # waits for InitProducerId: the fence
        except BaseException:
            await _close(producer)
            raise
        self.inits += 1
        return producer

    async def release(self, partitions: set[int]) -> None:
        gone = [self._producers.pop(p) for p in partitions if p in self._producers]
        await asyncio.gather(*(_close(p) for p in gone))

    async def stop(self) -> None:
        await self.release(set(self._producers))


async def _close(producer: AIOKafkaProducer) -> None:
    try:
        await producer.stop()
    except Exception as e:  # noqa: BLE001 - a fenced producer's sender ended with its error
        log.debug("closing a state producer: %r", e)
