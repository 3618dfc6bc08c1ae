"""Read-ahead: batches a broker sent beyond the asked bytes, and prefetches.

A broker that sends more than asked (noida-db 0.2.3 sends the whole rest of the log) would make
every fetch resend what the last one cut off: the whole batches that came beyond the budget serve
the next fetches of that partition (READ_UNCOMMITTED only: aborted lists are per response), up to
``max_bytes`` per port and for ``ttl_s``.

A partition still behind the HW has its next fetch sent as soon as an answer is served
(``Prefetches``), so that the source reads it while the mirror appends the last answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from coordinator.ports import Batch, FetchResult, TopicPartition

READ_AHEAD_MAX_BYTES = 1 << 30
READ_AHEAD_TTL_S = 60.0


def within(batches: tuple[Batch, ...], max_bytes: int) -> tuple[Batch, ...]:
    """The first batch, then more while they fit ``max_bytes`` (Kafka's partition_max_bytes rule,
    kept here too: a broker may ignore the limit, noida-db 0.2.3 does)."""
    end = _end_within(batches, 0, max_bytes)
    return batches if end == len(batches) else batches[:end]


def _end_within(batches: tuple[Batch, ...], start: int, max_bytes: int) -> int:
    """Where ``within`` ends, for the batches from index ``start``."""
    used = 0
    for n in range(start, len(batches)):
        used += len(batches[n].payload)
        if used > max_bytes and n > start:
            return n
    return len(batches)


class _Ahead:
    """Whole batches a broker sent beyond the asked bytes, kept for the next fetch of the partition:
    ``batches[start:]``, served from ``start`` on (a response of the whole log is thousands of
    batches: neither sliced nor summed again at each fetch)."""

    def __init__(self, offset: int, batches: tuple[Batch, ...], result: FetchResult, at: float) -> None:
        self.offset, self.batches, self.result, self.at = offset, batches, result, at
        self.start = 0
        self.size = sum(len(b.payload) for b in batches)


class ReadAhead:
    """Per (partition, isolation): the batches beyond the last fetch's budget. Loop-thread only."""

    def __init__(self, max_bytes: int = READ_AHEAD_MAX_BYTES, ttl_s: float = READ_AHEAD_TTL_S) -> None:
        self.max_bytes, self.ttl_s = max_bytes, ttl_s
        self._ahead: dict[tuple[TopicPartition, int], _Ahead] = {}
        self._bytes = 0

    def take(self, a: tuple[Any, ...], now: float) -> FetchResult | None:
        """The next batches for fetch args ``a`` (see ``fetch_args``), if they start at the fetch
        offset, are recent and were read at the asked leader epoch."""
        tp, offset, max_bytes, isolation, current_epoch, _ = a
        key = (tp, isolation)
        ahead = self._ahead.pop(key, None)
        if ahead is None:
            return None
        self._bytes -= ahead.size
        if (ahead.offset != offset or now - ahead.at > self.ttl_s
                or (current_epoch is not None and current_epoch != ahead.result.leader_epoch)):  # fmt: skip
            return None
        end = _end_within(ahead.batches, ahead.start, max(max_bytes, 1))
        kept = ahead.batches[ahead.start : end]
        if end < len(ahead.batches):
            ahead.start, ahead.offset = end, ahead.batches[end].base_offset
            ahead.size -= sum(len(b.payload) for b in kept)
            self._ahead[key] = ahead
            self._bytes += ahead.size
        return FetchResult(kept, ahead.result.hw, ahead.result.lso, ahead.result.log_start, ahead.result.leader_epoch)

    def holds(self, key: tuple[TopicPartition, int]) -> bool:
        return key in self._ahead

    def keep(self, key: tuple[TopicPartition, int], result: FetchResult, rest: tuple[Batch, ...], at: float) -> None:
        old = self._ahead.pop(key, None)
        if old is not None:
            self._bytes -= old.size
        room = self.max_bytes - self._bytes
        kept = within(rest, room) if room > 0 else ()
        if kept and sum(len(b.payload) for b in kept) > room:
            kept = ()
        if kept:
            ahead = _Ahead(kept[0].base_offset, kept, result, at)
            self._ahead[key] = ahead
            self._bytes += ahead.size


PREFETCH_TTL_S = 5.0


class _Prefetch:
    def __init__(self, args: tuple[Any, ...], index: int, task: asyncio.Task[dict[int, Any]], at: float) -> None:
        self.args, self.index, self.task, self.at = args, index, task, at


class Prefetches:
    """The next fetch of a partition that is behind, sent as soon as the last answer came, as a
    Kafka consumer prefetches: the source reads it while the mirror appends the last one.
    Per (partition, isolation), READ_UNCOMMITTED only; at most ``max_bytes`` asked at once (an
    answer not taken within ``ttl_s`` is dropped). Loop-thread only."""

    def __init__(self, max_bytes: int, ttl_s: float = PREFETCH_TTL_S) -> None:
        self.max_bytes, self.ttl_s = max_bytes, ttl_s
        self._by_key: dict[tuple[TopicPartition, int], _Prefetch] = {}
        self.asked = 0  # bytes asked by the prefetches held

    def room(self, want: int) -> bool:
        return self.asked + want <= self.max_bytes

    def add(self, args: list[tuple[Any, ...]], task: asyncio.Task[dict[int, Any]], now: float) -> None:
        """``task`` answers ``{index: result}`` for ``args`` (each a ``fetch_args`` tuple)."""
        for i, a in enumerate(args):
            old = self._by_key.pop((a[0], a[3]), None)
            if old is not None:
                self.asked -= max(old.args[2], 1)
            self._by_key[(a[0], a[3])] = _Prefetch(a, i, task, now)
            self.asked += max(a[2], 1)

    def pop(self, a: tuple[Any, ...], now: float) -> _Prefetch | None:
        """The prefetch that asked exactly what ``a`` asks (offset, epochs; the byte limit may
        differ), else None; a prefetch for another position is dropped."""
        got = self._by_key.pop((a[0], a[3]), None)
        if got is None:
            return None
        self.asked -= max(got.args[2], 1)
        if now - got.at > self.ttl_s or got.args[1] != a[1] or got.args[4:] != a[4:] or got.args[2] > a[2]:
            return None
        return got

    def expire(self, now: float) -> None:
        for key in [k for k, p in self._by_key.items() if now - p.at > self.ttl_s]:
            self.asked -= max(self._by_key.pop(key).args[2], 1)
