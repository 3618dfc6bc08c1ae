"""A Hypothesis state machine over two model clusters and both mirror directions.

Rules: produce on whichever side takes writes, transactions, clean leader elections, source
broker crashes and restarts, destination broker bounces, source retention, the source unreachable
for a while, stop (failover), start (failback, or a restart of the
same direction), pause and resume, a coordinator killed in the middle of a round, and a plain
coordinator restart from persisted state only. Every rule ends with one coordinator round.

After every step:
- only legal transitions were ever persisted (the store refuses others; the history is checked);
  and the same again with the worker's store (``WorkerMirrorMachine``);
- DLE >= SLE for every mirroring partition, and no destination batch has an epoch above its DLE;
- offsets are preserved and nothing is lost below the mirrored point: for a mirroring partition,
  the destination's batches in the range both logs retain are exactly the source's batches there;
- a stop writes at most one MIRROR_PID_RESET after the point where it removed the fetcher;
- a stop aborts exactly the transactions open on the destination at the stop point, once each:
  a transaction whose COMMIT was copied is never aborted (the fetcher copies up to the HW).
- while the source is unreachable no partition mirrors, and once it answers again none stays
  FAILED for it (checked in the rule).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from workflow_harness import Crash, CrashingPort, World, batches, dle, shape

from coordinator.ports import ControlType, PortError
from coordinator.retry import SOURCE_ERROR_CODES
from coordinator.states import DesiredState, MirrorState, is_legal_transition
from clustermodel import ModelError
from clustermodel.producers import ProducerStateManager

OTHER = {"a": "b", "b": "a"}
PARTITIONS = 2


class MirrorMachine(RuleBasedStateMachine):
    WORKER = False  # True: the runner as the stream worker drives it (queued writes, commit per round)

    @initialize(seed=st.integers(0, 1000))
    def setup(self, seed):
        self.w = World("a", "b", seed=seed, worker=self.WORKER)
        self.topic = self.w["a"].add_topic("s", partitions=PARTITIONS)
        self.tps = [self.w["a"].tp("s", p) for p in range(PARTITIONS)]
        self.src = "a"  # the current direction: src -> OTHER[src]
        self.desired = DesiredState.START
        self.txns = 0
        self.mirror().set_desired(self.topic.topic_id, DesiredState.START)
        self.w.step()

    # ------------------------------------------------------------------ helpers

    def mirror(self, src=None):
        s = src or self.src
        return self.w.mirror(s, OTHER[s])

    def round(self, crash=None):
        """One coordinator round; with ``crash`` = (calls, after_call) the active runner dies at that
        destination call and is rebuilt from persisted state, then a clean round follows."""
        if crash is None:
            self.w.step()
            return
        m = self.mirror()
        m.runner = m.build(dest=CrashingPort(m.dest, *crash))
        try:
            self.w.step()
        except Crash:
            event("coordinator killed mid-round")
        m.restart()
        self.w.step()

    def states(self):
        return {tp: self.mirror().runner.state(tp).state for tp in self.tps}

    # ------------------------------------------------------------------ cluster rules

    @rule(side=st.sampled_from("ab"), p=st.integers(0, PARTITIONS - 1), n=st.integers(1, 3))
    def produce(self, side, p, n):
        try:
            self.w[side].produce("s", p, [(b"k", f"{side}{i}".encode()) for i in range(n)])
        except (PortError, ModelError):
            pass  # read-only mirror, or not enough replicas
        self.round()

    @rule(side=st.sampled_from("ab"), p=st.integers(0, PARTITIONS - 1), commit=st.booleans())
    def transaction(self, side, p, commit):
        c = self.w[side]
        if c.topic("s").read_only:
            return
        tid = f"t{self.txns}"
        self.txns += 1
        try:
            c.init_producer_id(tid)
            c.begin_transaction(tid)
            c.produce_transactional(tid, "s", p, [(b"k", b"txn")])
            if commit is not None and self.txns % 3:
                # most transactions complete at once, some stay open for a while
                (c.commit_transaction if commit else c.abort_transaction)(tid)
        except (PortError, ModelError):
            pass
        self.round()

    @rule(side=st.sampled_from("ab"), p=st.integers(0, PARTITIONS - 1))
    def interleaved_transactions(self, side, p):
        """T1 commits while T2, begun after T1's data, stays open: T1's COMMIT sits above the
        source LSO. The mirror copies both (up to the HW), so only T2 is open on the destination."""
        c = self.w[side]
        if c.topic("s").read_only:
            return
        t1, t2 = f"t{self.txns}", f"t{self.txns + 1}"
        self.txns += 2
        try:
            for tid in (t1, t2):
                c.init_producer_id(tid)
                c.begin_transaction(tid)
            c.produce_transactional(t1, "s", p, [(b"k", b"t1")])
            c.produce_transactional(t2, "s", p, [(b"k", b"t2")])
            c.commit_transaction(t1)
        except (PortError, ModelError):
            pass
        self.round()

    @rule()
    def finish_open_transactions(self):
        for side in "ab":
            c = self.w[side]
            if c.topic("s").read_only:
                continue
            for tid in c.open_transactional_ids():
                try:
                    c.commit_transaction(tid)
                except (PortError, ModelError):
                    pass
        self.round()

    @rule(side=st.sampled_from("ab"), p=st.integers(0, PARTITIONS - 1))
    def elect(self, side, p):
        try:
            self.w[side].elect_leader("s", p)
        except (PortError, ModelError):
            pass
        self.round()

    @rule(broker=st.integers(0, 2))
    def crash_or_restart_source_broker(self, broker):
        c = self.w[self.src]
        if broker in c.live and len(c.live) == len(c.brokers):
            c.crash_broker(broker)  # at most one broker down per cluster: partitions stay online
        elif broker not in c.live:
            c.restart_broker(broker)
        self.round()

    @rule(broker=st.integers(0, 2))
    def bounce_destination_broker(self, broker):
        """A destination broker crashes and comes back within one round. (One that stays down across
        a truncation returns with a divergent suffix the model cannot detect: see test_workflows_known_gaps.)"""
        c = self.w[OTHER[self.src]]
        if broker in c.live and len(c.live) == len(c.brokers):
            c.crash_broker(broker)
            self.round()
            c.restart_broker(broker)
        self.round()

    @rule(p=st.integers(0, PARTITIONS - 1), fraction=st.floats(0.0, 1.0))
    def source_retention(self, p, fraction):
        c = self.w[self.src]
        hw = c.list_offsets(self.tps[p]).hw
        try:
            c.delete_records("s", p, int(hw * fraction))
        except (PortError, ModelError):
            pass
        self.round()

    @rule(rounds=st.integers(1, 6))
    def source_outage(self, rounds):
        event("source unreachable")
        c, m = self.w[self.src], self.mirror()
        c.set_unreachable(True)
        try:
            self.w.step(rounds=rounds)
            for tp in self.tps:
                s = m.runner.state(tp)
                assert s.state is not MirrorState.MIRRORING, (tp, s)
                if s.state is MirrorState.FAILED and s.error_code in SOURCE_ERROR_CODES:
                    assert s.retryable and s.error_message, s
        finally:
            c.set_unreachable(False)
        # FAST backs off 1 s at most: after 2.5 s every partition the source can serve has retried
        self.w.step(rounds=25)
        for tp in self.tps:
            s = m.runner.state(tp)
            if c.partition(tp).online:
                assert not (s.state is MirrorState.FAILED and s.error_code in SOURCE_ERROR_CODES), (tp, s)

    @rule(rounds=st.integers(1, 5))
    def time_passes(self, rounds):
        self.w.step(rounds=rounds)

    @rule()
    def quiet_source_catches_up(self):
        """With nothing produced, a mirroring partition reaches the source HW (lag 0), open
        transactions or not: the fetcher copies what a follower would."""
        self.w.step(rounds=30)  # 3 s: past the fetch backoff and a first FAILED retry
        m = self.mirror()
        if self.desired is not DesiredState.START:
            return
        for tp in self.tps:
            src, dst = m.source.partition(tp), m.dest.partition(tp)
            if m.runner.state(tp).state is MirrorState.MIRRORING and src.online and dst.online:
                assert dst.leader_log.leo == src.hw, (m.name, tp, dst.leader_log.leo, src.hw, src.lso())

    # ------------------------------------------------------------------ operator rules

    @precondition(lambda self: self.desired is not DesiredState.STOP)
    @rule(crash=st.none() | st.tuples(st.integers(0, 4), st.booleans()))
    def stop(self, crash):
        event("stop")
        self.desired = DesiredState.STOP
        self.mirror().set_desired(self.topic.topic_id, DesiredState.STOP)
        self.round(crash)

    @precondition(lambda self: self.desired is DesiredState.START)
    @rule(crash=st.none() | st.tuples(st.integers(0, 4), st.booleans()))
    def pause(self, crash):
        self.desired = DesiredState.PAUSE
        self.mirror().set_desired(self.topic.topic_id, DesiredState.PAUSE)
        self.round(crash)

    @precondition(lambda self: self.desired is DesiredState.PAUSE)
    @rule(crash=st.none() | st.tuples(st.integers(0, 4), st.booleans()))
    def resume(self, crash):
        self.desired = DesiredState.START
        self.mirror().set_desired(self.topic.topic_id, DesiredState.START)
        self.round(crash)

    @precondition(lambda self: self.desired is DesiredState.STOP)
    @rule(reverse=st.booleans(), crash=st.none() | st.tuples(st.integers(0, 4), st.booleans()))
    def start(self, reverse, crash):
        if any(s is not MirrorState.STOPPED for s in self.states().values()):
            self.round()
            return
        if reverse:
            self.src = OTHER[self.src]  # failback: the other side mirrors this one
        event("failback" if reverse else "start again, same direction")
        self.desired = DesiredState.START
        self.mirror().set_desired(self.topic.topic_id, DesiredState.START)
        self.round(crash)

    # ------------------------------------------------------------------ coordinator rules

    @rule(p=st.integers(0, PARTITIONS - 1), calls=st.integers(0, 3), after_call=st.booleans())
    def coordinator_crash(self, p, calls, after_call):
        try:
            self.w[self.src].produce("s", p, [(b"k", b"before-crash")])  # give the round work to die in
        except (PortError, ModelError):
            pass
        self.round((calls, after_call))

    @rule()
    def coordinator_restart(self):
        for m in self.w.mirrors.values():
            m.restart()
        self.round()

    # ------------------------------------------------------------------ invariants

    @invariant()
    def only_legal_transitions(self):
        for m in self.w.mirrors.values():
            for _, before, after in m.history:
                assert is_legal_transition(before, after), (before, after)

    @invariant()
    def dle_at_least_sle(self):
        for m in self.w.mirrors.values():
            for tp in self.tps:
                if m.runner.state(tp).state is not MirrorState.MIRRORING:
                    continue
                src, dst = m.source.partition(tp), m.dest.partition(tp)
                if not (src.online and dst.online):
                    continue
                assert dle(m.dest, tp) >= dle(m.source, tp), (m.name, tp)
                assert all(x.leader_epoch <= dst.leader_epoch for x in batches(m.dest, tp))

    @invariant()
    def offsets_preserved_nothing_lost(self):
        for m in self.w.mirrors.values():
            for tp in self.tps:
                if m.runner.state(tp).state is not MirrorState.MIRRORING:
                    continue
                src, dst = m.source.partition(tp).leader_log, m.dest.partition(tp).leader_log
                lo, hi = max(src.log_start, dst.log_start), dst.leo
                assert dst.leo <= src.leo, (m.name, tp)
                mine = [x for x in dst.batches if x.base_offset >= lo and x.last_offset < hi]
                theirs = [x for x in src.batches if x.base_offset >= lo and x.last_offset < hi]
                assert shape(mine) == shape(theirs), (m.name, tp)

    @invariant()
    def stop_keeps_everything_mirrored(self):
        """After a failover the destination still has exactly what it mirrored below the stop point."""
        m = self.mirror()
        for tp in self.tps:
            s = m.runner.state(tp)
            if self.desired is not DesiredState.STOP or s.state is not MirrorState.STOPPED:
                continue
            src, dst = m.source.partition(tp).leader_log, m.dest.partition(tp).leader_log
            lo, hi = max(src.log_start, dst.log_start), s.stop_offset
            mine = [x for x in dst.batches if x.base_offset >= lo and x.last_offset < hi]
            theirs = [x for x in src.batches if x.base_offset >= lo and x.last_offset < hi]
            assert shape(mine) == shape(theirs), (m.name, tp)

    @invariant()
    def no_mirrored_transaction_left_open_after_stop(self):
        for m in self.w.mirrors.values():
            for tp in self.tps:
                s = m.runner.state(tp)
                if s.state is MirrorState.STOPPED and m.dest.partition(tp).online:
                    assert all(t.first_offset >= s.stop_offset for t in m.dest.open_transactions(tp)), (m.name, tp)

    @invariant()
    def at_most_one_pid_reset_per_stop(self):
        for m in self.w.mirrors.values():
            for tp in self.tps:
                s = m.runner.state(tp)
                if s.state is not MirrorState.STOPPED or s.stop_offset < 0:
                    continue
                resets = [x for x in batches(m.dest, tp)
                          if x.base_offset >= s.stop_offset and x.control_type == ControlType.MIRROR_PID_RESET]
                assert len(resets) <= 1, (m.name, tp)

    @invariant()
    def stop_aborts_exactly_the_open_transactions(self):
        for m in self.w.mirrors.values():
            for tp in self.tps:
                s = m.runner.state(tp)
                part = m.dest.partition(tp)
                if s.state is not MirrorState.STOPPED or s.stop_offset < 0 or not part.online:
                    continue
                if part.leader_log.log_start > 0:
                    continue  # retention took the evidence: where the open transactions began
                log = batches(m.dest, tp)
                below = [x for x in log if x.base_offset < s.stop_offset]
                was_open = sorted(t.producer_id for t in ProducerStateManager.rebuild(below, s.stop_offset).open_transactions())
                tail = []
                for x in log:
                    if x.base_offset < s.stop_offset:
                        continue
                    if x.control_type == ControlType.MIRROR_PID_RESET:
                        break  # the coordinator's own writes end with the reset
                    tail.append(x)
                aborted = sorted(x.producer_id for x in tail if x.control_type == ControlType.ABORT)
                assert aborted == was_open, (m.name, tp, aborted, was_open)


MirrorMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("MIRROR_STATEFUL_EXAMPLES", "150")), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestMirrorMachine = MirrorMachine.TestCase


class WorkerMirrorMachine(MirrorMachine):
    """The same rules and invariants with the worker's store: a round's writes become durable only
    at its end (steps of one state collapse into one write; the durability gate holds back the
    rest), and a coordinator killed mid-round loses every write of that round."""

    WORKER = True


WorkerMirrorMachine.TestCase.settings = MirrorMachine.TestCase.settings
TestWorkerMirrorMachine = WorkerMirrorMachine.TestCase
