"""Workloads against a model cluster: keyed records, transactions (some aborted, some left open),
leader elections, at a chosen rate on the logical clock.

Works on anything with the model's control methods: a ClusterModel in-process or a
ClusterClient of the local server. Its own Random is seeded, so a workload replays exactly.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import msgspec

from coordinator.ports import NotLeader, PortError

from .errors import ElectionError, NotEnoughReplicas, TransactionError


class WorkloadStats(msgspec.Struct):
    """What a workload did, for demos and assertions."""

    records: int = 0
    batches: int = 0
    committed: int = 0
    aborted: int = 0
    left_open: int = 0
    elections: int = 0
    unclean_elections: int = 0
    refused: int = 0  # produce attempts the cluster refused (offline leader, read-only, ISR too small)


class Workload:
    """Traffic generator. Ratios are per batch; elections per tick."""

    def __init__(
        self,
        cluster: Any,
        topics: Sequence[str],
        seed: int = 0,
        records_per_s: int = 1000,
        batch_size: int = 10,
        key_space: int = 100,
        transactional_ratio: float = 0.2,
        abort_ratio: float = 0.25,
        leave_open_ratio: float = 0.1,
        election_rate: float = 0.0,
        unclean_ratio: float = 0.0,
        value_bytes: int = 32,
        transactional_ids: int = 4,
    ) -> None:
        self.cluster = cluster
        self.topics = list(topics)
        self.rng = random.Random(seed)
        self.records_per_s = records_per_s
        self.batch_size = batch_size
        self.key_space = key_space
        self.transactional_ratio = transactional_ratio
        self.abort_ratio = abort_ratio
        self.leave_open_ratio = leave_open_ratio
        self.election_rate = election_rate
        self.unclean_ratio = unclean_ratio
        self.value_bytes = value_bytes
        self.stats = WorkloadStats()
        self._partitions = {t: self._partition_count(t) for t in self.topics}
        self._txn_ids = [f"wl-{seed}-txn-{i}" for i in range(transactional_ids)]
        for txn_id in self._txn_ids:
            cluster.init_producer_id(txn_id)
        self._open: set[str] = set()
        self._seq = 0
        self._carry = 0.0

    def _partition_count(self, topic: str) -> int:
        for md in self.cluster.describe_topics():
            if md.name == topic:
                return len(md.partitions)
        raise ValueError(f"no topic {topic}")

    def records(self, n: int) -> list[tuple[bytes | None, bytes | None]]:
        """``n`` keyed records; values carry a running sequence so tests can find them again."""
        out = []
        for _ in range(n):
            key = b"k%d" % self.rng.randrange(self.key_space)
            value = (b"v%d:" % self._seq).ljust(self.value_bytes, b".")
            self._seq += 1
            out.append((key, value))
        return out

    def produce_batch(self) -> None:
        """One batch: plain, or inside a transaction that is committed, aborted or left open."""
        topic = self.rng.choice(self.topics)
        partition = self.rng.randrange(self._partitions[topic])
        recs = self.records(self.rng.randint(1, self.batch_size))
        try:
            if self.rng.random() < self.transactional_ratio:
                self._transaction(topic, partition, recs)
            else:
                self.cluster.produce(topic, partition, recs)
            self.stats.records += len(recs)
            self.stats.batches += 1
        except (PortError, NotEnoughReplicas, TransactionError):
            self.stats.refused += 1

    def _transaction(self, topic: str, partition: int, recs: list[tuple[bytes | None, bytes | None]]) -> None:
        free = [t for t in self._txn_ids if t not in self._open]
        if not free:
            # Every transactional id is busy: re-init one, which aborts its open transaction (fencing).
            txn_id = self.rng.choice(sorted(self._open))
            self.cluster.init_producer_id(txn_id)
            self._open.discard(txn_id)
            self.stats.aborted += 1
            free = [txn_id]
        txn_id = self.rng.choice(free)
        self.cluster.begin_transaction(txn_id)
        self._open.add(txn_id)
        self.cluster.produce_transactional(txn_id, topic, partition, recs)
        roll = self.rng.random()
        if roll < self.leave_open_ratio:
            self.stats.left_open += 1
            return
        if roll < self.leave_open_ratio + self.abort_ratio:
            self.cluster.abort_transaction(txn_id)
            self.stats.aborted += 1
        else:
            self.cluster.commit_transaction(txn_id)
            self.stats.committed += 1
        self._open.discard(txn_id)

    def elect(self) -> None:
        """A leader election on a random partition: clean, or unclean with ``unclean_ratio``."""
        topic = self.rng.choice(self.topics)
        partition = self.rng.randrange(self._partitions[topic])
        unclean = self.rng.random() < self.unclean_ratio
        try:
            self.cluster.elect_leader(topic, partition, None, unclean)
        except (ElectionError, NotLeader):
            return
        self.stats.elections += 1
        self.stats.unclean_elections += int(unclean)

    def run(self, duration_ms: int, tick_ms: int = 100) -> WorkloadStats:
        """Produce at ``records_per_s`` for ``duration_ms`` of logical time, ticking the cluster."""
        elapsed = 0
        while elapsed < duration_ms:
            self._carry += self.records_per_s * tick_ms / 1000
            while self._carry >= self.batch_size / 2:
                before = self.stats.records
                self.produce_batch()
                self._carry -= max(1, self.stats.records - before)
            if self.election_rate and self.rng.random() < self.election_rate:
                self.elect()
            self.cluster.tick(tick_ms)
            elapsed += tick_ms
        return self.stats

    def finish_open_transactions(self, commit: bool = True) -> None:
        """Close every transaction this workload left open."""
        for txn_id in sorted(self._open):
            if commit:
                self.cluster.commit_transaction(txn_id)
            else:
                self.cluster.abort_transaction(txn_id)
        self._open.clear()
