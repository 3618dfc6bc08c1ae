"""One replica's partition log: batches, log start, LEO, the leader-epoch cache, producer state.

Batches are kept whole and in offset order; offsets may have gaps (compaction, or a mirror
copying a compacted source). Idle logs are a handful of slots and two empty lists.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

import msgspec

from coordinator.ports import AbortedTransaction, Batch, ControlType, EpochEndOffset, OpenTransaction

from .epochs import LeaderEpochCache
from .producers import ProducerStateManager
from .records import decode_records, payload_keeping


class LogAppendError(Exception):
    """A batch does not fit at the end of the log (it starts below the LEO)."""

    def __init__(self, base_offset: int, leo: int) -> None:
        super().__init__(f"batch at {base_offset} below LEO {leo}")
        self.base_offset = base_offset
        self.leo = leo


class PartitionLog:
    """A replica's log. The partition (replica.py) decides who appends; this keeps the log consistent."""

    __slots__ = ("batches", "_lasts", "log_start", "leo", "epochs", "producers", "size_bytes")

    def __init__(self, log_start: int = 0) -> None:
        self.batches: list[Batch] = []
        self._lasts: list[int] = []  # last offsets, parallel to batches, for bisect
        self.log_start = log_start
        self.leo = log_start
        self.epochs = LeaderEpochCache()
        self.producers: ProducerStateManager | None = None
        self.size_bytes = 0

    # ---------------------------------------------------------------- appends

    def append(self, batch: Batch) -> None:
        """Append a batch at or after the LEO; the epoch cache and producer state follow it."""
        if batch.base_offset < self.leo or batch.last_offset < batch.base_offset:
            raise LogAppendError(batch.base_offset, self.leo)
        self.batches.append(batch)
        self._lasts.append(batch.last_offset)
        self.leo = batch.last_offset + 1
        self.size_bytes += batch.size_in_bytes
        self.epochs.assign(batch.leader_epoch, batch.base_offset)
        if self.producers is not None:
            self.producers.update(batch)
        elif batch.producer_id >= 0 or (batch.is_control and batch.control_type != ControlType.MIRROR_PID_RESET):
            # A MIRROR_PID_RESET clears the producers: on a log that has none it changes nothing,
            # so the stop's reset of a partition without producers builds no state for it.
            self.producer_state().update(batch)

    def producer_state(self) -> ProducerStateManager:
        if self.producers is None:
            self.producers = ProducerStateManager()
        return self.producers

    # ---------------------------------------------------------------- reads

    def read(self, start: int, upper: int, max_bytes: int) -> list[Batch]:
        """Whole batches from the one containing ``start``, ending below ``upper``, within ``max_bytes``.

        The first batch is returned even if larger than ``max_bytes`` (KIP-74), so fetches progress.
        """
        i = bisect.bisect_left(self._lasts, start)
        out: list[Batch] = []
        used = 0
        batches = self.batches
        while i < len(batches):
            b = batches[i]
            if b.last_offset >= upper:
                break
            size = b.size_in_bytes
            if out and used + size > max_bytes:
                break
            out.append(b)
            used += size
            i += 1
        return out

    def batches_from(self, start: int) -> list[Batch]:
        """Every batch whose last offset is at or after ``start``."""
        return self.batches[bisect.bisect_left(self._lasts, start) :]

    def batch_at(self, offset: int) -> Batch | None:
        """The batch holding ``offset``, if any."""
        i = bisect.bisect_left(self._lasts, offset)
        if i < len(self.batches) and self.batches[i].base_offset <= offset:
            return self.batches[i]
        return None

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        """OffsetsForLeaderEpoch against this log."""
        return self.epochs.end_offset_for(epoch, self.leo)

    def latest_epoch(self) -> int | None:
        return self.epochs.latest_epoch()

    def lso(self, hw: int) -> int:
        """min(HW, first unstable offset): open transactions hold the LSO back."""
        if self.producers is None:
            return hw
        self.producers.on_high_watermark(hw)
        first = self.producers.first_unstable_offset()
        return hw if first is None else max(self.log_start, min(hw, first))

    def open_transactions(self) -> list[OpenTransaction]:
        return self.producers.open_transactions() if self.producers else []

    def aborted_between(self, start: int, upper: int) -> tuple[AbortedTransaction, ...]:
        return self.producers.aborted_between(start, upper) if self.producers else ()

    # ---------------------------------------------------------------- truncation and retention

    def truncate_to(self, offset: int, hw: int) -> None:
        """Remove everything at and above ``offset``; epoch cache and producer state follow.

        A batch straddling ``offset`` goes whole and the LEO lands at its base offset (Kafka
        would keep the LEO at ``offset`` over a hole; keeping batches whole lets a re-fetch of
        that batch append cleanly). Below the log start this is truncate_fully_and_start_at.
        """
        if offset >= self.leo:
            # Kafka (UnifiedLog.truncateTo) always trims the epoch cache at the LEO: an epoch
            # assigned as leader with nothing appended conflicts with the epochs being copied, and
            # a fetch naming it as the last fetched epoch would diverge forever.
            self.epochs.truncate_from_end(self.leo)
            return
        if offset < self.log_start:
            self.truncate_fully_and_start_at(offset)
            return
        i = bisect.bisect_left(self._lasts, offset)
        new_leo = offset
        if i < len(self.batches) and self.batches[i].base_offset < offset:
            new_leo = max(self.log_start, self.batches[i].base_offset)
        removed = self.batches[i:]
        del self.batches[i:]
        del self._lasts[i:]
        self.size_bytes -= sum(b.size_in_bytes for b in removed)
        self.leo = new_leo
        self.epochs.truncate_from_end(new_leo)
        self._rebuild_producer_state(min(hw, new_leo))

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """An empty log starting at ``offset`` (after OffsetOutOfRange, as a Kafka follower does)."""
        self.batches = []
        self._lasts = []
        self.log_start = self.leo = offset
        self.size_bytes = 0
        self.epochs.clear()
        self.producers = None

    def advance_log_start(self, offset: int) -> bool:
        """Move the log start up to ``offset`` (retention, DeleteRecords); batches wholly below go."""
        if offset <= self.log_start:
            return False
        offset = min(offset, self.leo)
        i = bisect.bisect_left(self._lasts, offset)
        removed = self.batches[:i]
        del self.batches[:i]
        del self._lasts[:i]
        self.size_bytes -= sum(b.size_in_bytes for b in removed)
        self.log_start = offset
        self.epochs.truncate_from_start(offset)
        if self.producers is not None:
            self.producers.trim_start(offset)
        return True

    def retention_target(self, now_ms: int, retention_ms: int, retention_bytes: int, hw: int) -> int:
        """The log start retention would move to: whole batches below the HW that are too old or too much."""
        target = self.log_start
        size = self.size_bytes
        for b in self.batches:
            if b.last_offset >= hw:
                break
            too_old = retention_ms >= 0 and b.timestamp < now_ms - retention_ms
            too_big = retention_bytes >= 0 and size > retention_bytes
            if not (too_old or too_big):
                break
            size -= b.size_in_bytes
            target = b.last_offset + 1
        return target

    def compact(self, upper: int) -> int:
        """Keep only the latest record per key below ``upper``; returns how many records went.

        Transactional and control batches are left alone; an emptied batch is dropped unless it
        carries a producer ID (Kafka keeps those for producer state). Base and last offsets of
        surviving batches are kept, so offsets gain gaps, as in Kafka.
        """
        latest: dict[bytes | None, int] = {}
        decoded: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {}
        for idx, b in enumerate(self.batches):
            if b.last_offset >= upper:
                break
            if b.is_transactional or b.is_control:
                continue
            try:
                recs = decode_records(b.payload)
            except msgspec.DecodeError:
                continue
            decoded[idx] = recs
            for delta, key, _ in recs:
                if key is not None:
                    latest[key] = b.base_offset + delta
        removed = 0
        kept: list[Batch] = []
        for idx, b in enumerate(self.batches):
            recs = decoded.get(idx)
            if recs is None:
                kept.append(b)
                continue
            survivors = [r for r in recs if r[1] is None or latest[r[1]] == b.base_offset + r[0]]
            removed += len(recs) - len(survivors)
            if len(survivors) == len(recs):
                kept.append(b)
            elif survivors or b.has_producer_id:
                kept.append(msgspec.structs.replace(b, payload=payload_keeping(b.payload, survivors), record_count=len(survivors)))
        if removed:
            self._replace_batches(kept)
        return removed

    def _replace_batches(self, batches: Sequence[Batch]) -> None:
        self.batches = list(batches)
        self._lasts = [b.last_offset for b in self.batches]
        self.size_bytes = sum(b.size_in_bytes for b in self.batches)

    def _rebuild_producer_state(self, hw: int) -> None:
        if self.producers is None:
            return
        # Kafka reloads producer state from the last snapshot below the truncation point and the
        # log; the model replays the whole log, which gives the same state.
        self.producers = ProducerStateManager.rebuild(self.batches, hw)

    # ---------------------------------------------------------------- snapshots

    def load(self, log_start: int, leo: int, batches: Iterable[Batch], epochs: list[tuple[int, int]], hw: int) -> None:
        """Restore from a snapshot: batches as they were, epoch cache as saved, producer state replayed."""
        self._replace_batches(list(batches))
        self.log_start = log_start
        self.leo = leo
        self.epochs = LeaderEpochCache(epochs)
        self.producers = None
        if any(b.has_producer_id or b.is_control for b in self.batches):
            self.producers = ProducerStateManager.rebuild(self.batches, hw)
