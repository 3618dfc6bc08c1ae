"""Audit snapshots on a timer: ``audit.export.dir`` and ``audit.export.interval.ms``.

Off unless ``audit.export.dir`` is set. Each coordinator (destination cluster) writes its own
snapshot store, ``<audit.export.dir>/<cluster.name>`` (``WorkerConfig.audit_export_root``),
so two destination clusters never mix; ``python -m audit --snapshots DIR/<cluster>`` reads one.

One worker per coordinator exports: the owner of table partition 0 (the store has a single
writer). Per export it

1. reads ``__mirror_state`` from where it stopped (async, on the loop; it is I/O, not CPU):
   every write of a mirror partition's state, its LME, its latest stop's impact (prediction
   and outcome: the ``failover_impacts`` table), tombstones. A write whose state differs
   from the key's last one is a transition, stamped with the metadata offset the writer had
   applied; the first write of a key (UNKNOWN, its registration) is none;
2. hands the folded states, the transitions read since the last export and the image to one
   background thread, which asks both clusters for offsets and epochs (blocking port calls) and
   writes the snapshot with ``audit.export`` (Parquet files renamed into place, the manifest
   last, atomically, so a reader never sees half a snapshot).

Incremental: each manifest records the changelog positions its transitions were read up to
(``Manifest.positions``); the next export hands over only what was read after them, and a
restarted worker re-reads the changelog from its start (to know each key's last state) but
exports transitions only from those positions on. ``partition_states``, ``offsets`` and
``epochs`` are whole in every snapshot (the audit reads the latest); ``transitions`` are read
from all of them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTopicPartition

from audit import layout
from audit.export import ExportResult, export_snapshot
from audit.model import UNDEFINED, AuditSnapshot, CutRow, FailoverImpactRow, PartitionRow, TransitionRow
from coordinator.image import MetadataImage
from coordinator.partition_state import MirrorPartitionState
from coordinator.port_types import PartitionOffsets, TopicPartition
from coordinator.states import MirrorState
from streams.config import WorkerConfig
from streams.state.mirror_state_codec import RecordType, decode_changelog_record

log = logging.getLogger("streams.worker.audit_export")

Key = tuple[str, uuid.UUID, int]  # mirror, topic ID, partition


class _Transition(NamedTuple):
    key: Key
    state: MirrorPartitionState


class ChangelogFold:
    """The last state and LME of every mirror partition in ``__mirror_state``, and the
    transitions seen since the last export (only those at or after ``emit_from``)."""

    def __init__(self, emit_from: dict[int, int] | None = None) -> None:
        self.states: dict[Key, MirrorPartitionState] = {}
        self.lme: dict[Key, int] = {}
        self.impacts: dict[Key, Any] = {}  # each partition's latest stop: prediction and outcome
        self.pending: list[_Transition] = []
        self.emit_from = dict(emit_from or {})

    def apply(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        rec = decode_changelog_record(key, value)
        k: Key = (rec.key.mirror_name, rec.key.topic_id, rec.key.partition)
        if rec.type == RecordType.LAST_MIRROR_EPOCHS:
            if rec.value is None:
                self.lme.pop(k, None)
            else:
                self.lme[k] = rec.value.last_mirror_epoch
            return
        if rec.type == RecordType.MIRROR_FAILOVER_IMPACT:
            if rec.value is None:
                self.impacts.pop(k, None)
            else:
                self.impacts[k] = rec.value
            return
        if rec.value is None:  # the topic left its mirror: a re-created mirror starts from UNKNOWN
            self.states.pop(k, None)
            return
        st = MirrorPartitionState.from_schema_fields(rec.value)
        before = self.states.get(k)
        self.states[k] = st
        # A write that only advances a step within a state is no transition.
        if st.state is not (before.state if before else MirrorState.UNKNOWN):
            if offset >= self.emit_from.get(partition, 0):
                self.pending.append(_Transition(k, st))


class AuditExporter:
    """The timed export of one coordinator (see the module docstring)."""

    def __init__(
        self,
        config: WorkerConfig,
        ports: Callable[[str, Any], tuple[Any, Any]],
        image: Callable[[], MetadataImage],
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        root = config.audit_export_root
        if root is None:
            raise ValueError("audit.export.dir is not set")
        self.root = root
        self.config = config
        self.ports = ports
        self.image = image
        self.clock_ms = clock_ms
        self.fold: ChangelogFold | None = None
        self.consumer: Any = None
        self.tps: list[KafkaTopicPartition] = []
        self.last: layout.Manifest | None = None
        self.exports = 0
        # One thread: port calls and Parquet writes never run on the event loop, nor take the
        # threads of the mirror steps.
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kip1279-audit")
        self._lock = asyncio.Lock()

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        manifests = await loop.run_in_executor(self.pool, layout.list_manifests, self.root)
        self.last = manifests[-1] if manifests else None
        positions = {int(p): o for p, o in (self.last.positions if self.last else {}).items()}
        topic = self.config.mirror_state_topic_name
        # read_committed: a fenced owner's aborted writes are never exported; the end offsets are
        # the LSO, and the consumer's position moves past the commit and abort markers.
        consumer = AIOKafkaConsumer(bootstrap_servers=self.config.bootstrap_servers, enable_auto_commit=False,
                                    auto_offset_reset="earliest", client_id=f"{self.config.client_id}-audit-export",
                                    isolation_level="read_committed")  # fmt: skip
        await consumer.start()
        try:  # the changelog has the table's partition count
            self.tps = [KafkaTopicPartition(topic, p) for p in range(self.config.state_partitions)]
            consumer.assign(self.tps)
            await consumer.seek_to_beginning(*self.tps)
        except BaseException:
            await consumer.stop()
            raise
        self.consumer = consumer
        self.fold = ChangelogFold(positions)

    async def _read(self, timeout: float = 10.0) -> dict[int, int]:
        """Reads the changelog up to its end as of now (or for ``timeout`` seconds at most: the
        rest comes with the next export); returns the positions reached."""
        assert self.consumer is not None and self.fold is not None
        ends = await self.consumer.end_offsets(self.tps)
        deadline = time.monotonic() + timeout
        while True:
            behind = [tp for tp in self.tps if await self.consumer.position(tp) < ends[tp]]
            if not behind:
                break
            if time.monotonic() > deadline:
                log.warning("audit export: %s not read to its end within %.0fs; the next export goes on",
                            self.config.mirror_state_topic_name, timeout)  # fmt: skip
                break
            batches = await self.consumer.getmany(*behind, timeout_ms=500)
            for tp, msgs in batches.items():
                for m in msgs:
                    if m.offset < ends[tp]:
                        self.fold.apply(tp.partition, m.offset, m.key, m.value)
        return {tp.partition: await self.consumer.position(tp) for tp in self.tps}

    async def export_once(self) -> ExportResult | None:
        """One export (None when the previous one is still running)."""
        if self._lock.locked():
            return None
        async with self._lock:
            loop = asyncio.get_running_loop()
            if self.consumer is not None and await loop.run_in_executor(self.pool, self._written_by_another):
                # Table partition 0 moved away and back meanwhile: go on from the other writer's
                # positions, not ours.
                await self.consumer.stop()
                self.consumer = None
            if self.consumer is None:
                await self._start()
            assert self.fold is not None
            positions = await self._read()
            pending, self.fold.pending = self.fold.pending, []
            states, lme, impacts = dict(self.fold.states), dict(self.fold.lme), dict(self.fold.impacts)
            image, taken_at = self.image(), self.clock_ms()
            try:
                result = await loop.run_in_executor(
                    self.pool, self._write, image, states, lme, pending, positions, taken_at, impacts)  # fmt: skip
            except BaseException:
                self.fold.pending = pending + self.fold.pending  # exported next time
                raise
            self.last = result.manifest
            self.fold.emit_from = positions
            self.exports += 1
            log.info("audit snapshot at metadata offset %d: %d rows, %d transitions, in %.3fs -> %s",
                     result.manifest.metadata_offset, result.rows, len(pending), result.seconds, self.root)  # fmt: skip
            return result

    # ------------------------------------------------------------------- the export thread

    def _written_by_another(self) -> bool:
        """Whether the store's newest snapshot is not the last one this exporter wrote."""
        names = sorted(p.name for p in (self.root / layout.MANIFEST_DIR).glob("snapshot-*.json"))
        ours = layout.manifest_path(self.root, self.last.metadata_offset, self.last.taken_at_ms).name if self.last else None
        return bool(names) and names[-1] != ours

    def _write(self, image: MetadataImage, states: dict[Key, MirrorPartitionState], lme: dict[Key, int],
               pending: list[_Transition], positions: dict[int, int], taken_at: int,
               impacts: dict[Key, Any] | None = None) -> ExportResult:  # fmt: skip
        def topic_name(tid: uuid.UUID) -> str:
            t = image.topics.get(tid)
            return t.name if t is not None else str(tid)

        partitions: list[PartitionRow] = []
        by_mirror: dict[str, list[Key]] = {}
        for k in sorted(states, key=lambda k: (k[0], str(k[1]), k[2])):
            by_mirror.setdefault(k[0], []).append(k)
        for mirror_name, keys in by_mirror.items():
            mirror = image.mirrors.get(mirror_name)
            if mirror is None:
                continue  # deleted; its tombstones are on their way
            offsets = self._offsets(mirror_name, mirror, keys)
            for k in keys:
                st, (so, do) = states[k], offsets[k]
                recorded_lme = lme.get(k, st.last_mirrored_epoch if st.last_mirrored_epoch >= 0 else UNDEFINED)
                partitions.append(PartitionRow(
                    mirror=mirror_name, topic=topic_name(k[1]), topic_id=str(k[1]), partition=k[2],
                    state=int(st.state), previous_state=int(st.previous_state), state_entered_ms=st.entered_at_ms,
                    retry_attempt=st.retry_attempt, error_message=st.error_message,
                    source_leader_epoch=so.leader_epoch if so else UNDEFINED,
                    dest_leader_epoch=do.leader_epoch if do else UNDEFINED, last_mirrored_epoch=recorded_lme,
                    source_log_start=so.log_start if so else UNDEFINED, source_lso=so.lso if so else UNDEFINED,
                    source_hw=so.hw if so else UNDEFINED, dest_log_start=do.log_start if do else UNDEFINED,
                    dest_hw=do.hw if do else UNDEFINED, dest_leo=do.leo if do else UNDEFINED,
                ))  # fmt: skip
        transitions = [
            TransitionRow(mirror=k[0], topic=topic_name(k[1]), topic_id=str(k[1]), partition=k[2],
                          from_state=int(st.previous_state), to_state=int(st.state), at_ms=st.entered_at_ms,
                          metadata_offset=st.applied_offset, reason=st.error_message or "")  # fmt: skip
            for k, st in pending
        ]
        # The image's offset; a write of another worker may be a little ahead of this one's image.
        offset = max([image.offset, self.last.metadata_offset if self.last else -1,
                      *(t.metadata_offset for t in transitions)])  # fmt: skip
        configs = {name: dict(m.configs) for name, m in image.mirrors.mirrors.items()}
        cuts = [CutRow(mirror=k[0], topic=topic_name(k[1]), topic_id=str(k[1]), partition=k[2], state=int(st.state),
                       cut_timestamp=st.cut_timestamp, cut_offset=st.cut_offset,
                       given_up_end_offset=st.given_up_end_offset, given_up_records=st.given_up_records,
                       newest_given_up_timestamp=st.newest_given_up_timestamp)
                for k, st in sorted(states.items(), key=lambda kv: (kv[0][0], str(kv[0][1]), kv[0][2]))
                if st.cut_offset >= 0 and k[0] in image.mirrors.mirrors]  # fmt: skip
        rows = [impact_row(k, topic_name(k[1]), v) for k, v in sorted((impacts or {}).items(), key=lambda kv: (kv[0][0], str(kv[0][1]), kv[0][2]))
                if k[0] in image.mirrors.mirrors]  # fmt: skip
        snapshot = AuditSnapshot(metadata_offset=max(offset, 0), taken_at_ms=taken_at, partitions=partitions,
                                 transitions=transitions, mirror_configs=configs, failover_impacts=rows,
                                 consistent_cuts=cuts)  # fmt: skip
        return export_snapshot(snapshot, self.root, positions={str(p): o for p, o in positions.items()})

    def _offsets(self, mirror_name: str, mirror: Any, keys: list[Key]
                 ) -> dict[Key, tuple[PartitionOffsets | None, PartitionOffsets | None]]:  # fmt: skip
        """Source and destination ListOffsets per partition; None where a cluster cannot say."""
        src, dst = self.ports(mirror_name, mirror)
        try:
            tps = [TopicPartition(k[1], k[2]) for k in keys]
            return dict(zip(keys, zip(_list_offsets_all(src, tps), _list_offsets_all(dst, tps))))
        finally:
            for port in (src, dst):
                close = getattr(port, "close", None)
                if close is not None:
                    close()

    async def stop(self) -> None:
        async with self._lock:
            if self.consumer is not None:
                await self.consumer.stop()
                self.consumer = None
        self.pool.shutdown(wait=False, cancel_futures=True)


