"""One cluster mirror's runner and ports inside the worker, and how its jobs run: one job per mirror
on a pool thread (the topic level, the partitions' steps, the fetch rounds, the sync), FAILED
retries with full jitter, and no cyclic collection while any job runs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import random
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from coordinator.partition_state import MirrorPartitionKey
from coordinator.ports import FencedOwnerEpoch, PortError, TopicPartition
from coordinator.states import DesiredState
from records.buffers import release_free_heap
from streams.config import WorkerConfig
from streams.runner.runner import MirrorRunner
from streams.runner.topic_level import STOP_DONE
from streams.worker.state_store import WorkerStateStore
from streams.worker.table import WorkerTable

log = logging.getLogger(__name__)
# A job that stepped this many partitions gives its freed heap back after it (``release_free_heap``):
# a mass failover's jobs each leave megabytes in the arenas, an idle round's none worth a walk.
TRIM_AFTER_KEYS = 1000
Desired = dict[Any, tuple[DesiredState, int]]


class JobHost(Protocol):
    """What a mirror's job reads of its worker (``streams.worker.app.CoordinatorWorker``)."""

    config: WorkerConfig
    store: WorkerStateStore
    table_partitions: WorkerTable
    tick_interval: float

    def desired_for(self, mirror_name: str) -> Desired: ...


