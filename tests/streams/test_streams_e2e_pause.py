"""A worker paused past its session timeout (a long GC pause, a frozen VM) and resumed (issue #35).

Real processes (the demo's, ``worker_harness.Rig``): the cluster-model server, and per cluster a
controller and two workers, on the test's broker (noida-db, then Apache Kafka: the rig is the
module's, one per broker, so its fixture is parametrised here rather than through
``kafka_broker``). Producers run on the source. A worker is stopped with SIGSTOP inside a phase:
it neither steps nor heartbeats. The other takes its table partitions over once its session
(6 s, the least a broker accepts) has ended (Apache Kafka expires it; noida-db never does, and
the controller removes it: ``streams.admin.members``; nothing here touches the group) and
completes the phase. Then the paused worker gets SIGCONT, with whatever it had in flight. The
points, in the order of one workflow (a point run alone first runs the phases before it, unpaused):

- **mirroring**: ``a-to-b`` on B mirroring A, A's producers live;
- **stop**: ``--stop`` of ``a-to-b``, A's producers live until B is writable, then on B;
- **failback**: ``--start`` of ``b-to-a`` on A (PREPARING: truncation of A's own tail to the
  LME's end), producers on B.

A worker's steps take ~0.1 s, so a pause timed from outside would rarely land inside one: from
just before the phase's command until the pause, the model clusters answer every port call
0.5 s late (``ClusterModel.set_slow``, one of the model's faults), and the pause comes a seeded
delay after the phase is seen under way on the paused worker's partitions (stop: one STOPPING,
failback: one PREPARING, as the changelog view shows them).

Two threads sample every 100 ms while the scenario runs: both clusters' high watermarks, and
the latest states through ``MirrorStateChangelogView`` (the reader of ``--describe``, the
controller and the workers). After each point:

- the phase completes, and stays complete after the paused worker's return;
- A and B equal batch for batch where the phase says so (mirroring, failback: the whole logs
  once the producers are quiet; stop: below each partition's stop offset);
- no HW went backwards on either cluster (but the failback's own truncation of A's tail, once
  per partition, from where A's log ended to no lower than the stop offset);
- ``__mirror_state`` read ``read_committed``: per mirror partition the state epoch strictly
  increases and every transition is legal (``coordinator.states.is_legal_transition``); the
  changelog view (it shows no epoch) never went back in the phase's order of states, and ends
  on the state of the highest epoch;
- stop: exactly one MIRROR_PID_RESET control batch per partition of B at or after its stop offset.

Reproduce a failure with ``KIP1279_PAUSE_SEED=<the printed seed>``; select with ``-k pause``.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from clustermodel.client import ClusterClient
from coordinator.partition_state import MirrorPartitionState
from coordinator.ports import ControlType, TopicPartition
from coordinator.states import MirrorState, is_legal_transition
from streams.demo.harness import DemoError, log_batches, shape
from streams.state.changelog_view import MirrorStateChangelogView
from streams.state.mirror_state_codec import RecordType, decode_changelog_record, partition_for
from worker_harness import Rig

SEED = int(os.environ.get("KIP1279_PAUSE_SEED", "3501"))
POINTS = ("mirroring", "stop", "failback")
# The states a mirror partition may go through in each point's phase, in order (a round of
# epoch fencing may come whenever the source's leader epoch moves).
_M, _F = MirrorState.MIRRORING, MirrorState.EPOCH_FENCING
CHAINS = {"mirroring": (_M, _F, _M),
          "stop": (_M, _F, MirrorState.STOPPING, MirrorState.STOPPED),
          "failback": (MirrorState.UNKNOWN, MirrorState.PREPARING, _M, _F, _M)}  # fmt: skip
# The least session a broker accepts; a rebalance timeout a loaded machine does not reach
# (worker_harness.GROUP_TIMING).
TIMING = {"--session-timeout-ms": "6000", "--heartbeat-interval-ms": "1000", "--rebalance-timeout-ms": "20000"}
SLOW_MS = 500  # every port call's latency while a phase waits for its pause
# The pause comes up to this long after the phase is seen under way: its steps then take ~5 port
# latencies (a stop, after STOPPING) and ~3 (a failback, after PREPARING).
DELAY_S = {"mirroring": 1.0, "stop": 2.0, "failback": 0.6}
TOPICS = {"orders": 4, "payments": 2, "audit": 2}  # 8 mirror partitions over 4 table partitions
TABLE_PARTITIONS = 4
SAMPLE_S = 0.1
# From the pause: the other worker holds everything (session + rebalance) and completes the phase.
TAKEOVER_S = 60.0
RETURN_S = 30.0  # from the resume: the worker back in its group, the phase complete again
SETTLE_S = 2.0  # a phase complete after the resume must stay so this long


class Sampler:
    """Every 100 ms, each on a thread of its own: both clusters' HWs (its own model connections:
    while the model is slow, a sample takes its latency), and the latest states through the
    changelog view of the clusters asked for."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.point = "-"
        self.hw: dict[tuple[str, TopicPartition], int] = {}
        self.drops: list[tuple[str, str, TopicPartition, int, int]] = []  # (point, cluster, tp, before, after)
        self._views_wanted: set[str] = set()
        self.states: dict[tuple[str, str, Any], list[MirrorState]] = defaultdict(list)  # the view's changes per point and key
        self.latest: dict[tuple[str, Any], MirrorState] = {}
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._guarded, args=(f,), daemon=True, name=f"pause-{f.__name__}")
                        for f in (self._hws, self._views)]  # fmt: skip

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.halt.set()
        for t in self.threads:
            t.join(30)

    def watch_states(self, cluster: str) -> None:
        with self.lock:
            self._views_wanted.add(cluster)

    def state_of(self, cluster: str, mirror: str, tp: TopicPartition) -> MirrorState | None:
        with self.lock:
            return self.latest.get((cluster, (mirror, tp.topic_id, tp.partition)))

    def _guarded(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)

    def _hws(self) -> None:
        clients = {c: ClusterClient(self.rig.port, c) for c in ("A", "B")}
        try:
            while not self.halt.is_set():
                t = time.monotonic()
                for c, client in clients.items():
                    got = client.call_many([("list_offsets", (tp,), None) for tp in self.rig.tps])
                    with self.lock:
                        for tp, off in zip(self.rig.tps, got):
                            if isinstance(off, BaseException):
                                continue
                            before = self.hw.get((c, tp))
                            if before is not None and off.hw < before:
                                self.drops.append((self.point, c, tp, before, off.hw))
                            self.hw[(c, tp)] = off.hw
                self.halt.wait(max(0.0, SAMPLE_S - (time.monotonic() - t)))
        finally:
            for client in clients.values():
                client.close()

    def _views(self) -> None:
        loop = asyncio.new_event_loop()
        views: dict[str, MirrorStateChangelogView] = {}
        try:
            while not self.halt.is_set():
                t = time.monotonic()
                with self.lock:
                    wanted = self._views_wanted - set(views)
                for c in wanted:
                    cfg = self.rig.config(c)
                    view = MirrorStateChangelogView(cfg.bootstrap_servers, cfg.mirror_state_topic_name, cfg.state_partitions)
                    loop.run_until_complete(view.start())
                    views[c] = view
                for c, view in views.items():
                    got = loop.run_until_complete(view.catch_up())
                    with self.lock:
                        for key, status in got.items():
                            seen = self.states[(self.point, c, key)]
                            if not seen or seen[-1] is not status.state:
                                seen.append(status.state)
                            self.latest[(c, key)] = status.state
                self.halt.wait(max(0.0, SAMPLE_S - (time.monotonic() - t)))
        finally:
            for view in views.values():
                loop.run_until_complete(view.stop())
            loop.close()


