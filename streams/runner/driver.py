"""Observations as sans-I/O generators, and the driver that runs their port calls.

An observation yields one call (and gets its result, or its PortError raised into it) or a list
of calls (and gets the list of results, PortErrors as values); ``drive_all`` advances many of
them in lockstep so that every wave of calls goes out as one pipelined batch per port.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Sequence
from typing import Any, TypeVar

from coordinator.ports import DestinationCluster, PortError, SourceCluster, TopicPartition, UnknownTopicId

_PIPELINE_CHUNK = 16384  # calls per round trip (the client batches them per method): bounds the bytes in flight
K = TypeVar("K")

# A port call: (port, method, positional args, keyword args or None). Observations are generators
# that yield one call (and get its result, or its PortError raised into them) or a list of calls
# (and get the list of results, PortErrors as values); ``drive_all`` advances many of them in
# lockstep so that every wave of calls goes out as one pipelined batch per port.
Call = tuple[Any, str, tuple[Any, ...], dict[str, Any] | None]
Observer = Generator[Any, Any, Any]


def run_calls(calls: Sequence[Call], *, dedupe: bool = False) -> list[Any]:
    """Results in call order, a ``PortError`` as a value. Calls on a port that takes many at once
    (``call_many``: the model-server client batches them per method, as a Kafka client puts many
    partitions in one request) go out together; other ports are called one by one. ``dedupe``
    (reads only) asks each distinct call once."""
    out: list[Any] = [None] * len(calls)
    by_port: dict[int, tuple[Any, list[int]]] = {}
    for i, call in enumerate(calls):
        by_port.setdefault(id(call[0]), (call[0], []))[1].append(i)
    for port, idx in by_port.values():
        first: dict[Any, int] = {}
        todo: list[int] = []
        alias: list[tuple[int, int]] = []
        for i in idx:
            _, method, args, kwargs = calls[i]
            if dedupe and not kwargs:
                try:
                    seen = first.setdefault((method, args), i)
                except TypeError:  # unhashable arguments: no dedupe for this one
                    seen = i
                if seen != i:
                    alias.append((i, seen))
                    continue
            todo.append(i)
        many = getattr(port, "call_many", None) if len(todo) > 1 else None
        if many is None:
            for i in todo:
                _, method, args, kwargs = calls[i]
                try:
                    out[i] = getattr(port, method)(*args, **(kwargs or {}))
                except PortError as e:
                    out[i] = e
        else:
            for start in range(0, len(todo), _PIPELINE_CHUNK):
                chunk = todo[start : start + _PIPELINE_CHUNK]
                try:
                    got = many([(calls[i][1], calls[i][2], calls[i][3]) for i in chunk])
                except PortError as e:  # the connection failed: every call of the chunk failed with it
                    got = [e] * len(chunk)
                for i, r in zip(chunk, got):
                    if isinstance(r, BaseException) and not isinstance(r, PortError):
                        raise r
                    out[i] = r
        for i, seen in alias:
            out[i] = out[seen]
    return out


def drive_all(observers: dict[K, Observer]) -> dict[K, Any]:
    """Run observer generators to completion; each one's return value, or the PortError it let out."""
    results: dict[K, Any] = {}
    waiting: dict[K, Any] = {}

    def advance(key: K, value: Any, error: PortError | None) -> None:
        gen = observers[key]
        try:
            waiting[key] = gen.throw(error) if error is not None else gen.send(value)
        except StopIteration as stop:
            results[key] = stop.value
        except PortError as e:
            results[key] = e

    for key in observers:
        advance(key, None, None)
    while waiting:
        batch = list(waiting.items())
        waiting.clear()
        flat: list[Call] = []
        spans: list[tuple[K, int, int, bool]] = []
        for key, asked in batch:
            many = isinstance(asked, list)
            spans.append((key, len(flat), len(asked) if many else 1, many))
            flat.extend(asked if many else (asked,))
        got = run_calls(flat, dedupe=True)
        for key, start, n, many in spans:
            if many:
                advance(key, got[start : start + n], None)
            elif isinstance(got[start], PortError):
                advance(key, None, got[start])
            else:
                advance(key, got[start], None)
    return results


def drive_one(observer: Observer) -> Any:
    """Run one observer; raises the PortError it let out."""
    got = drive_all({0: observer})[0]
    if isinstance(got, PortError):
        raise got
    return got


def raise_first(values: Sequence[Any]) -> None:
    for v in values:
        if isinstance(v, PortError):
            raise v


def latest_epoch(port: DestinationCluster, tp: TopicPartition, dle: int) -> Observer:
    """The newest epoch in the destination's epoch cache, None when it is empty (an observer).

    Mirror partitions do not add their own leader epoch to the cache (their batches carry the
    source's), so OffsetsForLeaderEpoch(DLE) is undefined there. The model answers
    ``latest_epoch`` directly; with only the Protocol, OffsetsForLeaderEpoch is defined exactly
    up to the latest epoch, so a binary search over [0, DLE] finds it.
    """
    if getattr(port, "latest_epoch", None) is not None:
        epoch = yield (port, "latest_epoch", (tp,), None)
        return None if epoch < 0 else epoch
    lo, hi, found = 0, max(dle, 0), None
    while lo <= hi:
        mid = (lo + hi) // 2
        answer = yield (port, "end_offset_for_epoch", (tp, mid), None)
        if answer.undefined:
            hi = mid - 1
        else:
            found, lo = answer.epoch, mid + 1
    return found


def describe_one(port: SourceCluster | DestinationCluster, topic_id: uuid.UUID) -> Observer:
    """One topic's metadata, None when the cluster does not know the ID (an observer)."""
    try:
        found = yield (port, "describe_topics", ((topic_id,),), None)
    except UnknownTopicId:
        return None
    return found[0] if found else None