def impact_row(k: Key, topic: str, v: Any) -> FailoverImpactRow:
    """A ``MirrorFailoverImpactValue`` as a ``failover_impacts`` row (lists as sorted text)."""
    def aborts(xs: Any) -> str:
        return ",".join(f"{a.producer_id}@{a.first_offset}" for a in sorted(xs, key=lambda a: (a.producer_id, a.first_offset)))

    def groups(xs: Any) -> str:
        return ",".join(f"{g.group_id}={g.offset}" for g in sorted(xs, key=lambda g: (g.group_id, g.offset)))

    return FailoverImpactRow(
        mirror=k[0], topic=topic, topic_id=str(k[1]), partition=k[2], metadata_offset=v.metadata_offset,
        predicted_at_ms=v.predicted_at_ms, missing_reason=v.missing_reason, completed=v.completed,
        completed_at_ms=v.completed_at_ms, predicted_end_offset=v.predicted_end_offset, stop_offset=v.stop_offset,
        predicted_source_hw=v.predicted_source_high_watermark, predicted_lost_records=v.predicted_lost_records,
        lost_records=v.lost_records, predicted_oldest_lost_age_ms=v.predicted_oldest_lost_age_ms,
        predicted_aborts=aborts(v.predicted_aborts), aborts=aborts(v.aborts),
        predicted_groups=groups(v.predicted_groups), synced_groups=groups(v.synced_groups))  # fmt: skip


def _list_offsets_all(port: Any, tps: list[TopicPartition]) -> list[PartitionOffsets | None]:
    """ListOffsets of every partition: one pipelined batch on the model server's client (at
    50,000 partitions a few requests, not one each), else a call each."""
    try:
        got = port.call_many([("list_offsets", (tp,), None) for tp in tps])
    except AttributeError:  # an in-process port: no batches
        return [_list_offsets(port, tp) for tp in tps]
    except Exception as e:  # noqa: BLE001 - the cluster unreachable: no offsets this time
        log.debug("list_offsets of %d partition(s) failed: %s", len(tps), e)
        return [None] * len(tps)
    return [None if isinstance(r, BaseException) else r for r in got]


def _list_offsets(port: Any, tp: TopicPartition) -> PartitionOffsets | None:
    try:
        return port.list_offsets(tp)
    except Exception as e:  # noqa: BLE001 - an unreachable cluster or unknown partition: no offsets
        log.debug("list_offsets %s failed: %s", tp, e)
        return None
