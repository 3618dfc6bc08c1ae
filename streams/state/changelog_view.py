"""The latest state of every mirror partition, read from ``__mirror_state``, with the offsets (source HW,
destination LEO) a describe shows beside it. The controller's describe and the worker's view of
table partitions other workers own both read through it."""

from __future__ import annotations

import logging
import asyncio
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple
from aiokafka import AIOKafkaConsumer, TopicPartition

from coordinator.state_counts import StateTally
from coordinator.states import MirrorState
from streams.config import CATCH_UP_FETCH_MAX_WAIT_MS
from streams.state.mirror_state_codec import MirrorStateCodec, RecordType
from streams.state.raw_log import RawLogReader

log = logging.getLogger(__name__)
StateKey = tuple[str, uuid.UUID, int]
_Offsets = tuple[int, int, float, str | None]  # (HW, LEO, looked up at, why the source could not say)


class PartitionStatus(NamedTuple):
    state: MirrorState
    retry_attempt: int = 0
    error_message: str | None = None
    source_hw: int = -1
    destination_leo: int = -1
    offsets_at: float = -1.0  # time.monotonic() of the lookup that gave the offsets; -1: none


# Source HW and destination LEO of many mirror partitions at once: (HW, LEO) per key, -1 where
# unknown, optionally with why the source could not say (shown in the error column). A
# coroutine, so the lookup chooses where it blocks (never on the controller's loop).
OffsetsLookup = Callable[[Sequence[StateKey]], Awaitable[Mapping[StateKey, tuple[int, int] | tuple[int, int, str | None]]]]


