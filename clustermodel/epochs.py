"""The leader-epoch cache: epoch -> start offset, as Kafka's LeaderEpochFileCache.

Entries are strictly increasing in both epoch and start offset. ``end_offset_for`` answers
OffsetsForLeaderEpoch exactly as Kafka does, which is what follower truncation and KIP-1279's
LME truncation rely on.
"""

from __future__ import annotations

import bisect

from coordinator.ports import UNDEFINED_EPOCH, UNDEFINED_OFFSET, EpochEndOffset

_UNDEFINED = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_OFFSET)


class LeaderEpochCache:
    """Sorted (epoch, start offset) entries; empty lists are shared-free and cheap for idle partitions."""

    __slots__ = ("_epochs", "_starts")

    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries or ():
            self.assign(epoch, start)

    def entries(self) -> list[tuple[int, int]]:
        """All (epoch, start offset) pairs, oldest first."""
        return list(zip(self._epochs, self._starts))

    def __len__(self) -> int:
        return len(self._epochs)

    def latest_epoch(self) -> int | None:
        """The newest epoch, or None when the cache is empty."""
        return self._epochs[-1] if self._epochs else None

    def earliest_epoch(self) -> int | None:
        return self._epochs[0] if self._epochs else None

    def start_offset_of(self, epoch: int) -> int | None:
        i = bisect.bisect_left(self._epochs, epoch)
        if i < len(self._epochs) and self._epochs[i] == epoch:
            return self._starts[i]
        return None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (Kafka's assign: drop entries it contradicts)."""
        if epoch < 0:
            return False
        if self._epochs:
            last_epoch, last_start = self._epochs[-1], self._starts[-1]
            if epoch == last_epoch and start_offset >= last_start:
                return False
        # Monotonicity: remove entries whose epoch or start offset is not below the new one.
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """Kafka's endOffsetFor: (largest epoch <= requested, start offset of the next epoch or the LEO)."""
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return _UNDEFINED
        if self._epochs[-1] == requested_epoch:
            return EpochEndOffset(requested_epoch, log_end_offset)
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            # Requested epoch is above every epoch we know.
            return _UNDEFINED
        if higher == 0:
            # Below our first epoch: Kafka answers the requested epoch ending where ours start.
            return EpochEndOffset(requested_epoch, self._starts[0])
        return EpochEndOffset(self._epochs[higher - 1], self._starts[higher])

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (log truncated to ``end_offset``)."""
        while self._starts and self._starts[-1] >= end_offset:
            self._epochs.pop()
            self._starts.pop()

    def truncate_from_start(self, start_offset: int) -> None:
        """Log start moved to ``start_offset``: entries wholly below it go, the covering one starts there."""
        i = bisect.bisect_right(self._starts, start_offset)
        if i == 0:
            return
        # Entry i-1 covers start_offset; keep it but move its start up, drop the older ones.
        epoch = self._epochs[i - 1]
        del self._epochs[: i - 1]
        del self._starts[: i - 1]
        self._epochs[0] = epoch
        self._starts[0] = start_offset

    def clear(self) -> None:
        self._epochs.clear()
        self._starts.clear()

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at ``offset`` was written in (by entry ranges)."""
        i = bisect.bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else None