class MirrorJob:
    """One cluster mirror as the worker runs it: its runner, its two ports and the job in flight."""

    def __init__(self, runner: MirrorRunner, ports: tuple[Any, Any], configs: Mapping[str, str] | None = None) -> None:
        self.runner = runner
        self.ports = ports
        self.configs = configs  # the image's configs it runs with: a change reconfigures or rebuilds it
        self.busy: concurrent.futures.Future[Any] | asyncio.Future[Any] | None = None
        self.retired = False  # topics left the mirror (or it was deleted): rebuilt from the store next
        self.topics_for: tuple[Any, Any, Any] | None = None  # ``job_topics``: (desired states, (owned, viewed), those its topic level takes)
        self.copying = False  # the job in flight is the copy path's (``run_copy``), not a step
        self.claimed = -1  # the owner epoch claimed at the destination (``fence_job``)
        self.claim_refused: FencedOwnerEpoch | None = None  # the last claim's refusal, for the worker to look into
        self.fenced_logged = -1  # the owner epoch whose fencing was logged (once)

    def close(self) -> None:
        self.runner.close()
        for port in self.ports:
            close = getattr(port, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001
                    pass


def full_jitter() -> float:
    """FAILED retries wait a random share (0, 1] of their backoff, as the prototype's full jitter:
    partitions failed by one outage do not all retry in the same round."""
    return 1.0 - random.random()


_gc_pauses = 0
_gc_lock = threading.Lock()


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """No cyclic collection while a job runs (reference counting still frees what it can).

    A job's waves keep tens of thousands of short-lived objects (observers, observations,
    decisions) alive for a second or more: the young collections promoted them, and their
    deaths in the old generation triggered full collections (0.3 s each at 200,000 partitions,
    ~8 s of a 60 s mass failover). Paused, they are freed by their reference counts at the end
    of the wave; the collector runs again after the job. Jobs of other mirrors may overlap:
    the collector resumes after the last of them."""
    global _gc_pauses
    with _gc_lock:
        _gc_pauses += 1
        gc.disable()
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0:
                gc.enable()


def job_topics(w: JobHost, m: Any, desired: Desired) -> Desired:
    """The desired states a job's topic level works on: the same dict while ``desired``, the
    assignment and the view are (``MirrorRunner.topics_due`` knows a settled topic level by it)."""
    owned = w.store.owned
    if len(owned) >= w.config.state_partitions:
        return desired
    # A stopping topic is one worker's at the topic level (``leads_topic``): every worker making
    # every topic writable walked all their partitions and read the others' states for nothing.
    # And while there is no view of the others' partitions, they would read as UNKNOWN, which a
    # stop counts as stopped: a topic would turn writable while a partition elsewhere still
    # mirrors. Wait for the view.
    viewed = w.store.remote is not None
    got = getattr(m, "topics_for", None)
    if got is None or got[0] is not desired or got[1] != (frozenset(owned), viewed):
        name = m.runner.mirror_name
        mine = {t: d for t, d in desired.items()
                if d[0] is not DesiredState.STOP or (viewed and leads_topic(w.store, name, t))}  # fmt: skip
        got = m.topics_for = (desired, (frozenset(owned), viewed), mine)
    return got[2]


def leads_topic(store: WorkerStateStore, mirror_name: str, topic_id: Any) -> bool:
    """Whether this worker runs the topic level of a stopping topic: the one that owns the table
    partition of the topic's partition 0 (all workers agree on it, and it moves with the assignment)."""
    return store.partition_of(MirrorPartitionKey(mirror_name, topic_id, 0)) in store.owned


def waits_on_others(w: Any) -> bool:
    """Whether the topic level of a stopping topic this worker leads waits on the other workers'
    partitions: it has not settled the topic yet, and the topic's partitions here are all STOPPED
    durably (or none are here). Only then are the others' states read: until the worker's own
    partitions are done, the topic level has nothing to decide (a 50,000-partition failover read
    the other worker's writes as they came, every tick, on the loop). A stop reaches a worker as
    an event (another worker fanned it out) before its own image may show it: both count."""
    store = w.store
    tally = store.durable.tally

    def waits(name: str, topic_id: Any, offset: int) -> bool:
        if not leads_topic(store, name, topic_id):
            return False
        job = w.mirrors.get(name)
        if job is not None and job.runner.topic_level.settled.get(topic_id) == offset:
            return False  # made writable (or found so) for this stop already
        return all(s in STOP_DONE for s in tally.states_of(name, topic_id))

    return (any(m.desired_state is DesiredState.STOP and waits(m.mirror_name, m.topic_id, max(m.last_change_offset, 0))
                for m in w.image.mirrors.topics.values())
            or any(want is DesiredState.STOP and waits(name, tid, offset)
                   for (name, tid), (want, offset) in w.event_desired.items()))  # fmt: skip


def ask_for_the_view(w: Any, partition: int) -> None:
    """After a step of table partition ``partition``: where this worker's own partitions of a
    stopping topic it leads just got done (durably), a tick, so the next step reads the other
    workers' states. No other tick may come: without them the topic level has nothing to do,
    and the partitions are settled."""
    if w.store.remote is None and len(w.store.owned) < w.config.state_partitions and waits_on_others(w):
        w.ticks.ask(partition)


def fence_job(w: JobHost, m: MirrorJob, partition: int | None) -> bool:
    """Arms the job's executor with the worker's owner fence (``coordinator.fencing``) and, when
    the owner epoch moved, claims it at the destination before the job observes anything: a stale
    owner's call then either landed before (and is observed, as a crashed owner's would be) or is
    refused. False: a newer owner holds the work, and the job does nothing."""
    fence_of = getattr(w, "owner_fence", None)
    fence = fence_of() if fence_of is not None else None
    ex = getattr(m.runner, "executor", None)
    if ex is None:  # a runner that sends no command (a test's)
        return True
    ex.fence, ex.fenced = fence, None
    if fence is None:
        ex.owner_check = None
        return True
    still = w.still_owner  # type: ignore[attr-defined]
    ex.owner_check = lambda: still(fence, partition)
    if m.claimed != fence.epoch:
        claim = getattr(m.ports[1], "claim_owner_epoch", None)
        if claim is not None:
            try:
                claim(fence.scope, fence.epoch)
            except FencedOwnerEpoch as e:
                note_fenced(m, e)
                m.claim_refused = e  # a stale worker, or a group whose generation started again
                return False
            except PortError as e:  # unreachable: its calls carry the fence all the same
                log.debug("mirror %s: claiming owner epoch %d failed: %s", m.runner.mirror_name, fence.epoch, e)
                return True
        m.claimed = fence.epoch
    return True


def reclaim(m: MirrorJob, fence: Any, refused_at: int) -> None:
    """On a pool thread: the claim of a worker the group coordinator holds in the current
    generation, made again as a compare-and-set on the epoch it was refused at."""
    m.ports[1].claim_owner_epoch(fence.scope, fence.epoch, refused_at)
    m.claimed, m.claim_refused = fence.epoch, None
    log.warning("mirror %s: the workers' group generation started again (the destination held owner epoch %d): "
                "owner epoch %d claimed in its place", m.runner.mirror_name, refused_at, fence.epoch)  # fmt: skip


def note_fenced(m: MirrorJob, e: FencedOwnerEpoch) -> None:
    """A job refused as a stale owner's: its steps are dropped, never retried; logged once per epoch."""
    if m.fenced_logged != e.request_epoch:
        m.fenced_logged = e.request_epoch
        log.warning("mirror %s: not the owner any more, its steps are dropped (%s)", m.runner.mirror_name, e)


def run_job(w: JobHost, m: MirrorJob, keys: list[MirrorPartitionKey], now_ms: int, partition: int | None = None) -> None:
    """On a pool thread: one step per partition, the topic level, the fetch round, the sync."""
    r = m.runner
    if not fence_job(w, m, partition):
        return
    t0 = time.perf_counter()
    desired = w.desired_for(r.mirror_name)
    topics = job_topics(w, m, desired)
    copier = getattr(w, "copier", None)
    copied = copier is not None and copier.takes(r.mirror_name)
    # The topic level and the sync run for seconds at 50,000 partitions: the copy path goes on
    # between their parts, on this thread.
    between = (lambda: run_copy(w, m, now_ms + int((time.perf_counter() - t0) * 1000))) if copied else None
    if copied:
        r.topic_level.between = between
    try:
        r.reconcile_topics(now_ms, topics)
    except PortError as e:
        r.note(f"topic level: {e}")
    finally:
        if copied:
            r.topic_level.between = None
    t1 = time.perf_counter()
    if partition is not None:  # only what changed: partitions whose desired state, state or source moved
        if not copied:  # else the copy path takes the moved ones, whichever table partition holds them
            r.interest.wake()
        r.interest.desired(desired, r.partitions)
        t = w.table_partitions
        keys = r.interest.select(partition, t.keys_of(partition), keys, t.key_set(partition))
    r.step_partitions(now_ms, keys, desired)
    fenced = getattr(getattr(r, "executor", None), "fenced", None)
    if fenced is not None:
        note_fenced(m, fenced)
        return
    t2 = time.perf_counter()
    if partition is None:
        free = {k.topic_partition: k for k in keys if not w.store.has_pending(k)}
    else:
        pending = w.store.pending_keys(partition)
        free = {k.topic_partition: k for k in keys if k not in pending}
    rounds = fetch_while_behind(w, r, free, desired, now_ms, t2)
    t3 = time.perf_counter()
    if partition is not None:
        r.interest.cool(keys, r.quiet)
    if copied:
        r.syncer.between = between
    try:
        synced = r.sync_if_due(now_ms, desired)
    finally:
        if copied:
            r.syncer.between = None
    if len(keys) >= TRIM_AFTER_KEYS:
        release_free_heap()
    if log.isEnabledFor(logging.DEBUG):
        log.debug("mirror %s, %d key(s): topics %.3fs, steps %.3fs, fetch %.3fs (%d partitions, %d rounds), sync %s %.3fs",
                  r.mirror_name, len(keys), t1 - t0, t2 - t1, t3 - t2, len(free), rounds, synced,
                  time.perf_counter() - t3)  # fmt: skip


def fetch_while_behind(w: JobHost, r: MirrorRunner, free: dict[TopicPartition, MirrorPartitionKey],
                       desired: Desired, now_ms: int, t0: float) -> int:
    """Fetch rounds over ``free`` (no state write pending); the number of rounds."""
    only, rounds = set(free), 0
    while only:
        before = {tp: r.progress.get(tp) for tp in only}
        r.fetch_round(now_ms + int((time.perf_counter() - t0) * 1000), only, desired)
        rounds += 1
        # As a replica fetcher, fetch again at once while behind: a partition this round moved
        # on and left short of the source's HW, with no state write pending, for up to a tick
        # (else the copy is capped at replica.fetch.max.bytes per partition per tick).
        only = {tp for tp in only if (got := r.progress.get(tp)) != before[tp] and got is not None
                and got[1] < got[0] and not w.store.has_pending(free[tp])}  # fmt: skip
        if time.perf_counter() - t0 >= w.tick_interval:
            break
    return rounds


def run_copy(w: JobHost, m: MirrorJob, now_ms: int) -> int:
    """On a pool thread: the copy path. Parked partitions the data watch reports moved are fetched
    and appended at once, with no tick, no event and no workflow step: a MIRRORING partition
    whose source moved has nothing else to decide (``fetch_round`` checks the desired state, the
    state and the fetcher, and queues any state write its decisions make: the tick plan sees it
    and its table partition's next event makes it durable). Partitions of table partitions this
    worker does not own, or with a write not yet durable, stay hot for the ordinary step. The
    number of partitions copied."""
    r = m.runner
    t0 = time.perf_counter()
    copier = getattr(w, "copier", None)
    if copier is not None:
        copier.copying(r.mirror_name)
    # Not hot while copied (the tick timer would tick their table partitions for nothing): only
    # those the copy leaves short of quiet turn hot, whatever happens on the way.
    woken = r.interest.wake(heat=False)
    if not woken:
        return 0
    if not fence_job(w, m, None):
        r.interest.heat_unless(woken, lambda k: False)
        return 0
    free: dict[TopicPartition, MirrorPartitionKey] = {}
    try:
        store = w.store
        owned = store.owned
        free = {k.topic_partition: k for k in woken if store.partition_of(k) in owned and not store.has_pending(k)}
        if free:
            fetch_while_behind(w, r, free, w.desired_for(r.mirror_name), now_ms, t0)
    finally:
        tps = {k: tp for tp, k in free.items()}
        r.interest.heat_unless(woken, lambda k: r.quiet(k, tps.get(k)))
    return len(free)