History = dict[tuple[str, uuid.UUID, int], list[tuple[int, MirrorPartitionState]]]  # (offset, state) per key


async def read_committed_history(bootstrap: str, topic: str) -> History:
    """Every state write of a ``__mirror_state`` changelog, read as a ``read_committed`` consumer:
    (offset, state) per mirror partition, in offset order."""
    from aiokafka import AIOKafkaConsumer, TopicPartition as KTP

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                                isolation_level="read_committed", client_id="kip1279-test-pause")  # fmt: skip
    await consumer.start()
    out: History = defaultdict(list)
    try:
        consumer._client.add_topic(topic)  # as streams.demo.harness.read_changelog: Apache Kafka names no topic otherwise
        await consumer._client.force_metadata_update()
        tps = [KTP(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or set())]
        assert tps, f"changelog topic {topic} not found"
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)  # the LSO under read_committed
        deadline = time.monotonic() + 20
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                for m in msgs:
                    if m.offset >= ends[tp] or m.key is None or m.value is None:
                        continue
                    rtype, k, value = decode_changelog_record(m.key, m.value)
                    if rtype == RecordType.MIRROR_PARTITION_STATE:
                        out[(k.mirror_name, k.topic_id, k.partition)].append(
                            (m.offset, MirrorPartitionState.from_schema_fields(value)))  # fmt: skip
    finally:
        await consumer.stop()
    return out