class MirrorStateChangelogView:
    """Follows every partition of ``__mirror_state`` and keeps each mirror partition's latest state.

    Offsets cost up to two cluster lookups per partition (source HW, destination LEO), batched
    (at 50,000 partitions a few pipelined calls per cluster). A describe looks them up for itself:
    offsets older than the request would show a lag that is no longer true. A caller may accept
    older ones (``max_age``, the CLI's ``--max-age``) and then reuses the last lookup's; progress
    polls (``--wait``) ask for states alone and cost no lookup at all.
    """

    def __init__(self, bootstrap: str, topic: str, num_partitions: int, offsets: OffsetsLookup | None = None,
                 partitions: Collection[int] | None = None) -> None:  # fmt: skip
        self.bootstrap, self.topic, self.num_partitions = bootstrap, topic, num_partitions
        # The changelog partitions followed (default: all); a worker needs only those it does not own.
        self.partitions = sorted(partitions) if partitions is not None else list(range(num_partitions))
        self.offsets = offsets
        self.codec = MirrorStateCodec()
        self._states: dict[StateKey, PartitionStatus] = {}
        # Counts per state, kept as ``_states`` changes (``tally``): what --wait polls.
        self._tally = StateTally()
        self._tallied: dict[StateKey, PartitionStatus] | None = self._states
        # Raw values read but not decoded yet, by raw key; and the decoded keys (they never change).
        self._latest: dict[bytes, tuple[bytes | None, int]] = {}
        self._keys: dict[bytes, StateKey] = {}
        self._status_by_prefix: dict[bytes, PartitionStatus] = {}  # see _decode_latest
        self._state_prefix = struct.pack(">h", RecordType.MIRROR_PARTITION_STATE)
        self._other_prefixes = frozenset(struct.pack(">h", t) for t in RecordType if t is not RecordType.MIRROR_PARTITION_STATE)
        self._consumer: AIOKafkaConsumer | None = None
        self._catch_up_lock = asyncio.Lock()  # one reader of the consumer at a time
        self._offsets_lock = asyncio.Lock()  # concurrent describes share one lookup
        self._offsets: dict[StateKey, _Offsets] = {}
        self.offsets_lookups = 0  # lookups made (each covers many partitions); tests and benches read it

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest", client_id="kip1279-controller-states",
                                    fetch_max_wait_ms=CATCH_UP_FETCH_MAX_WAIT_MS,
                                    isolation_level="read_committed")  # end offsets: the LSO  # fmt: skip
        await consumer.start()
        tps = [TopicPartition(self.topic, p) for p in self.partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        # Read only when asked (``catch_up``): between reads nothing is fetched. An idle consumer
        # at the end of a big changelog kept the broker answering ~100 fetches a second.
        consumer.pause(*tps)
        self._consumer = consumer

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def catch_up(self) -> dict[StateKey, PartitionStatus]:
        """Reads the changelog up to its last stable offsets as of this call (committed writes
        only: a fenced writer's aborted transaction never shows); the latest state per key."""
        async with self._catch_up_lock:
            await self._catch_up_locked()
        return self._states

    async def _catch_up_locked(self) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        tps = list(consumer.assignment())
        ends = await consumer.end_offsets(tps)
        latest = self._latest
        await self._read_to(consumer, tps, ends)  # the consumer stays paused: the read fetches itself
        if latest:
            changed = await _off_loop(len(latest), self._decode_latest, latest)
            tally = self.tally()
            for skey, status in changed.items():  # applied on the loop: readers never see a half-applied read
                if status is None:
                    self._states.pop(skey, None)
                    tally.discard(skey)
                else:
                    self._states[skey] = status
                    tally.set(skey, status.state)
            self._latest = {}  # only now: a read cancelled while decoding decodes them next time

    async def _read_to(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition], ends: Mapping[TopicPartition, int]) -> None:
        """Reads ``tps`` up to ``ends``, keeping the latest raw value per state key in ``_latest``.

        Whole record batches, straight from Fetch responses (``RawLogReader``): through the
        consumer's ``getmany`` each record cost ~5 us (a ConsumerRecord and the fetcher's
        bookkeeping per record), and the controller read every state a mass failover wrote
        (800,000 records at 200,000 partitions); a batch's records cost ~0.5 us."""
        latest, prefix, others = self._latest, self._state_prefix, self._other_prefixes

        def apply(key: bytes | None, value: bytes | None, offset: int) -> None:
            key = key or b""
            if key[:2] == prefix:  # keep the latest raw value; decoded below, once per key
                latest[key] = (value, offset)
            elif key[:2] not in others:
                log.error("undecodable %s record at offset %d: unknown record type", self.topic, offset)

        await RawLogReader(consumer).read_to(tps, ends, apply)

    def _decode_latest(self, latest: Mapping[bytes, tuple[bytes | None, int]]) -> dict[StateKey, PartitionStatus | None]:
        """Only the latest value of each key written since the last read is decoded: a partition
        that moved through three states costs one decode, not three (and LME records none). A
        status equal to the one already held is left out: most writes change a step or an epoch,
        not what a describe shows."""
        keys, states, by_prefix = self._keys, self._states, self._status_by_prefix
        changed: dict[StateKey, PartitionStatus | None] = {}
        for raw, (value, offset) in latest.items():
            skey = keys.get(raw)
            try:
                if skey is None:
                    k: Any = self.codec.decode_key(raw)[1]
                    skey = keys[raw] = (k.mirror_name, k.topic_id, k.partition)
                if value is None:
                    changed[skey] = None
                    continue
                # Version 0 begins State, PreviousState, RetryAttempt, ErrorMessage (1 byte when null):
                # all a status reads, before the tagged fields. Those 7 bytes seen once give the status.
                prefix = value[:_STATUS_PREFIX] if value[:2] == b"\x00\x00" and value[6:7] == b"\x00" else None
                status = by_prefix.get(prefix) if prefix is not None else None
                if status is None:
                    status = _status(self.codec.decode_value(RecordType.MIRROR_PARTITION_STATE, value))
                    if prefix is not None and len(by_prefix) < _STATUS_PREFIXES:
                        by_prefix[prefix] = status
            except Exception as e:  # noqa: BLE001 - one bad changelog record must not hide the rest
                log.error("undecodable %s record at offset %d: %s", self.topic, offset, e)
                continue
            if states.get(skey) != status:
                changed[skey] = status
        return changed

    def tally(self) -> StateTally:
        """The counts per state of the states read so far (kept as they change)."""
        if self._tallied is not self._states:  # the states were replaced wholesale: counted once more
            self._tally = StateTally((k, st.state) for k, st in self._states.items())
            self._tallied = self._states
        return self._tally

    async def state_counts(self) -> StateTally:
        """``tally`` after reading the changelog to its end offsets as of this call."""
        await self.catch_up()
        return self.tally()

    async def statuses(self, offsets: bool = True, mirrors: Collection[str] | None = None,
                       max_age: float = 0.0) -> Mapping[StateKey, PartitionStatus]:  # fmt: skip
        asked = time.monotonic()  # offsets looked up before this are older than the request
        await self.catch_up()
        states = dict(self._states)
        if self.offsets is None or not offsets:
            return states
        keys = list(states) if mirrors is None else [k for k in states if k[0] in mirrors]
        known = await self._lookup_offsets(keys, asked - max(0.0, max_age))
        return await _off_loop(len(keys), _with_offsets, states, known, mirrors)

    async def _lookup_offsets(self, keys: Sequence[StateKey], oldest: float) -> Mapping[StateKey, _Offsets]:
        assert self.offsets is not None
        async with self._offsets_lock:
            cached = self._offsets  # replaced, never changed in place: safe to read on a thread
            todo = await _off_loop(len(keys), _stale, keys, cached, oldest)
            if not todo:
                return cached
            started = time.monotonic()
            found = await self.offsets(todo)
            self.offsets_lookups += 1
            # Keep only partitions that still have a state: deleted mirrors do not pile up here.
            fresh = {k: v for k, v in cached.items() if k in self._states}
            for k in todo:
                hw, leo, *why = found.get(k, (-1, -1))
                fresh[k] = (hw, leo, started, why[0] if why else None)  # as old as the lookup's start
            self._offsets = fresh
            return fresh


