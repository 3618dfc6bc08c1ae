"""Counts of mirror partitions per state, kept up to date as states change.

A progress poll (``--wait``) of 50,000 partitions asks "how many are STOPPED" about once a
second; walking every partition's state for it cost the controller more than the failover's
own reads. A ``StateTally`` is told of each change of a partition's state (``set``,
``discard``) and answers per topic (``topic_counts``) or per mirror (``mirror_counts``) from
counts it keeps, at a cost proportional to the topics, not the partitions. Its answers equal a
walk over the states it was told of (the property the tests check).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping

from coordinator.states import MirrorState

TallyKey = tuple[str, uuid.UUID, int]  # (mirror name, topic ID, partition)


class StateTally:
    """Per (mirror, topic): each partition's state and the counts per state; per mirror: the counts."""

    __slots__ = ("_parts", "_counts", "_mirrors")

    def __init__(self, states: Iterable[tuple[TallyKey, MirrorState]] = ()) -> None:
        self._parts: dict[tuple[str, int], dict[int, MirrorState]] = {}  # (mirror, topic ID as an int)
        self._counts: dict[tuple[str, int], dict[MirrorState, int]] = {}
        self._mirrors: dict[str, dict[MirrorState, int]] = {}
        for key, state in states:
            self.set(key, state)

    def __len__(self) -> int:
        return sum(len(p) for p in self._parts.values())

    def set(self, key: TallyKey, state: MirrorState) -> None:
        mirror, topic_id, partition = key
        topic = (mirror, topic_id.int)  # an int hashes in C, a UUID in Python (UUID.__hash__)
        parts = self._parts.get(topic)
        if parts is None:
            parts = self._parts[topic] = {}
            self._counts[topic] = {}
        before = parts.get(partition)
        if before is state:
            return
        parts[partition] = state
        counts, per_mirror = self._counts[topic], self._mirrors.setdefault(mirror, {})
        if before is not None:
            _dec(counts, before)
            _dec(per_mirror, before)
        counts[state] = counts.get(state, 0) + 1
        per_mirror[state] = per_mirror.get(state, 0) + 1

    def discard(self, key: TallyKey) -> None:
        mirror, topic_id, partition = key
        topic = (mirror, topic_id.int)  # an int hashes in C, a UUID in Python (UUID.__hash__)
        parts = self._parts.get(topic)
        if parts is None or partition not in parts:
            return
        before = parts.pop(partition)
        _dec(self._counts[topic], before)
        per_mirror = self._mirrors[mirror]
        _dec(per_mirror, before)
        if not parts:
            del self._parts[topic], self._counts[topic]
        if not per_mirror:
            del self._mirrors[mirror]

    def states_of(self, mirror: str, topic_id: uuid.UUID) -> Collection[MirrorState]:
        """The states some partition of the topic is in (live: do not change it)."""
        counts = self._counts.get((mirror, topic_id.int))
        return counts.keys() if counts is not None else ()

    def mirror_counts(self, mirror: str) -> Mapping[MirrorState, int]:
        """Partitions with a state, per state, in ``mirror`` (a copy)."""
        return dict(self._mirrors.get(mirror, {}))

    def topic_counts(self, mirror: str, topic_id: uuid.UUID, partitions: Collection[int]) -> dict[MirrorState, int]:
        """Counts per state over ``partitions`` of the topic (a partition with no state is UNKNOWN),
        as a walk over them would give; zero counts left out."""
        topic = (mirror, topic_id.int)  # an int hashes in C, a UUID in Python (UUID.__hash__)
        parts = self._parts.get(topic)
        if not parts:
            return {MirrorState.UNKNOWN: len(partitions)} if partitions else {}
        if parts.keys() <= _as_set(partitions):  # the usual case: counts as kept
            out = dict(self._counts[topic])
            known = len(parts)
        else:  # states of partitions the caller does not list (rare): walk them
            out, known = {}, 0
            for p in partitions:
                s = parts.get(p)
                if s is not None:
                    out[s] = out.get(s, 0) + 1
                    known += 1
        unknown = len(partitions) - known
        if unknown:
            out[MirrorState.UNKNOWN] = out.get(MirrorState.UNKNOWN, 0) + unknown
        return {s: n for s, n in out.items() if n}


def _dec(counts: dict[MirrorState, int], state: MirrorState) -> None:
    n = counts[state] - 1
    if n:
        counts[state] = n
    else:
        del counts[state]


def _as_set(partitions: Collection[int]) -> Collection[int]:
    # dict key views and sets compare as sets in C; anything else is made one
    return partitions if isinstance(partitions, (set, frozenset)) else (
        partitions.keys() if isinstance(partitions, Mapping) else set(partitions))  # type: ignore[attr-defined]
