"""Hypothesis stateful test: random produce, transactions, elections, retention, crashes and stalls.

Invariants after every step: offsets strictly increase in every replica's log; epoch caches
and batch epochs are monotonic; log start <= LSO <= HW <= LEO; every ISR member holds the
leader's batches below the HW; committed data (below the HW) survives clean elections.
A failure prints Hypothesis' minimal program and the model's seed and steps.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from clustermodel import ClusterModel, ElectionError, ModelError
from clustermodel.errors import BrokerError
from clustermodel.producers import ProducerError
from coordinator.ports import Batch, NotLeader, PortError

PARTITIONS = 2
TXN_IDS = ("tx0", "tx1")


class ClusterMachine(RuleBasedStateMachine):
    model: ClusterModel

    @initialize(seed=st.integers(0, 2**16))
    def setup(self, seed: int) -> None:
        self.model = ClusterModel("prop", seed=seed, brokers=3, replica_lag_time_max_ms=5_000)
        self.model.add_topic("t", PARTITIONS)
        for txn_id in TXN_IDS:
            self.model.init_producer_id(txn_id)
        self.committed: dict[int, dict[int, Batch]] = {p: {} for p in range(PARTITIONS)}
        self._snapshot_committed()

    # ---------------------------------------------------------------- helpers

    def _fail(self, message: str) -> AssertionError:
        return AssertionError(f"{message}\n{self.model.format_repro()}")

    def _snapshot_committed(self) -> None:
        """Remember every batch below the HW: clean elections must keep them."""
        for p in range(PARTITIONS):
            part = self.model.partition(self.model.tp("t", p))
            if not part.online:
                continue
            log = part.leader_log
            self.committed[p] = {b.base_offset: b for b in log.batches if b.last_offset < part.hw}

    def _check_committed_kept(self) -> None:
        for p in range(PARTITIONS):
            part = self.model.partition(self.model.tp("t", p))
            if not part.online:
                continue
            log = part.leader_log
            have = {b.base_offset: b for b in log.batches}
            for base, batch in self.committed[p].items():
                if base < log.log_start:
                    continue  # retention took it, legitimately
                if have.get(base) != batch:
                    raise self._fail(f"committed batch at {base} of partition {p} lost by a clean election")

    # ---------------------------------------------------------------- rules

    @rule(p=st.integers(0, PARTITIONS - 1), n=st.integers(1, 4))
    def produce(self, p: int, n: int) -> None:
        try:
            self.model.produce("t", p, [(b"k%d" % i, b"v") for i in range(n)])
        except (PortError, ModelError, ProducerError):
            pass

    @rule(txn=st.sampled_from(TXN_IDS), p=st.integers(0, PARTITIONS - 1), end=st.sampled_from(["commit", "abort", "open"]))
    def transaction(self, txn: str, p: int, end: str) -> None:
        try:
            if txn in self.model.open_transactional_ids():
                self.model.commit_transaction(txn) if end == "commit" else self.model.abort_transaction(txn)
                return
            self.model.begin_transaction(txn)
            self.model.produce_transactional(txn, "t", p, [(b"tk", b"tv")])
            if end == "commit":
                self.model.commit_transaction(txn)
            elif end == "abort":
                self.model.abort_transaction(txn)
        except (PortError, ModelError, ProducerError):
            # Data above the HW lost in an election makes a producer's sequence out of order, as in Kafka.
            pass

    @rule(p=st.integers(0, PARTITIONS - 1))
    def clean_election(self, p: int) -> None:
        self._snapshot_committed()
        try:
            self.model.elect_leader("t", p)
        except ElectionError:
            return
        self._check_committed_kept()

    @rule(p=st.integers(0, PARTITIONS - 1), broker=st.integers(0, 2))
    def unclean_election(self, p: int, broker: int) -> None:
        try:
            self.model.elect_leader("t", p, broker, unclean=True)
        except ElectionError:
            pass
        self._snapshot_committed()  # an unclean election may lose committed data: new baseline

    @rule(broker=st.integers(0, 2))
    def crash(self, broker: int) -> None:
        self._snapshot_committed()
        try:
            self.model.crash_broker(broker)
        except BrokerError:
            return
        self._check_committed_kept()

    @rule(broker=st.integers(0, 2))
    def restart(self, broker: int) -> None:
        self._snapshot_committed()
        try:
            self.model.restart_broker(broker)
        except BrokerError:
            return
        self._check_committed_kept()

    @rule(broker=st.integers(0, 2), stalled=st.booleans())
    def stall(self, broker: int, stalled: bool) -> None:
        self.model.set_follower_stalled(broker, stalled)

    @rule(ms=st.sampled_from([1, 100, 3_000, 6_000]))
    def tick(self, ms: int) -> None:
        self._snapshot_committed()
        self.model.tick(ms)
        self._check_committed_kept()

    @precondition(lambda self: hasattr(self, "model"))
    @rule(p=st.integers(0, PARTITIONS - 1), fraction=st.floats(0, 1))
    def delete_records(self, p: int, fraction: float) -> None:
        part = self.model.partition(self.model.tp("t", p))
        if not part.online:
            return
        target = part.leader_log.log_start + int((part.hw - part.leader_log.log_start) * fraction)
        try:
            self.model.delete_records("t", p, target)
        except (PortError, NotLeader):
            pass

    # ---------------------------------------------------------------- invariants

    @invariant()
    def logs_are_well_formed(self) -> None:
        if not hasattr(self, "model"):
            return
        for p in range(PARTITIONS):
            part = self.model.partition(self.model.tp("t", p))
            for broker, log in part.logs.items():
                prev_last, prev_epoch = -1, -1
                if log.batches and log.batches[0].last_offset < log.log_start:
                    raise self._fail(f"a batch wholly below the log start on broker {broker}")
                for b in log.batches:
                    if not (b.base_offset > prev_last and b.last_offset >= b.base_offset):
                        raise self._fail(f"offsets do not increase on broker {broker} partition {p}")
                    if b.leader_epoch < prev_epoch:
                        raise self._fail(f"batch epochs go back on broker {broker} partition {p}")
                    prev_last, prev_epoch = b.last_offset, b.leader_epoch
                if log.batches and log.leo != log.batches[-1].last_offset + 1:
                    raise self._fail(f"LEO {log.leo} is not after the last batch on broker {broker}")
                entries = log.epochs.entries()
                for (e1, s1), (e2, s2) in zip(entries, entries[1:]):
                    if not (e1 < e2 and s1 < s2):
                        raise self._fail(f"epoch cache not monotonic on broker {broker}: {entries}")

    @invariant()
    def offsets_are_ordered(self) -> None:
        if not hasattr(self, "model"):
            return
        for p in range(PARTITIONS):
            part = self.model.partition(self.model.tp("t", p))
            if not part.online:
                continue
            log = part.leader_log
            lso = part.lso()
            if not (log.log_start <= lso <= part.hw <= log.leo):
                raise self._fail(f"partition {p}: log start {log.log_start}, LSO {lso}, HW {part.hw}, LEO {log.leo}")

    @invariant()
    def isr_holds_everything_below_hw(self) -> None:
        if not hasattr(self, "model"):
            return
        for p in range(PARTITIONS):
            part = self.model.partition(self.model.tp("t", p))
            if not part.online:
                continue
            leader = part.leader_log
            for broker in part.isr:
                log = part.logs[broker]
                start = max(log.log_start, leader.log_start)
                mine = [b for b in log.batches if b.base_offset >= start and b.last_offset < part.hw]
                theirs = [b for b in leader.batches if b.base_offset >= start and b.last_offset < part.hw]
                if mine != theirs:
                    raise self._fail(f"ISR member {broker} of partition {p} differs from the leader below the HW")


ClusterMachine.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestClusterMachine = ClusterMachine.TestCase
