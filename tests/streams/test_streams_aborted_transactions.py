"""Which transactional batches of a fetch answer are committed, read off the answer's own markers
(``streams.state.aborted_transactions``): a producer's batch belongs to the transaction its next
marker on the partition ends. The brokers' side is in ``test_streams_controller_ha.py``."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from streams.state.aborted_transactions import _ReadMarker, fates

ABORT, COMMIT = struct.pack(">hh", 0, 0), struct.pack(">hh", 0, 1)


@dataclass
class _Record:
    key: bytes


@dataclass
class _Batch:
    base_offset: int
    producer_id: int
    is_transactional: bool = True
    marker: bytes | None = None  # a control batch's one record key
    iterated: list[bool] = field(default_factory=list)

    @property
    def is_control_batch(self) -> bool:
        return self.marker is not None

    def validate_crc(self) -> bool:
        assert not self.iterated, "a batch's CRC is checked before it is iterated"
        return True

    def __iter__(self):  # noqa: ANN204
        self.iterated.append(True)
        return iter([_Record(self.marker)] if self.marker is not None else [])


def test_a_batch_is_committed_or_aborted_by_its_producers_next_marker_in_the_answer() -> None:
    # Producer 7's aborted transaction (0, 1; ABORT at 2), its next epoch's committed one (3, 4;
    # COMMIT at 5), producer 9 interleaved and committed, then 7's open-ended batch at 8.
    batches = [_Batch(0, 7), _Batch(1, 7), _Batch(2, 7, marker=ABORT), _Batch(3, 7), _Batch(4, 9), _Batch(5, 7),
               _Batch(6, 7, marker=COMMIT), _Batch(7, 9, marker=COMMIT), _Batch(8, 7), _Batch(9, 11, is_transactional=False)]
    fate, markers = fates(batches)
    assert fate == {0: True, 1: True, 3: False, 4: False, 5: False, 8: None}
    assert markers == {2: True, 6: False, 7: False}
    assert all(isinstance(batches[i], _ReadMarker) for i in (2, 6, 7))
    assert batches[2].validate_crc() and batches[2].base_offset == 2  # the marker keeps its batch's answers


def test_an_answer_with_no_transactional_batches_has_no_fates() -> None:
    assert fates([_Batch(0, -1, is_transactional=False), _Batch(1, 3, is_transactional=False)]) == ({}, {})
