"""The worker's metadata follower: the metadata log replayed into the worker's image.

``MetadataLogLoader`` + ``Replayer``: the latest snapshot, then the tail up to the log's end
(``caught_up`` is set only then, as Kafka publishes nothing before the high-water mark), then the
live log. After catching up, and then once per fetch outside a metadata transaction, it calls
``publish``: the worker works out what changed and acts on it (``CoordinatorWorker._publish``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from coordinator.delta import ProblemKind, Replayer
from records.framing import ApiMessageAndVersion
from streams.config import WorkerConfig
from streams.state.dead_letters import DeadLetterQueue
from streams.state.metadata_log import MetadataLogLoader, MetadataLogReader
from streams.state.snapshots import SnapshotPolicy, SnapshotStore

log = logging.getLogger(__name__)


class WorkerMetadataFollower:
    def __init__(self, config: WorkerConfig, publish: Callable[[], Awaitable[None]]) -> None:
        self.config = config
        self._publish = publish
        self.caught_up = asyncio.Event()
        self.loader: MetadataLogLoader | None = None
        self.replayer = Replayer()
        self.poison_offsets: list[int] = []

    async def run(self) -> None:
        c = self.config
        topic = c.metadata_topic_name
        dlq = DeadLetterQueue(c.bootstrap_servers, topic, client_id="kip1279-worker-dlq")
        reader = MetadataLogReader(c.bootstrap_servers, topic, dlq=dlq, client_id="kip1279-worker-metadata")
        await dlq.start()
        await reader.start()
        self.loader = loader = MetadataLogLoader(
            reader, SnapshotStore(c.snapshot_dir / "worker"), replay=self._replay,
            to_records=self._snapshot_records, on_poison=self._on_poison,
            policy=SnapshotPolicy(c.snapshot_max_records, c.snapshot_max_interval_ms),
        )  # fmt: skip
        try:
            sid = await loader.load_snapshot()
            if sid is not None:
                log.info("loaded metadata snapshot %s; replaying from offset %d", sid.name, sid.end_offset)
            await loader.catch_up()
            await self._publish()
            self.caught_up.set()
            log.info("metadata log %s caught up at offset %d", topic, loader.next_offset)
            async for entries in reader.read_batches(loader.next_offset, follow=True):
                t0 = time.perf_counter()
                for entry in entries:
                    loader.apply(entry)
                t1 = time.perf_counter()
                await loader.maybe_snapshot()
                if not self.replayer.in_transaction:
                    await self._publish()  # once per fetch: a stop of 1,000 topics is not 1,000 publishes
                if log.isEnabledFor(logging.DEBUG):  # the start edge of a mass failover, step by step
                    log.debug("metadata: %d record(s) to offset %d replayed in %.3fs, published in %.3fs",
                              len(entries), entries[-1].offset, t1 - t0, time.perf_counter() - t1)  # fmt: skip
        finally:
            await reader.stop()
            await dlq.stop()

    def _snapshot_records(self) -> Iterable[ApiMessageAndVersion] | None:
        """The image of every record replayed so far (not the last published one, which lags
        during catch-up); None inside a metadata transaction, where no snapshot may be cut."""
        if self.replayer.in_transaction:
            return None
        return self.replayer.image().to_records()

    def _replay(self, offset: int, epoch: int, record: ApiMessageAndVersion) -> None:
        problem = self.replayer.replay(record, offset, epoch)
        if problem is not None and problem.kind is not ProblemKind.STALE_OFFSET:
            log.error("metadata record at offset %d not applied: %s", offset, problem.message)

    def _on_poison(self, entry: Any) -> None:
        self.poison_offsets.append(entry.offset)
        self.replayer.report(entry.offset, entry.leader_epoch, ProblemKind.UNDECODABLE, entry.record.error)