def epoch_problems(history: History, names: dict[uuid.UUID, str]) -> list[str]:
    """Per mirror partition: the state epoch strictly increases, every transition is legal."""
    problems = []
    for (mirror, tid, p), writes in sorted(history.items(), key=lambda kv: (kv[0][0], names.get(kv[0][1], ""), kv[0][2])):
        before: MirrorPartitionState | None = None
        at = -1
        changelog = f"__mirror_state-{partition_for(mirror, tid, p, TABLE_PARTITIONS)}"
        for offset, st in writes:
            where = f"{mirror} {names.get(tid, tid)}-{p} at {changelog}@{offset}"
            prev = before.state if before is not None else MirrorState.UNKNOWN
            if before is not None and st.state_epoch <= before.state_epoch:
                problems.append(f"{where}: {st.state.name} state_epoch {st.state_epoch} after {prev.name} "
                                f"state_epoch {before.state_epoch} (@{at})")  # fmt: skip
            if not is_legal_transition(prev, st.state):
                problems.append(f"{where}: illegal transition {prev.name} -> {st.state.name} (state_epoch "
                                f"{st.state_epoch})")  # fmt: skip
            before, at = st, offset
    return problems


class Scenario:
    """The rig of one broker, its sampler, and the phases reached so far."""

    def __init__(self, rig: Rig, kind: str) -> None:
        self.rig, self.kind = rig, kind
        self.sampler = Sampler(rig)
        self.reached: set[str] = set()
        self.t0 = time.monotonic()
        self.names: dict[uuid.UUID, str] = {}
        self.paused: str | None = None
        self.checked_drops = 0  # the sampler's HW drops a point has checked
        self.producing: str | None = None  # the cluster the producers write to

    def note(self, what: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s {self.kind}] {what}")

    # ------------------------------------------------------------------------- workers

    def workers(self, cluster: str) -> tuple[str, str]:
        return f"worker-{cluster}1", f"worker-{cluster}2"

    def spawn_workers(self, clusters: tuple[str, ...]) -> None:
        """Two workers per cluster, started side by side."""
        for cluster in clusters:
            for i, name in enumerate(self.workers(cluster), 1):
                self.rig.spawn_worker(cluster, name, self.rig.data_dir(cluster, str(i)))
        for cluster in clusters:
            self.rig.wait(f"{cluster}'s workers to share its table partitions",
                          lambda: self.shared(cluster, *self.workers(cluster)), 90)  # fmt: skip

    def shared(self, cluster: str, *workers: str) -> bool:
        owners = self.rig.owners(cluster)
        parts = sorted(p for ps in owners.values() for p in ps)
        return (len(self.rig.group_members(cluster)) == len(workers) and set(owners) == set(workers)
                and all(owners.values()) and parts == list(range(TABLE_PARTITIONS)))  # fmt: skip

    def held_by(self, cluster: str, mirror: str, worker: str) -> list[TopicPartition]:
        mine = self.rig.owners(cluster).get(worker, set())
        return [tp for tp in self.rig.tps if partition_for(mirror, tp.topic_id, tp.partition, TABLE_PARTITIONS) in mine]

    def all_in(self, cluster: str, mirror: str, state: MirrorState) -> bool:
        """Every partition in ``state``, as the changelog view (``--describe``'s reader) shows it."""
        return all(self.sampler.state_of(cluster, mirror, tp) is state for tp in self.rig.tps)

    def tp_name(self, tp: TopicPartition) -> str:
        return f"{self.names[tp.topic_id]}-{tp.partition}"

    # ------------------------------------------------------------------------- the pause

    def pause_in(self, point: str, cluster: str, mirror: str, begin: Callable[[], None],
                 under_way: Callable[[list[TopicPartition]], bool], done: Callable[[], bool],
                 rng: random.Random) -> list[str]:  # fmt: skip
        """Slows the clusters, runs ``begin`` (the phase's command), pauses a worker of ``cluster``
        a seeded delay after ``under_way`` holds for its partitions, and resumes it once the other
        worker holds every table partition and ``done`` holds. Returns what went wrong after the
        resume: the paused worker not back in its group, ``done`` not holding."""
        rig = self.rig
        victim, other = rng.sample(self.workers(cluster), 2)
        held = self.held_by(cluster, mirror, victim)
        assert held, f"seed {SEED}: {victim} holds no partition of {mirror}: its pause would prove nothing"
        delay = round(rng.uniform(0.0, DELAY_S[point]), 2)
        self.sampler.point = point
        for c in ("A", "B"):
            rig.clients[c].set_slow(SLOW_MS)
        try:
            begin()
            rig.wait(f"{point} under way on {victim}'s partitions", lambda: under_way(held), 30)
            time.sleep(delay)
            rig.pause_worker(victim)
            self.paused = victim
        finally:
            for c in ("A", "B"):
                rig.clients[c].set_slow(0)
        paused_at = time.monotonic()
        landed = {self.tp_name(tp): getattr(self.sampler.state_of(cluster, mirror, tp), "name", None) for tp in held}
        self.note(f"{point}: SIGSTOP of {victim} {delay}s after it was under way; its partitions then: {landed}")
        try:
            rig.wait(f"{other} to hold every table partition of {cluster}",
                     lambda: rig.owners(cluster).get(other) == set(range(TABLE_PARTITIONS)), TAKEOVER_S)  # fmt: skip
            took = time.monotonic() - paused_at
            rig.wait(f"{point} completed by {other}", done, TAKEOVER_S)
            self.note(f"{point}: {other} held everything {took:.1f}s after the pause, completed it "
                      f"{time.monotonic() - paused_at:.1f}s after")  # fmt: skip
        finally:
            rig.workers[victim][1].send_signal(signal.SIGCONT)
            self.paused = None
        resumed = time.monotonic()
        self.note(f"{point}: SIGCONT of {victim} after {resumed - paused_at:.1f}s")
        problems = []
        try:
            rig.wait(f"{victim} back in its group, the table partitions shared",
                     lambda: self.shared(cluster, victim, other), RETURN_S)  # fmt: skip
            # Done, and still done a moment later: the returned worker has stepped what it got back.
            held_since: list[float] = []

            def settled() -> bool:
                if not done():
                    held_since.clear()
                    return False
                held_since[:1] = held_since[:1] or [time.monotonic()]
                return time.monotonic() - held_since[0] >= SETTLE_S

            rig.wait(f"{point} complete after {victim}'s return", settled, RETURN_S)
            self.note(f"{point}: {victim} rejoined, the phase complete {time.monotonic() - resumed:.1f}s after")
        except DemoError as e:
            latest = {self.tp_name(tp): getattr(self.sampler.state_of(cluster, mirror, tp), "name", None) for tp in rig.tps}
            problems.append(f"{point} after {victim}'s return: {str(e).splitlines()[0]}; {mirror}'s states {latest}; "
                            f"owners {rig.owners(cluster)}")  # fmt: skip
        return problems

    # ------------------------------------------------------------------------- phases

    def produce_on(self, cluster: str | None, seed: int = 0) -> None:
        """The producers move to ``cluster`` (None: quiet); those left close their transactions."""
        if self.producing is not None:
            self.rig.quiet_producers(self.producing)
        self.producing = cluster
        if cluster is not None:
            self.rig.start_producers(cluster, seed)

    def hws(self, cluster: str) -> dict[TopicPartition, int]:
        """Every partition's HW in one batched call (one latency while the model is slow)."""
        got = self.rig.clients[cluster].call_many([("list_offsets", (tp,), None) for tp in self.rig.tps])
        return {tp: off.hw for tp, off in zip(self.rig.tps, got)}

    def history(self, cluster: str) -> History:
        return asyncio.run(read_committed_history(self.rig.bootstrap, self.rig.config(cluster).mirror_state_topic_name))

    def stop_offsets(self) -> dict[TopicPartition, int]:
        """Each partition's stop offset (B's LEO when its fetcher was removed), from B's __mirror_state."""
        history = self.history("B")
        return {tp: next((st.stop_offset for _, st in history.get(("a-to-b", tp.topic_id, tp.partition), [])
                          if st.state is MirrorState.STOPPING and st.stop_offset >= 0), -1) for tp in self.rig.tps}  # fmt: skip

    def reach(self, phase: str) -> None:
        """The phases before a point, unpaused."""
        rig = self.rig
        if "mirroring" not in self.reached:
            rig.create_mirror("B", "a-to-b", "A")
            self.produce_on("A", SEED)
            rig.start_topics("B", "a-to-b")
            rig.wait("a-to-b MIRRORING", lambda: rig.all_in("B", "a-to-b", MirrorState.MIRRORING), 60)
            self.reached.add("mirroring")
        if phase == "stopped":
            wait = 10.0  # the stop point's: it waited for its stop already
            if "stopped" not in self.reached:
                rig.stop_topics("B", "a-to-b")
                self.reached.add("stopped")
                wait = 60.0
            try:
                rig.wait("a-to-b STOPPED", lambda: rig.all_in("B", "a-to-b", MirrorState.STOPPED), wait)
            except DemoError as e:
                pytest.fail(f"seed {SEED}: the failback needs a-to-b STOPPED (the stop point's): {e}", pytrace=False)

    def mirroring(self, rng: random.Random) -> None:
        rig = self.rig
        self.reach("mirroring")
        self.produce_on("A", SEED + 1)
        marks: dict[TopicPartition, int] = {}

        def done() -> bool:  # B mirrored past what A held when the pause began
            hw = self.hws("B")
            return self.all_in("B", "a-to-b", MirrorState.MIRRORING) and all(hw[tp] >= marks[tp] for tp in rig.tps)

        problems = self.pause_in("mirroring", "B", "a-to-b", lambda: marks.update(self.hws("A")), lambda held: True, done, rng)
        self.produce_on(None)
        problems += self.converged("A", "B")
        self.verdict("mirroring", problems + self.check_states("mirroring", "B", "a-to-b") + self.check_hw("mirroring"))

    def stop(self, rng: random.Random) -> None:
        rig = self.rig
        assert "stopped" not in self.reached
        self.reach("mirroring")
        self.produce_on("A", SEED + 2)  # live through the stop

        def stopping(held: list[TopicPartition]) -> bool:
            return any(self.sampler.state_of("B", "a-to-b", tp) is MirrorState.STOPPING for tp in held)

        def done() -> bool:
            if not (self.all_in("B", "a-to-b", MirrorState.STOPPED) and not any(rig.read_only("B").values())):
                return False
            if self.producing == "A":  # failed over: the applications write to B now
                self.produce_on("B", SEED + 3)
            return True

        self.reached.add("stopped")  # asked for: never twice
        problems = self.pause_in("stop", "B", "a-to-b", lambda: rig.stop_topics("B", "a-to-b"), stopping, done, rng)
        a, b = rig.clients["A"], rig.clients["B"]
        for tp, stop_offset in self.stop_offsets().items():
            if stop_offset < 0:
                problems.append(f"{self.tp_name(tp)}: no stop offset in __mirror_state")
                continue
            on_b = log_batches(b, tp)
            if shape(on_b, stop_offset) != shape(log_batches(a, tp), stop_offset):
                problems.append(f"B vs A: {self.tp_name(tp)}: batches below the stop offset {stop_offset} differ")
            resets = [x.base_offset for x in on_b
                      if x.base_offset >= stop_offset and x.control_type == ControlType.MIRROR_PID_RESET]  # fmt: skip
            if len(resets) != 1:
                problems.append(f"B: {self.tp_name(tp)}: {len(resets)} MIRROR_PID_RESET batches at or after the stop "
                                f"offset {stop_offset}, at offsets {resets} (B's LEO {b.list_offsets(tp).leo})")  # fmt: skip
        self.verdict("stop", problems + self.check_states("stop", "B", "a-to-b") + self.check_hw("stop"))

    def failback(self, rng: random.Random) -> None:
        rig = self.rig
        self.reach("stopped")
        if self.producing != "B":
            self.produce_on("B", SEED + 3)  # the applications write to B since the stop
        stop_offsets = self.stop_offsets()
        rig.create_mirror("A", "b-to-a", "B")
        own = self.hws("A")  # A's log as the failback finds it (A's own records after the stop offsets)

        def preparing(held: list[TopicPartition]) -> bool:
            return any(self.sampler.state_of("A", "b-to-a", tp) is MirrorState.PREPARING for tp in held)

        def done() -> bool:
            # Mirroring, and A holding B's records past all of A's own: a truncation now is no failback's.
            if not self.all_in("A", "b-to-a", MirrorState.MIRRORING):
                return False
            hw = self.hws("A")
            return all(hw[tp] > own[tp] for tp in rig.tps)

        problems = self.pause_in("failback", "A", "b-to-a", lambda: rig.start_topics("A", "b-to-a"), preparing, done, rng)
        self.produce_on(None)
        problems += self.converged("B", "A")
        problems += self.check_states("failback", "A", "b-to-a")
        problems += self.check_hw("failback", own_tail={tp: (own[tp], stop_offsets[tp]) for tp in rig.tps})
        self.verdict("failback", problems)

    # ------------------------------------------------------------------------- checks

    def converged(self, src: str, dst: str) -> list[str]:
        """The destination matches the source batch for batch, offsets alike, once the producers are quiet."""
        try:
            self.rig.wait(f"{dst} to match {src}", lambda: self.rig.in_sync(src, dst), 60)
        except DemoError as e:
            return [f"{dst} vs {src}: {e}: {self.rig.log_problems(src, dst)}"]
        return [f"{dst} vs {src}: {p}" for p in self.rig.log_problems(src, dst)]

    def verdict(self, point: str, problems: list[str]) -> None:
        assert not problems, (f"seed {SEED} (KIP1279_PAUSE_SEED), {self.kind}, pause at {point}: {len(problems)} "
                              "problem(s):\n  " + "\n  ".join(problems))  # fmt: skip

    def check_states(self, point: str, cluster: str, mirror: str) -> list[str]:
        """``__mirror_state`` read committed (epochs, transitions) and as the changelog view showed it."""
        ours = {k: v for k, v in self.history(cluster).items() if k[0] == mirror}
        assert len(ours) == len(self.rig.tps), f"seed {SEED}: {len(ours)} mirror partitions of {mirror} in __mirror_state"
        problems = epoch_problems(ours, self.names)
        time.sleep(3 * SAMPLE_S)  # the view's last sample covers what was just read
        chain = CHAINS[point]
        with self.sampler.lock:
            for (p, c, key), seen in self.sampler.states.items():
                if p != point or c != cluster or key[0] != mirror:
                    continue
                where = f"{mirror} {self.names.get(key[1], key[1])}-{key[2]}"
                # Sampled, the view may skip a state, never go back in the phase's chain.
                at = 0
                for st in seen:
                    while at < len(chain) and chain[at] is not st:
                        at += 1
                if at == len(chain):
                    problems.append(f"{where}: the changelog view showed {[s.name for s in seen]} during the "
                                    f"{point}, not in the order {[s.name for s in chain]}")  # fmt: skip
                top = max((st for _, st in ours.get(key, [])), key=lambda st: st.state_epoch, default=None)
                if top is not None and self.sampler.latest.get((c, key)) is not top.state:
                    problems.append(f"{where}: the changelog view ends on {self.sampler.latest[(c, key)].name}, the "
                                    f"highest state epoch ({top.state_epoch}) is {top.state.name}")  # fmt: skip
        return [f"{cluster}'s __mirror_state: {p}" for p in problems]

    def check_hw(self, point: str, own_tail: dict[TopicPartition, tuple[int, int]] | None = None) -> list[str]:
        """No HW went backwards since the last point's check (during ``point``, or after that
        check); ``own_tail``: per partition of A, (A's HW before the failback, the stop offset):
        the failback's own truncation of A's tail, from there to at least the stop offset, is
        allowed once."""
        assert self.sampler.errors == [], f"the sampler failed: {self.sampler.errors!r}"
        with self.sampler.lock:
            drops, self.checked_drops = self.sampler.drops[self.checked_drops :], len(self.sampler.drops)
        bad, truncated = [], set()
        for during, cluster, tp, before, after in drops:
            tail = own_tail.get(tp) if own_tail is not None and cluster == "A" else None
            if tail is not None and before == tail[0] and after >= tail[1] and tp not in truncated:
                truncated.add(tp)
                continue
            bad.append(f"{cluster} {self.tp_name(tp)}: HW went back {before} -> {after} ({before - after} records"
                       + (f"; A's own tail was [{tail[1]}, {tail[0]})" if tail is not None else "")
                       + (f"; after the {during} point's check" if during != point else "") + ")")  # fmt: skip
        return bad


