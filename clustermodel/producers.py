"""Producer state and the transaction index of one partition log (Kafka's ProducerStateManager).

Tracks, per producer ID, the epoch and the last sequences (for idempotence), the open
transactions (which hold the LSO back), completed transactions whose marker is not yet below
the HW (they too hold it back, as Kafka's "unreplicated transactions"), and the aborted
transactions index that read_committed fetches report. Everything here can be rebuilt by
replaying the log, which is what truncation does.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

import msgspec

from coordinator.ports import AbortedTransaction, Batch, ControlType, OpenTransaction

# Kafka keeps the metadata of the last 5 batches per producer for duplicate detection.
NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1


class ProducerError(Exception):
    """Base of producer-side errors the model raises on a leader (not port errors)."""


class InvalidProducerEpoch(ProducerError):
    """The batch's producer epoch is older than the partition's: the producer was fenced."""


class OutOfOrderSequence(ProducerError):
    """The batch's sequence does not follow the producer's last one."""


class DuplicateSequence(ProducerError):
    """The batch repeats one already written; ``offsets`` are where it was written."""

    def __init__(self, base_offset: int, last_offset: int) -> None:
        super().__init__(f"duplicate batch at [{base_offset}, {last_offset}]")
        self.base_offset = base_offset
        self.last_offset = last_offset


class InvalidTxnState(ProducerError):
    """A transactional batch arrived where a non-transactional one was expected, or the reverse."""


class BatchMetadata(msgspec.Struct, gc=False):
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


class ProducerEntry(msgspec.Struct, gc=False):
    producer_id: int
    producer_epoch: int
    batches: list[BatchMetadata]
    current_txn_first_offset: int | None = None

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


class CompletedTxn(msgspec.Struct, gc=False):
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class ProducerStateManager:
    """Per-partition producer state; built lazily (idle partitions carry none)."""

    __slots__ = ("producers", "ongoing", "unreplicated", "aborted")

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # first offset -> producer id for transactions without a marker, ordered by first offset.
        self.ongoing: dict[int, int] = {}
        # completed transactions whose marker is at or above the HW, ordered by marker offset.
        self.unreplicated: list[CompletedTxn] = []
        # aborted transactions index, ordered by marker offset.
        self.aborted: list[CompletedTxn] = []

    # ---------------------------------------------------------------- validation (leader appends)

    def validate(self, batch: Batch) -> None:
        """Check a producer's batch on the leader: epoch fencing, sequence order, duplicates."""
        if not batch.has_producer_id:
            return
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            return
        if batch.producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpoch(
                f"producer {batch.producer_id} epoch {batch.producer_epoch} < {entry.producer_epoch}"
            )
        if batch.is_control or batch.base_sequence < 0:
            return
        last_seq = _last_seq(batch)
        if batch.producer_epoch == entry.producer_epoch:
            dup = entry.find_duplicate(batch.base_sequence, last_seq)
            if dup is not None:
                raise DuplicateSequence(dup.base_offset, dup.last_offset)
            if entry.batches:
                expected = (entry.batches[-1].last_seq + 1) & INT32_MAX
                if batch.base_sequence != expected:
                    raise OutOfOrderSequence(
                        f"producer {batch.producer_id} sequence {batch.base_sequence}, expected {expected}"
                    )
        elif batch.base_sequence != 0:
            raise OutOfOrderSequence(
                f"producer {batch.producer_id} new epoch {batch.producer_epoch} must start at sequence 0"
            )
        if batch.is_transactional and entry.current_txn_first_offset is None:
            return
        if not batch.is_transactional and entry.current_txn_first_offset is not None:
            raise InvalidTxnState(f"producer {batch.producer_id} has an open transaction")

    # ---------------------------------------------------------------- updates (every append)

    def update(self, batch: Batch) -> None:
        """Apply an appended batch, leader or follower alike (followers skip validation, as Kafka)."""
        if batch.is_control and batch.control_type == ControlType.MIRROR_PID_RESET:
            # KIP-1279: mirrored producers are forgotten, so local producers reusing their IDs
            # start fresh. Open transactions stay open: the coordinator aborts them first.
            self.producers.clear()
            return
        if not batch.has_producer_id:
            return
        pid = batch.producer_id
        entry = self.producers.get(pid)
        if entry is None or batch.producer_epoch > entry.producer_epoch:
            entry = ProducerEntry(pid, batch.producer_epoch, [], _ongoing_first(self.ongoing, pid))
            self.producers[pid] = entry
        if batch.is_control:
            if batch.control_type in (ControlType.ABORT, ControlType.COMMIT):
                self._complete_txn(pid, batch)
                entry.current_txn_first_offset = None
            return
        if batch.base_sequence >= 0:
            entry.batches.append(
                BatchMetadata(batch.base_sequence, _last_seq(batch), batch.base_offset, batch.last_offset)
            )
            if len(entry.batches) > NUM_BATCHES_TO_RETAIN:
                del entry.batches[0]
        if batch.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = batch.base_offset
            self.ongoing[batch.base_offset] = pid

    def _complete_txn(self, pid: int, marker: Batch) -> None:
        first = _ongoing_first(self.ongoing, pid)
        if first is None:
            # A marker with no open transaction (e.g. a retried abort): nothing to close.
            return
        del self.ongoing[first]
        txn = CompletedTxn(pid, first, marker.base_offset, marker.control_type == ControlType.ABORT)
        self.unreplicated.append(txn)
        if txn.aborted:
            self.aborted.append(txn)

    # ---------------------------------------------------------------- offsets

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open or not-yet-replicated transaction."""
        candidates = [min(self.ongoing)] if self.ongoing else []
        if self.unreplicated:
            candidates.append(min(t.first_offset for t in self.unreplicated))
        return min(candidates) if candidates else None

    def on_high_watermark(self, hw: int) -> None:
        """Completed transactions whose marker is below the HW no longer hold the LSO back."""
        if self.unreplicated:
            self.unreplicated = [t for t in self.unreplicated if t.last_offset >= hw]

    def open_transactions(self) -> list[OpenTransaction]:
        out = []
        for first, pid in sorted(self.ongoing.items()):
            entry = self.producers.get(pid)
            out.append(OpenTransaction(pid, entry.producer_epoch if entry else -1, first))
        return out

    def aborted_between(self, start: int, upper: int) -> tuple[AbortedTransaction, ...]:
        """Aborted transactions overlapping [start, upper), as FetchResponse.AbortedTransactions."""
        lasts = [t.last_offset for t in self.aborted]
        i = bisect.bisect_left(lasts, start)
        return tuple(
            AbortedTransaction(t.producer_id, t.first_offset)
            for t in self.aborted[i:]
            if t.first_offset < upper
        )

    def trim_start(self, log_start: int) -> None:
        """Retention moved the log start: aborted transactions wholly below it leave the index."""
        self.aborted = [t for t in self.aborted if t.last_offset >= log_start]

    @classmethod
    def rebuild(cls, batches: Iterable[Batch], hw: int) -> ProducerStateManager:
        """Producer state replayed from the log (after truncation or loading a snapshot)."""
        state = cls()
        for batch in batches:
            state.update(batch)
        state.on_high_watermark(hw)
        return state


def _last_seq(batch: Batch) -> int:
    return (batch.base_sequence + batch.last_offset - batch.base_offset) & INT32_MAX


def _ongoing_first(ongoing: dict[int, int], pid: int) -> int | None:
    for first, p in ongoing.items():
        if p == pid:
            return first
    return None
