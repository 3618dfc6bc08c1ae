"""What a stream worker reports beside its state writes, each on its own timer: its sync status
per mirror (``streams.state.sync_status``, for the controller's describe and failover readiness) and
audit snapshots (``streams.worker.audit_export``, off unless ``audit.export.dir`` is set)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from coordinator.image import MetadataImage
from coordinator.states import MirrorState
from streams.config import WorkerConfig
from streams.state.sync_status import MirrorSyncs, SyncStatusPublisher, publish
from streams.runner.syncer import MirrorStats

log = logging.getLogger(__name__)


class WorkerReports:
    def __init__(self, config: WorkerConfig, store: Any, instance_id: str, ports: Any,
                 image: Callable[[], MetadataImage], clock_ms: Callable[[], int],
                 producer: Callable[[], Awaitable[Any]]) -> None:  # fmt: skip
        self.config = config
        self.store = store
        self.clock_ms = clock_ms
        self.producer = producer  # the changelog's producer, shared
        self.sync_status = SyncStatusPublisher(instance_id)
        self.audit_exporter: Any = None
        if config.audit_export_root is not None:
            from streams.worker.audit_export import AuditExporter  # pyarrow: only loaded when exporting

            self.audit_exporter = AuditExporter(config, ports, image, clock_ms)

    async def publish_sync_status(self, runners: Mapping[str, Any], stats: Mapping[str, MirrorStats]) -> None:
        """This worker's sync status per mirror, when it changed or every half sync interval."""
        with self.store.lock:  # counts kept as states land: no walk over every partition each second
            tally = self.store.durable.tally
            counts = {name: tally.mirror_counts(name).get(MirrorState.MIRRORING, 0) for name in runners}
        mirrors = {name: MirrorSyncs(counts.get(name, 0), r.config.metadata_refresh_interval_ms,
                                     stats[name].sync_success_ms if name in stats else {})
                   for name, r in runners.items()}  # fmt: skip
        now = self.clock_ms()
        reports = self.sync_status.due(now, mirrors)
        if not reports:
            return
        try:
            await publish(await self.producer(), self.config.sync_status_topic_name, reports)
        except Exception as e:  # noqa: BLE001 - sent again at the next tick
            log.warning("sync status not published: %r", e)
            return
        self.sync_status.sent(now, reports)

    async def export_audit(self) -> None:
        """One audit snapshot (the caller makes sure it is the only writer of the store)."""
        if self.audit_exporter is None:
            return
        try:
            await self.audit_exporter.export_once()
        except Exception as e:  # noqa: BLE001 - a failed export is retried at the next interval
            log.error("audit snapshot export to %s failed: %s", self.audit_exporter.root, e)

    async def stop(self, producer: Any) -> None:
        """At shutdown: the last export, and tombstones for this worker's sync status reports
        (``producer``, if the worker ever made one), so the controller forgets them at once."""
        if self.audit_exporter is not None:
            await self.audit_exporter.stop()
        farewell = self.sync_status.farewell()
        if farewell and producer is not None:
            try:
                await asyncio.wait_for(publish(producer, self.config.sync_status_topic_name, farewell), 5.0)
            except Exception as e:  # noqa: BLE001 - the controller ages the reports out instead
                log.warning("sync status tombstones not sent: %r", e)