@pytest.fixture(scope="module", params=("noida-db", "apache-kafka"))
def scenario(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    kind = request.param
    if kind == "apache-kafka" and os.environ.get("KIP1279_KAFKA_SCENARIOS") == "0":
        pytest.skip("slow scenario on Apache Kafka left out by KIP1279_KAFKA_SCENARIOS=0")
    broker = request.getfixturevalue("broker" if kind == "noida-db" else "apache_kafka")
    rig = Rig(tmp_path_factory.mktemp(f"pause-{kind}"), broker.bootstrap, TOPICS, state_partitions=TABLE_PARTITIONS,
              tick=0.1, seed=SEED)  # fmt: skip
    rig.group_timing = dict(TIMING)
    s = Scenario(rig, kind)
    print(f"\npause seed {SEED} (KIP1279_PAUSE_SEED)")
    try:
        rig.start(("A", "B"))  # A's controller and workers for the failback
        s.names = {v: k for k, v in rig.ids.items()}
        s.spawn_workers(("A", "B"))
        s.sampler.start()
        s.sampler.watch_states("A")
        s.sampler.watch_states("B")
        s.note("started")
        yield s
    finally:
        if s.paused is not None:  # never leave a stopped process behind
            rig.workers[s.paused][1].send_signal(signal.SIGCONT)
        s.sampler.stop()
        rig.close()


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS)
def test_pause_a_worker_past_its_session_timeout(scenario: Scenario, point: str) -> None:
    rng = random.Random(f"{SEED}-{point}")
    print(f"\npause seed {SEED} (KIP1279_PAUSE_SEED), point {point}")
    t0 = time.monotonic()
    try:
        getattr(scenario, point)(rng)
    finally:
        scenario.note(f"{point}: {time.monotonic() - t0:.1f}s")
