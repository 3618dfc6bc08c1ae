"""read_committed of the metadata log, decided by the log's own transaction markers.

A Fetch answer lists the aborted transactions that overlap the fetched range (producer ID and
first offset); a read_committed consumer drops a producer's transactional batches from that first
offset up to the producer's next ABORT marker. noida-db (0.2.3) also lists every aborted
transaction that ended before the fetch offset; aiokafka then drops every later transactional
batch of that producer ID in the fetch, and a transactional id keeps its producer ID across
epochs. So after a controller died inside a transaction, a follower that fetched past the ABORT
marker never saw the next controller's records, and that controller's appends timed out (30 s).

A producer's transactions on a partition follow one another: each transactional batch belongs to
the transaction that the producer's next marker (COMMIT or ABORT) on the partition ends. The
transaction coordinator writes those markers, after fencing the producer's older epochs; so the
marker is the receiver's own word on the batch. ``install()`` wraps aiokafka 0.14's
``PartitionRecords`` for the topics ``watch()`` names (the metadata log; ``__mirror_state`` in the
worker's Faust consumer, whose table recovery reads it; ``streams.state.raw_log`` applies
``fates`` itself):

- a transactional batch whose producer's next marker is in the same fetch answer is kept or
  dropped by that marker, whatever the list says (on a broker whose list is right, as Kafka's,
  both say the same);
- a batch whose marker is not in the answer (the answer was cut by its size) is left to the list,
  as aiokafka decides it, when it is the answer's first batch; otherwise the answer's records stop
  before it, and the next fetch, starting there, holds more of its transaction.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.record.control_record import ABORT_MARKER, ControlRecord

log = logging.getLogger(__name__)

_watched: set[str] = set()  # topics read so


def watch(topic: str) -> None:
    _watched.add(topic)


class _Batches:
    """Batches already read off a fetch answer, handed on as ``MemoryRecords`` hands them."""

    def __init__(self, batches: list[Any]) -> None:
        self._batches, self._next = batches, 0

    def has_next(self) -> bool:
        return self._next < len(self._batches)

    def next_batch(self) -> Any:
        batch = self._batches[self._next]
        self._next += 1
        return batch


class _ReadMarker:
    """A control batch whose one record was read here: its CRC is checked before (the batch
    allows that only before it is iterated), and aiokafka is given both answers."""

    def __init__(self, batch: Any) -> None:
        self._batch = batch
        self.crc_ok = bool(batch.validate_crc())
        self.abort = False
        for record in batch:  # a control batch holds one control record
            self.abort = ControlRecord.parse(record.key) == ABORT_MARKER
            break

    def validate_crc(self) -> bool:
        return self.crc_ok

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)


def fates(batches: list[Any]) -> tuple[dict[int, bool | None], dict[int, bool]]:
    """Per transactional data batch (by base offset): aborted (True), committed (False) or not
    known from these batches (None); and per control batch: whether it is an ABORT marker.
    Control batches are replaced in ``batches`` by their ``_ReadMarker``."""
    markers: dict[int, bool] = {}
    for i, b in enumerate(batches):
        if b.is_control_batch:
            batches[i] = marker = _ReadMarker(b)
            markers[b.base_offset] = marker.abort
    out: dict[int, bool | None] = {}
    next_marker: dict[int, bool] = {}  # producer ID -> its next marker's abort, walking backwards
    for b in reversed(batches):
        if b.producer_id is None or b.producer_id < 0:
            continue
        if b.is_control_batch:
            next_marker[b.producer_id] = markers[b.base_offset]
        elif b.is_transactional:
            out[b.base_offset] = next_marker.get(b.producer_id)
    return out, markers


def install() -> bool:
    """Idempotent; patches aiokafka's fetcher for this process. False if it could not (another
    aiokafka layout): reads are aiokafka's own then."""
    try:
        from aiokafka.consumer import fetcher
    except ImportError:  # pragma: no cover
        return False
    original = fetcher.PartitionRecords
    if getattr(original, "_kip1279_markers", False):
        return True
    if not all(hasattr(original, m) for m in ("_consume_aborted_up_to", "_contains_abort_marker", "_unpack_records")):
        log.warning("aiokafka's PartitionRecords has another layout: the metadata log's reads trust the broker's list")
        return False

    class MarkerCheckedRecords(original):  # type: ignore[misc, valid-type]
        _kip1279_markers = True

        def __init__(self, tp: Any, records: Any, aborted_transactions: Any, *args: Any) -> None:
            self._fates: dict[int, tuple[int, bool | None]] = {}
            self._markers: dict[int, bool] = {}
            if tp.topic in _watched and aborted_transactions:  # nothing listed: nothing dropped
                batches = []
                while records.has_next():
                    batch = records.next_batch()
                    if batch is None:
                        break
                    batches.append(batch)
                fate, self._markers = fates(batches)
                listed = {pid for pid, _ in aborted_transactions}
                for i, b in enumerate(batches):
                    known = fate.get(b.base_offset, False)
                    if known is None and b.producer_id in listed and i > 0:
                        batches = batches[:i]  # the next fetch starts at this batch
                        break
                    if b.base_offset in fate:
                        self._fates[b.base_offset] = (b.producer_id, fate[b.base_offset])
                records = _Batches(batches)
            super().__init__(tp, records, aborted_transactions, *args)

        def _consume_aborted_up_to(self, batch_offset: int) -> None:
            super()._consume_aborted_up_to(batch_offset)
            pid, aborted = self._fates.get(batch_offset, (None, None))
            if aborted is True:
                self._aborted_producers.add(pid)
            elif aborted is False:
                self._aborted_producers.discard(pid)

        def _contains_abort_marker(self, next_batch: Any) -> bool:
            known = self._markers.get(next_batch.base_offset)
            return known if known is not None else bool(super()._contains_abort_marker(next_batch))

    fetcher.PartitionRecords = MarkerCheckedRecords
    return True
