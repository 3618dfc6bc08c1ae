"""Which mirror partitions a round must look at: only what changed is stepped.

A mirror partition is *hot* from the moment something may change its next decision (it is new
to the runner, its topic's desired state moved, its state was written, its source moved under
a parked fetch) until a round finds it quiet again: settled (its last step decided nothing) and,
when MIRRORING, parked on the source's long poll (``streams.runner.data_watch``). A quiet
partition costs nothing per round: a round iterates the hot ones only, never every partition.
Partitions that wait on a clock (backoff, FAILED retries, an idle fetch without a long poll)
never turn quiet, so they are looked at every round as before.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from coordinator.partition_state import MirrorPartitionKey, key_order
from coordinator.ports import TopicPartition
from coordinator.states import DesiredState
from streams.runner.data_watch import DataWatch


class Interest:
    """The hot mirror partitions of one runner, and its parked ones (see the module docstring)."""

    def __init__(self, mirror_name: str, watch: DataWatch | None = None,
                 partition_of: Callable[[MirrorPartitionKey], int] | None = None) -> None:  # fmt: skip
        self.mirror_name = mirror_name
        self.watch = watch
        self.hot: set[MirrorPartitionKey] = set()  # change it only through _heat / _chill (the counts)
        # With the table partition of each key (``partition_of``): how many hot keys each holds,
        # so ``wanted`` reads counts instead of walking every hot key (a mass stop makes tens of
        # thousands hot, and the tick timer asked on the event loop every 0.2 s).
        self.partition_of = partition_of
        self.hot_in: dict[int, int] = {}
        # The rounds heat and cool on the job's thread, the worker adopts and releases on its
        # event loop: a count's read-modify-write must not interleave.
        self._counting = threading.Lock()
        self.parked: set[TopicPartition] = set()  # not fetched until the watch reports them moved
        self._versions: dict[int, object] = {}  # per table partition: its key list's version last seen
        self._desired: dict[uuid.UUID, tuple[DesiredState, int]] = {}

    def mark(self, key: MirrorPartitionKey, mirroring: bool = True, tp: TopicPartition | None = None) -> None:
        """``key`` may decide something new (its state was written: ``mirroring`` says whether it still fetches;
        ``tp``: its partition, when the caller has it)."""
        if key not in self.hot:  # already hot: a heat changes nothing (a cool after it would win either way)
            self._heat((key,))
        if not mirroring and self.parked:
            self.unpark(key.topic_partition if tp is None else tp)

    def mark_many(self, keys: Sequence[MirrorPartitionKey], stopped: Sequence[TopicPartition]) -> None:
        """``mark`` of many keys (one lock each way): ``keys`` may decide something new, and the
        partitions ``stopped`` (of keys whose state no longer fetches) leave the long poll."""
        hot = self.hot
        self._heat([k for k in keys if k not in hot])
        if stopped and self.parked:
            parked = self.parked
            gone = [tp for tp in stopped if tp in parked]
            if gone:
                parked.difference_update(gone)
                if self.watch is not None:
                    self.watch.unpark_many(gone)

    def forget(self, key: MirrorPartitionKey) -> None:
        self._chill(key)
        self.unpark(key.topic_partition)

    def _heat(self, keys: Iterable[MirrorPartitionKey]) -> None:
        hot, part = self.hot, self.partition_of
        if part is None:
            hot.update(keys)
            return
        counts = self.hot_in
        with self._counting:
            for k in keys:
                if k not in hot:
                    hot.add(k)
                    p = part(k)
                    counts[p] = counts.get(p, 0) + 1

    def _chill(self, key: MirrorPartitionKey) -> None:
        if self.partition_of is None:
            self.hot.discard(key)
            return
        with self._counting:
            if key in self.hot:
                self.hot.discard(key)
                self.hot_in[self.partition_of(key)] -= 1

    # ---------------------------------------------------------------- parking on the long poll

    def park(self, tp: TopicPartition, fetch_offset: int, leader_epoch: int) -> bool:
        """A caught-up partition waits on the source's long poll; False without one."""
        if self.watch is None:
            return False
        self.parked.add(tp)
        self.watch.park(tp, fetch_offset, leader_epoch)
        return True

    def unpark(self, tp: TopicPartition) -> None:
        if tp in self.parked:
            self.parked.discard(tp)
            if self.watch is not None:
                self.watch.unpark(tp)

    def wake(self, heat: bool = True) -> list[MirrorPartitionKey]:
        """Parked partitions whose source moved turn fetchable again (returned), and hot unless
        ``heat`` is False: the copy path copies them at once and heats only those it leaves
        (``heat_unless``), so the tick timer does not tick their table partitions meanwhile."""
        if self.watch is None:
            return []
        woken = []
        for tp in self.watch.take_moved():
            if tp in self.parked:
                self.parked.discard(tp)
                woken.append(MirrorPartitionKey(self.mirror_name, tp.topic_id, tp.partition))
        if heat:
            self._heat(woken)
        return woken

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()

    # ---------------------------------------------------------------- what a round looks at

    def desired(self, desired: Mapping[uuid.UUID, tuple[DesiredState, int]],
                partitions: Mapping[uuid.UUID, Collection[int]]) -> None:
        """Every partition of a topic whose desired state moved (or went) turns hot."""
        if desired == self._desired:
            return
        changed = [t for t, d in desired.items() if self._desired.get(t) != d]
        changed.extend(t for t in self._desired if t not in desired)
        for t in changed:
            self._heat([MirrorPartitionKey(self.mirror_name, t, p) for p in partitions.get(t, ())])
        self._desired = dict(desired)

    def select(self, table_partition: int, version: object, keys: Sequence[MirrorPartitionKey],
               key_set: Collection[MirrorPartitionKey]) -> list[MirrorPartitionKey]:
        """The hot ones of ``keys`` (this mirror's share of a table partition whose keys are
        ``key_set``), in key order. A new ``version`` of the table partition's keys (an object
        that changes when keys are added or dropped) makes every one of ``keys`` hot once."""
        if self._versions.get(table_partition) is not version:
            self._versions[table_partition] = version
            self._heat(keys)
            return list(keys)
        if len(self.hot) < len(key_set):
            return sorted((k for k in self.hot if k in key_set), key=key_order)
        return [k for k in keys if k in self.hot]

    def wanted(self, partition_of: Callable[[MirrorPartitionKey], int], versions: Mapping[int, object],
               with_moved: bool = True) -> set[int]:
        """Of the table partitions in ``versions`` (each with its key list's version, as
        ``select``), those a step would find something in: new key lists, hot keys, and unless
        ``with_moved`` is False (a copy path takes them), partitions the watch reported moved. Safe on
        another thread than the rounds' (copies, no changes)."""
        out = {p for p, v in versions.items() if self._versions.get(p) is not v}
        left = len(versions) - len(out)
        moved = self.watch.peek_moved() if self.watch is not None and with_moved else ()
        keys = [MirrorPartitionKey(self.mirror_name, tp.topic_id, tp.partition) for tp in moved]
        if self.partition_of is not None:  # the counts say which hold hot keys: only the moved ones to look up
            out.update(p for p, n in list(self.hot_in.items()) if n > 0 and p in versions)  # a copy: atomic
            left = len(versions) - len(out)
            hot: Iterable[MirrorPartitionKey] = ()
        else:
            hot = self.hot.copy()  # a set's copy is atomic: the rounds may add meanwhile
        for k in itertools.chain(keys, hot):
            if left <= 0:
                break
            p = partition_of(k)
            if p in versions and p not in out:
                out.add(p)
                left -= 1
        return out

    def cool(self, keys: Iterable[MirrorPartitionKey], quiet: Callable[[MirrorPartitionKey], bool]) -> None:
        """Keys a round found quiet leave the hot set."""
        for k in keys:
            if quiet(k):
                self._chill(k)

    def heat_unless(self, keys: Iterable[MirrorPartitionKey], quiet: Callable[[MirrorPartitionKey], bool]) -> None:
        """Keys a copy woke (``wake(heat=False)``) and did not leave quiet turn hot: a step takes them."""
        self._heat([k for k in keys if not quiet(k)])
