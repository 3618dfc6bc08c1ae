"""The cluster core: brokers, topics, partitions, the logical clock, elections, produce, retention.

Port methods live in adapter.py and transactions in transactions.py; ClusterModel (cluster.py)
puts them together. Every public mutating call is journaled so a run can be replayed from
its seed and steps.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from coordinator.ports import (
    NO_LEADER,
    AclBinding,
    Batch,
    ControlType,
    NotLeader,
    OffsetOutOfRange,
    PartitionMetadata,
    ReadOnlyTopic,
    TopicAlreadyExists,
    TopicMetadata,
    TopicPartition,
    UnknownTopicId,
)

from coordinator.fencing import OwnerEpochs

from .errors import BrokerError, ElectionError, NotEnoughReplicas, UnknownTopicName
from .faults import Faults
from .groups import GroupState
from .journal import Step, format_steps, journaled
from .producers import DuplicateSequence
from .records import control_payload, end_txn_marker_value, keyed_payload
from .replica import Partition
from .transactions_state import TxnCoordinatorState

DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
RETENTION_CHECK_INTERVAL_MS = 300_000  # log.retention.check.interval.ms
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000  # replica.lag.time.max.ms


class TopicState:
    """A topic: its partitions and configs, and whether it is a (read-only) mirror topic."""

    __slots__ = ("name", "topic_id", "partitions", "configs", "read_only", "mirror_name", "mirror_source_cluster_id")

    def __init__(self, name: str, topic_id: uuid.UUID, configs: dict[str, str]) -> None:
        self.name = name
        self.topic_id = topic_id
        self.partitions: list[Partition] = []
        self.configs = configs
        self.read_only = False
        self.mirror_name: str | None = None
        self.mirror_source_cluster_id: str | None = None

    def config_int(self, key: str, default: int) -> int:
        value = self.configs.get(key)
        return default if value is None else int(value)

    def metadata(self) -> TopicMetadata:
        return TopicMetadata(
            name=self.name,
            topic_id=self.topic_id,
            partitions=tuple(
                PartitionMetadata(self.topic_id, i, p.leader, p.leader_epoch, p.replicas, tuple(p.isr))
                for i, p in enumerate(self.partitions)
            ),
            configs=dict(self.configs),
            read_only=self.read_only,
            mirror_name=self.mirror_name,
            mirror_source_cluster_id=self.mirror_source_cluster_id,
        )


class ClusterCore:
    """State and control operations of one model cluster. Deterministic given seed and calls."""

    def __init__(
        self,
        name: str = "cluster",
        seed: int = 0,
        brokers: int = 3,
        cluster_id: str | None = None,
        auto_replicate: bool = True,
        replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
        journal: bool = True,
    ) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self.name = name
        self.seed = seed
        self.rng = random.Random(seed)
        self._cluster_id = cluster_id or str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        self.now_ms = 0
        self.brokers: tuple[int, ...] = tuple(range(brokers))
        self.live: set[int] = set(self.brokers)
        self.stalled: set[int] = set()
        self.auto_replicate = auto_replicate
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.topics: dict[uuid.UUID, TopicState] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.groups: dict[str, GroupState] = {}
        self.acls: dict[AclBinding, None] = {}  # an ordered set
        self.lme: dict[tuple[str, TopicPartition], int] = {}
        self.lme_cuts: dict[tuple[str, TopicPartition], int] = {}  # a consistent cut's offset, beside its LME
        self.faults = Faults()
        self.txn_state = TxnCoordinatorState()
        # The highest owner epoch seen per workers' group: a worker's mutating call below it is
        # refused (coordinator.fencing); kept in the snapshots.
        self.owner_epochs = OwnerEpochs()
        self._lagging: set[TopicPartition] = set()
        self._next_retention_ms = RETENTION_CHECK_INTERVAL_MS
        self._init_args = dict(
            name=name, seed=seed, brokers=brokers, cluster_id=cluster_id,
            auto_replicate=auto_replicate, replica_lag_time_max_ms=replica_lag_time_max_ms,
        )
        self._journal: list[Step] | None = [] if journal else None
        # Told of every partition whose fetch answer may have changed (data, HW, leader, log
        # start): the model server's fetch sessions and the Kafka listeners' parked fetches wake
        # from them (``on_change``).
        self.change_hooks: list[Callable[[TopicPartition], None]] = []
        self._journal_depth = 0

    # ---------------------------------------------------------------- journal

    @property
    def steps(self) -> list[Step]:
        """Every public call so far (empty when the journal is off)."""
        return list(self._journal or ())

    def format_repro(self) -> str:
        """The seed, constructor arguments and steps that reproduce this model's state."""
        args = ", ".join(f"{k}={v!r}" for k, v in self._init_args.items())
        return format_steps(f"ClusterModel({args}) steps:", self.steps)

    def now(self) -> int:
        """The logical clock, in ms."""
        return self.now_ms

    # ---------------------------------------------------------------- lookups

    def topic(self, name: str) -> TopicState:
        topic_id = self.topic_ids.get(name)
        if topic_id is None:
            raise UnknownTopicName(name)
        return self.topics[topic_id]

    def tp(self, name: str, partition: int = 0) -> TopicPartition:
        """The TopicPartition (by topic ID) of a topic name and partition index."""
        return TopicPartition(self.topic(name).topic_id, partition)

    def _topic_partition(self, tp: TopicPartition) -> tuple[TopicState, Partition]:
        topic = self.topics.get(tp.topic_id)
        if topic is None:
            raise UnknownTopicId(tp.topic_id)
        if not 0 <= tp.partition < len(topic.partitions):
            raise UnknownTopicId(tp.topic_id, tp.partition)
        return topic, topic.partitions[tp.partition]

    def partition(self, tp: TopicPartition) -> Partition:
        """The model partition (replicas, logs) behind ``tp``: for tests and invariants."""
        return self._topic_partition(tp)[1]

    def _online(self, tp: TopicPartition) -> tuple[TopicState, Partition]:
        topic, part = self._topic_partition(tp)
        if not part.online:
            raise NotLeader(tp, NO_LEADER, part.leader_epoch)
        return topic, part

    def all_partitions(self) -> list[Partition]:
        return [p for t in self.topics.values() for p in t.partitions]

    # ---------------------------------------------------------------- topics

    def _new_topic_id(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def _add_topic(
        self, name: str, topic_id: uuid.UUID, num_partitions: int,
        replication_factor: int | None, configs: dict[str, str],
    ) -> TopicState:
        topic = TopicState(name, topic_id, configs)
        rf = min(len(self.brokers), replication_factor or 3)
        # Deterministic placement: a seeded first broker, then round-robin, as Kafka's assignor.
        start = self.rng.randrange(len(self.brokers))
        self.topics[topic_id] = topic
        self.topic_ids[name] = topic_id
        self._grow(topic, num_partitions, rf, start)
        return topic

    def _grow(self, topic: TopicState, total: int, rf: int, start: int) -> None:
        n = len(self.brokers)
        for p in range(len(topic.partitions), total):
            replicas = tuple(self.brokers[(start + p + i) % n] for i in range(rf))
            part = Partition(TopicPartition(topic.topic_id, p), replicas)
            part.caught_up_ms = dict.fromkeys(replicas, self.now_ms)
            live = [b for b in replicas if b in self.live]
            if not live:
                part.go_offline()
            else:
                part.leader = live[0]
                part.isr = live
            if not topic.read_only and part.online:
                part.leader_log.epochs.assign(part.leader_epoch, 0)
            topic.partitions.append(part)

    @journaled
    def add_topic(
        self, name: str, partitions: int = 1, replication_factor: int | None = None,
        configs: dict[str, str] | None = None,
    ) -> TopicMetadata:
        """Create a writable topic with a seeded topic ID (a source topic, or a local one)."""
        if name in self.topic_ids:
            raise TopicAlreadyExists(name, self.topic_ids[name])
        return self._add_topic(name, self._new_topic_id(), partitions, replication_factor, dict(configs or {})).metadata()

    @journaled
    def claim_owner_epoch(self, scope: str, epoch: int, replace: int | None = None) -> int:
        """A worker that took table partitions on claims its owner epoch before it observes
        anything: from then on a call of an older owner of ``scope`` is refused. Raises
        FencedOwnerEpoch when a newer owner has claimed already; returns the scope's epoch.
        ``replace``: the compare-and-set of a group whose generation started again (``OwnerEpochs``)."""
        return self.owner_epochs.check(scope, epoch, replace)

    def owner_epoch(self, scope: str) -> int:
        """The highest owner epoch this cluster has seen for ``scope`` (-1: none)."""
        return self.owner_epochs.highest.get(scope, -1)

    def check_owner_fence(self, fence: tuple[str, int] | None) -> None:
        """The receiver's check of a mutating call's fence (None: an unfenced caller, e.g. a tool)."""
        if fence is not None:
            self.owner_epochs.check(fence[0], fence[1])

    @journaled
    def delete_topic(self, name: str) -> None:
        """Delete a topic (a mirrored source topic deleted makes the mirror partition FAILED)."""
        topic = self.topic(name)
        del self.topics[topic.topic_id]
        del self.topic_ids[name]
        for p in range(len(topic.partitions)):
            self._touch(TopicPartition(topic.topic_id, p))
        self._lagging = {tp for tp in self._lagging if tp.topic_id != topic.topic_id}
        self.lme = {k: v for k, v in self.lme.items() if k[1].topic_id != topic.topic_id}
        self.lme_cuts = {k: v for k, v in self.lme_cuts.items() if k[1].topic_id != topic.topic_id}

    @journaled
    def set_topic_config(self, name: str, key: str, value: str | None) -> None:
        """Set (or with None delete) one topic config, e.g. retention.ms or cleanup.policy."""
        configs = self.topic(name).configs
        if value is None:
            configs.pop(key, None)
        else:
            configs[key] = value

    # ---------------------------------------------------------------- produce

    @journaled
    def produce(
        self,
        topic: str,
        partition: int,
        records: list[tuple[bytes | None, bytes | None]],
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        timestamp: int | None = None,
        acks: int = -1,
    ) -> Batch:
        """A producer's batch of (key, value) records on the leader, stamped with the leader epoch.

        Mirror topics refuse it (ReadOnlyTopic). A duplicate idempotent batch returns the batch
        already written, as Kafka answers a retried produce.
        """
        if not records:
            raise ValueError("a batch needs at least one record")
        return self._produce(topic, partition, keyed_payload(records), len(records), len(records) - 1,
                             producer_id, producer_epoch, base_sequence, transactional, timestamp, acks)

    @journaled
    def produce_kafka_records(
        self,
        topic: str,
        partition: int,
        payload: bytes,
        record_count: int,
        last_offset_delta: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        timestamp: int | None = None,
        acks: int = -1,
    ) -> Batch:
        """produce() of a batch a Kafka client wrote: its records kept as a Kafka-records payload
        (records.kafka_payload), headers and timestamps included."""
        if record_count < 1 or last_offset_delta < record_count - 1:
            raise ValueError(f"a batch needs at least one record and offsets for them ({record_count}, {last_offset_delta})")
        return self._produce(topic, partition, payload, record_count, last_offset_delta,
                             producer_id, producer_epoch, base_sequence, transactional, timestamp, acks)

    def _produce(
        self, topic: str, partition: int, payload: bytes, record_count: int, last_offset_delta: int,
        producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool,
        timestamp: int | None, acks: int,
    ) -> Batch:
        t = self.topic(topic)
        tp = TopicPartition(t.topic_id, partition)
        t, part = self._online(tp)
        if t.read_only:
            raise ReadOnlyTopic(t.topic_id)
        if acks == -1 and len(part.isr) < t.config_int("min.insync.replicas", 1):
            raise NotEnoughReplicas(f"{tp}: ISR {part.isr} below min.insync.replicas")
        log = part.leader_log
        append_time = t.configs.get("message.timestamp.type") == "LogAppendTime"  # the leader's clock stamps it
        batch = Batch(
            base_offset=log.leo,
            last_offset=log.leo + last_offset_delta,
            leader_epoch=part.leader_epoch,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            is_transactional=transactional,
            timestamp=self.now_ms if timestamp is None else timestamp,
            payload=payload,
            record_count=record_count,
            log_append_time=append_time,
        )
        if producer_id >= 0:
            try:
                log.producer_state().validate(batch)
            except DuplicateSequence as dup:
                written = log.batch_at(dup.base_offset)
                assert written is not None
                return written
        part.append_leader(batch)
        self._after_append(part)
        return batch

    def _append_marker(
        self, part: Partition, control_type: ControlType, producer_id: int, producer_epoch: int, value: bytes
    ) -> Batch:
        log = part.leader_log
        batch = Batch(
            base_offset=log.leo,
            last_offset=log.leo,
            leader_epoch=part.leader_epoch,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=control_type != ControlType.MIRROR_PID_RESET,
            is_control=True,
            control_type=control_type,
            timestamp=self.now_ms,
            payload=control_payload(control_type, value),
        )
        part.append_leader(batch)
        self._after_append(part)
        return batch

    def _write_txn_marker(self, part: Partition, commit: bool, producer_id: int, producer_epoch: int) -> Batch:
        control = ControlType.COMMIT if commit else ControlType.ABORT
        return self._append_marker(part, control, producer_id, producer_epoch, end_txn_marker_value())

    def on_change(self, hook: Callable[[TopicPartition], None]) -> None:
        """``hook(tp)`` after every change of a partition's fetch answer (see ``change_hooks``)."""
        self.change_hooks.append(hook)

    def _touch(self, tp: TopicPartition) -> None:
        for hook in self.change_hooks:
            hook(tp)

    def _after_append(self, part: Partition) -> None:
        if len(part.replicas) > 1:
            if self.auto_replicate:
                part.replicate(self.live, self.now_ms, self.stalled)
            if part.needs_replication(self.live):
                self._lagging.add(part.tp)
        self._touch(part.tp)

    # ---------------------------------------------------------------- time, replication, retention

    @journaled
    def tick(self, ms: int) -> int:
        """Advance the logical clock; followers fetch, the ISR shrinks or grows, retention runs."""
        if ms < 0:
            raise ValueError("time only moves forward")
        self.now_ms += ms
        self.run_replication()
        if self.now_ms >= self._next_retention_ms:
            self.run_retention()
            while self._next_retention_ms <= self.now_ms:
                self._next_retention_ms += RETENTION_CHECK_INTERVAL_MS
        return self.now_ms

    @journaled
    def run_replication(self) -> None:
        """One fetch round for every partition with a follower behind, then ISR shrink checks."""
        for tp in sorted(self._lagging):
            topic = self.topics.get(tp.topic_id)
            if topic is None:
                continue
            part = topic.partitions[tp.partition]
            part.replicate(self.live, self.now_ms, self.stalled)
            part.shrink_isr(self.live, self.now_ms, self.replica_lag_time_max_ms)
            self._touch(tp)
            if not part.needs_replication(self.live) and all(b in self.live for b in part.isr):
                self._lagging.discard(tp)

    @journaled
    def run_retention(self) -> int:
        """Apply retention.ms / retention.bytes (cleanup.policy delete): the log start moves up."""
        moved = 0
        for topic in self.topics.values():
            if "delete" not in topic.configs.get("cleanup.policy", "delete"):
                continue
            retention_ms = topic.config_int("retention.ms", DEFAULT_RETENTION_MS)
            retention_bytes = topic.config_int("retention.bytes", -1)
            for part in topic.partitions:
                if not part.online or not part.leader_log.batches:
                    continue
                target = part.leader_log.retention_target(self.now_ms, retention_ms, retention_bytes, part.hw)
                if part.advance_log_start(target):
                    moved += 1
                    self._touch(part.tp)
        return moved

    @journaled
    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords: move the log start to ``offset`` (at most the HW); returns the log start."""
        tp = self.tp(topic, partition)
        _, part = self._online(tp)
        if offset > part.hw:
            raise OffsetOutOfRange(tp, offset, part.leader_log.log_start, part.hw)
        part.advance_log_start(offset)
        self._touch(tp)
        return part.leader_log.log_start

    @journaled
    def compact(self, topic: str) -> int:
        """Run the log cleaner once on every replica below min(LSO, HW); returns records removed."""
        removed = 0
        for part in self.topic(topic).partitions:
            if not part.online:
                continue
            upper = part.lso()
            for broker, log in part.logs.items():
                n = log.compact(upper)
                if broker == part.leader:
                    removed += n
        return removed

    # ---------------------------------------------------------------- brokers and elections

    def _check_broker(self, broker: int) -> None:
        if broker not in self.brokers:
            raise BrokerError(f"unknown broker {broker}")

    @journaled
    def elect_leader(self, topic: str, partition: int, broker: int | None = None, unclean: bool = False) -> int:
        """Elect a new leader (epoch + 1). Clean: a live ISR member; unclean: any live replica."""
        t = self.topic(topic)
        tp = TopicPartition(t.topic_id, partition)
        _, part = self._topic_partition(tp)
        pool = part.replicas if unclean else part.isr
        candidates = [b for b in pool if b in self.live and b != part.leader]
        if broker is not None:
            if broker not in candidates and not (broker == part.leader and broker in self.live):
                raise ElectionError(f"broker {broker} is not eligible for {'unclean' if unclean else 'clean'} election of {tp}")
            new = broker
        elif candidates:
            new = candidates[0]
        else:
            raise ElectionError(f"no eligible replica for {tp}")
        part.elect(new, unclean, self.now_ms, assign_epoch=not t.read_only)
        self._after_leader_change(part)
        return new

    def _after_leader_change(self, part: Partition) -> None:
        self._lagging.add(part.tp)
        if self.auto_replicate:
            part.replicate(self.live, self.now_ms, self.stalled)
        self._touch(part.tp)

    @journaled
    def crash_broker(self, broker: int) -> None:
        """The broker dies: it leaves every ISR; partitions it led elect a live ISR member or go offline.

        If the topic allows unclean.leader.election.enable, an out-of-sync replica may be elected.
        """
        self._check_broker(broker)
        if broker not in self.live:
            raise BrokerError(f"broker {broker} is already down")
        self.live.discard(broker)
        for topic in self.topics.values():
            unclean_ok = topic.configs.get("unclean.leader.election.enable", "false") == "true"
            for part in topic.partitions:
                if broker not in part.replicas:
                    continue
                if part.leader == broker:
                    isr_live = [b for b in part.isr if b in self.live]
                    if isr_live:
                        part.isr = isr_live  # the controller fences the dead leader out of the ISR
                    others = [b for b in part.replicas if b in self.live]
                    if isr_live:
                        part.elect(isr_live[0], False, self.now_ms, assign_epoch=not topic.read_only)
                    elif unclean_ok and others:
                        part.elect(others[0], True, self.now_ms, assign_epoch=not topic.read_only)
                    else:
                        part.go_offline()
                    self._after_leader_change(part)
                else:
                    part.remove_from_isr(broker)
                    self._lagging.add(part.tp)

    @journaled
    def restart_broker(self, broker: int) -> None:
        """The broker comes back with its log; offline partitions whose last ISR member it is elect it."""
        self._check_broker(broker)
        if broker in self.live:
            raise BrokerError(f"broker {broker} is already up")
        self.live.add(broker)
        for topic in self.topics.values():
            for part in topic.partitions:
                if broker not in part.replicas:
                    continue
                if not part.online and broker in part.isr:
                    part.elect(broker, False, self.now_ms, assign_epoch=not topic.read_only)
                self._after_leader_change(part)

    @journaled
    def set_follower_stalled(self, broker: int, stalled: bool) -> None:
        """A live broker whose replica fetchers stop (a slow follower): it falls out of ISRs in time."""
        self._check_broker(broker)
        if stalled:
            self.stalled.add(broker)
        else:
            self.stalled.discard(broker)
        for part in self.all_partitions():
            if broker in part.replicas:
                self._lagging.add(part.tp)
