"""Read-ahead (``streams.kafka.read_ahead``): a broker that ignores Fetch's byte limits sends the
whole rest of the log; the batches beyond the budget serve the next fetches, in order, within
each fetch's budget, and only at the position they start from."""

from __future__ import annotations

import uuid

from coordinator.ports import Batch, FetchResult, IsolationLevel, TopicPartition
from streams.kafka.partition_reads import fetch_args
from streams.kafka.read_ahead import ReadAhead

TP = TopicPartition(uuid.uuid4(), 0)
UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED


def _batches(n: int, size: int = 100) -> tuple[Batch, ...]:
    return tuple(Batch(base_offset=i * 10, last_offset=i * 10 + 9, leader_epoch=0, payload=bytes([i % 256]) * size,
                       record_count=10) for i in range(n))  # fmt: skip


def test_batches_beyond_the_budget_serve_the_next_fetches_in_order() -> None:
    ahead = ReadAhead(max_bytes=1 << 20)
    every = _batches(1000)
    result = FetchResult(every[:3], 10_000, 10_000, 0, 0)
    ahead.keep((TP, int(UNCOMMITTED)), result, every[3:], at=0.0)
    served, offset = list(every[:3]), 30
    while True:
        got = ahead.take(fetch_args(TP, offset, 250, UNCOMMITTED), now=1.0)
        if got is None:
            break
        assert got.batches and sum(len(b.payload) for b in got.batches) <= 250 and got.hw == 10_000
        served.extend(got.batches)
        offset = got.batches[-1].next_offset
    assert served == list(every) and ahead._bytes == 0 and not ahead.holds((TP, int(UNCOMMITTED)))


def test_a_fetch_at_another_position_drops_what_was_kept() -> None:
    ahead = ReadAhead(max_bytes=1 << 20)
    every = _batches(10)
    ahead.keep((TP, int(UNCOMMITTED)), FetchResult(every[:1], 100, 100, 0, 0), every[1:], at=0.0)
    assert ahead.take(fetch_args(TP, 10, 250, UNCOMMITTED), now=1.0).batches == every[1:3]
    assert ahead.take(fetch_args(TP, 0, 250, UNCOMMITTED), now=1.0) is None  # rewound: not from the kept ones
    assert ahead._bytes == 0 and ahead.take(fetch_args(TP, 30, 250, UNCOMMITTED), now=1.0) is None