_STATUS_PREFIX = 7  # version (2), State, PreviousState, RetryAttempt (2), a null ErrorMessage (1)
_STATUS_PREFIXES = 4_096  # states x previous states x retry attempts seen: a few dozen in practice


def _status(v: Any) -> PartitionStatus:
    try:
        state = MirrorState(v.state)
    except ValueError:
        state = MirrorState.UNKNOWN
    return PartitionStatus(state, v.retry_attempt, v.error_message)


_INLINE = 2_000  # partitions under which a thread hop costs more than it spares the loop


async def _off_loop(n: int, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a worker thread when it walks ``n`` >= _INLINE partitions."""
    return fn(*args) if n < _INLINE else await asyncio.to_thread(fn, *args)


def _stale(keys: Sequence[StateKey], cached: Mapping[StateKey, _Offsets], oldest: float) -> list[StateKey]:
    return [k for k in keys if (c := cached.get(k)) is None or c[2] < oldest]  # a lookup started before: stale


def _with_offsets(states: Mapping[StateKey, PartitionStatus], known: Mapping[StateKey, _Offsets],
                  mirrors: Collection[str] | None) -> dict[StateKey, PartitionStatus]:  # fmt: skip
    """The states with their offsets; where the state has no error of its own and the source
    could not say its HW (unreachable, say), the error column says why rather than a bare -1."""
    unknown = (-1, -1, -1.0, None)
    out = {}
    for k, st in states.items():  # one pass and no _replace: it runs for 50k partitions on every describe
        if mirrors is None or k[0] in mirrors:
            hw, leo, at, why = known.get(k, unknown)
            st = PartitionStatus(st.state, st.retry_attempt, st.error_message or why, hw, leo, at)
        out[k] = st
    return out
