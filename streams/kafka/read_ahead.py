"""Read-ahead for brokers that ignore Fetch's byte limits.

A broker that sends more than asked (noida-db 0.2.3 sends the whole rest of the log) would make
every fetch resend what the last one cut off: the whole batches that came beyond the budget serve
the next fetches of that partition (READ_UNCOMMITTED only: aborted lists are per response), up to
``max_bytes`` per port and for ``ttl_s``.
"""

from __future__ import annotations

from typing import Any

from coordinator.ports import Batch, FetchResult, TopicPartition

READ_AHEAD_MAX_BYTES = 1 << 30
READ_AHEAD_TTL_S = 60.0


def within(batches: tuple[Batch, ...], max_bytes: int) -> tuple[Batch, ...]:
    """The first batch, then more while they fit ``max_bytes`` (Kafka's partition_max_bytes rule,
    kept here too: a broker may ignore the limit, noida-db 0.2.3 does)."""
    used = 0
    for n, b in enumerate(batches):
        used += len(b.payload)
        if used > max_bytes and n > 0:
            return batches[:n]
    return batches


class _Ahead:
    """Whole batches a broker sent beyond the asked bytes, kept for the next fetch of the partition."""

    def __init__(self, offset: int, batches: tuple[Batch, ...], result: FetchResult, at: float) -> None:
        self.offset, self.batches, self.result, self.at = offset, batches, result, at
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
        kept = within(ahead.batches, max(max_bytes, 1))
        rest = ahead.batches[len(kept):]
        if rest:
            self.keep(key, ahead.result, rest, ahead.at)
        return FetchResult(kept, ahead.result.hw, ahead.result.lso, ahead.result.log_start, ahead.result.leader_epoch)

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
