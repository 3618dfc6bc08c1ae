"""Snapshots: a whole model cluster (or several) to msgpack bytes and back.

Logs are saved as batches, the epoch cache as saved (it is not always derivable from batches:
a leader assigns its epoch on election before any append), and producer state is rebuilt from
the log on load, as Kafka rebuilds it from the log. Follower logs that share the leader's
batches store only how many they share, so a snapshot is not three times the data.

Snapshots hold a cluster's state (ClusterCore); loading one builds the model with the caller's
class (ClusterModel), so this module does not depend on the class that offers snapshots.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import TypeVar

import msgspec

from coordinator.ports import AclBinding, Batch, TopicPartition

from .core import ClusterCore, TopicState
from .faults import FaultState
from .groups import GroupState
from .log import PartitionLog
from .replica import Partition
from .transactions_state import TxnCoordinatorState

SNAPSHOT_VERSION = 1
M = TypeVar("M", bound=ClusterCore)
Factory = Callable[..., M]  # the model class: called with the snapshot's constructor arguments


class LogSnapshot(msgspec.Struct, array_like=True):
    broker: int
    log_start: int
    leo: int
    epochs: list[tuple[int, int]]
    shared_from: int  # index into the leader's batches where the shared run starts
    shared: int  # how many batches are the leader's own
    batches: list[Batch]  # the rest


class PartitionSnapshot(msgspec.Struct, array_like=True):
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: list[int]
    hw: int
    caught_up_ms: dict[int, int]
    logs: list[LogSnapshot]
    known_leo: dict[int, int] = {}


class TopicSnapshot(msgspec.Struct):
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    read_only: bool
    mirror_name: str | None
    mirror_source_cluster_id: str | None
    partitions: list[PartitionSnapshot]


class LmeEntry(msgspec.Struct, array_like=True):
    mirror_name: str
    tp: TopicPartition
    epoch: int
    cut_offset: int | None = None  # a consistent cut's, beside the LME


class ClusterSnapshot(msgspec.Struct):
    version: int
    init_args: dict[str, object]
    cluster_id: str
    now_ms: int
    rng_state: tuple[int, list[int], float | None]
    live: list[int]
    stalled: list[int]
    next_retention_ms: int
    lagging: list[TopicPartition]
    topics: list[TopicSnapshot]
    groups: list[GroupState]
    acls: list[AclBinding]
    lme: list[LmeEntry]
    faults: FaultState
    txn_state: TxnCoordinatorState
    owner_epochs: dict[str, int] = {}  # coordinator.fencing: a restarted model still refuses a stale owner


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(ClusterSnapshot)
_multi_decoder = msgspec.msgpack.Decoder(dict[str, ClusterSnapshot])


def _log_snapshot(broker: int, log: PartitionLog, leader: PartitionLog | None) -> LogSnapshot:
    shared_from = shared = 0
    if leader is not None and log is not leader and log.batches:
        first = log.batches[0]
        for i, b in enumerate(leader.batches):
            if b is first:
                shared_from = i
                break
        else:
            first = None  # type: ignore[assignment]
        if first is not None:
            lb = leader.batches
            while (
                shared < len(log.batches)
                and shared_from + shared < len(lb)
                and lb[shared_from + shared] is log.batches[shared]
            ):
                shared += 1
    rest = log.batches[shared:] if leader is not None and log is not leader else log.batches
    return LogSnapshot(broker, log.log_start, log.leo, log.epochs.entries(), shared_from, shared, list(rest))


def _partition_snapshot(part: Partition) -> PartitionSnapshot:
    leader = part.logs.get(part.leader)
    logs = [_log_snapshot(b, part.logs[b], leader) for b in part.replicas]
    return PartitionSnapshot(
        part.replicas, part.leader, part.leader_epoch, list(part.isr), part.hw, dict(part.caught_up_ms), logs,
        dict(part.known_leo),
    )


def cluster_snapshot(model: ClusterCore) -> ClusterSnapshot:
    version, internal, gauss = model.rng.getstate()
    return ClusterSnapshot(
        version=SNAPSHOT_VERSION,
        init_args=dict(model._init_args),
        cluster_id=model._cluster_id,
        now_ms=model.now_ms,
        rng_state=(version, list(internal), gauss),
        live=sorted(model.live),
        stalled=sorted(model.stalled),
        next_retention_ms=model._next_retention_ms,
        lagging=sorted(model._lagging),
        topics=[
            TopicSnapshot(t.name, t.topic_id, dict(t.configs), t.read_only, t.mirror_name,
                          t.mirror_source_cluster_id, [_partition_snapshot(p) for p in t.partitions])
            for t in model.topics.values()
        ],
        groups=list(model.groups.values()),
        acls=list(model.acls),
        lme=[LmeEntry(m, tp, e, model.lme_cuts.get((m, tp))) for (m, tp), e in model.lme.items()],
        faults=model.faults.state,
        txn_state=model.txn_state,
        owner_epochs=dict(model.owner_epochs.highest),
    )


def restore_cluster(snap: ClusterSnapshot, factory: Factory[M]) -> M:
    if snap.version != SNAPSHOT_VERSION:
        raise ValueError(f"unsupported snapshot version {snap.version}")
    model = factory(**snap.init_args)
    model._cluster_id = snap.cluster_id
    version, internal, gauss = snap.rng_state
    model.rng.setstate((version, tuple(internal), gauss))
    model.now_ms = snap.now_ms
    model.live = set(snap.live)
    model.stalled = set(snap.stalled)
    model._next_retention_ms = snap.next_retention_ms
    model._lagging = set(snap.lagging)
    for ts in snap.topics:
        topic = TopicState(ts.name, ts.topic_id, ts.configs)
        topic.read_only = ts.read_only
        topic.mirror_name = ts.mirror_name
        topic.mirror_source_cluster_id = ts.mirror_source_cluster_id
        for index, ps in enumerate(ts.partitions):
            part = Partition(TopicPartition(ts.topic_id, index), ps.replicas, ps.leader_epoch)
            part.leader = ps.leader
            part.isr = ps.isr
            part.hw = ps.hw
            part.caught_up_ms = ps.caught_up_ms
            part.known_leo = ps.known_leo
            by_broker = {ls.broker: ls for ls in ps.logs}
            leader_snap = by_broker.get(ps.leader)
            leader_batches = leader_snap.batches if leader_snap else []
            for broker, ls in by_broker.items():
                batches = ls.batches
                if broker != ps.leader and ls.shared:
                    batches = leader_batches[ls.shared_from : ls.shared_from + ls.shared] + batches
                part.logs[broker].load(ls.log_start, ls.leo, batches, ls.epochs, ps.hw)
            topic.partitions.append(part)
        model.topics[ts.topic_id] = topic
        model.topic_ids[ts.name] = ts.topic_id
    model.groups = {g.group_id: g for g in snap.groups}
    model.acls = dict.fromkeys(snap.acls)
    model.lme = {(e.mirror_name, e.tp): e.epoch for e in snap.lme}
    model.lme_cuts = {(e.mirror_name, e.tp): e.cut_offset for e in snap.lme if e.cut_offset is not None}
    model.faults.state = snap.faults
    model.txn_state = snap.txn_state
    model.owner_epochs.highest = dict(snap.owner_epochs)
    return model


def dump_cluster(model: ClusterCore) -> bytes:
    return _encoder.encode(cluster_snapshot(model))


def load_cluster(data: bytes, factory: Factory[M]) -> M:
    return restore_cluster(_decoder.decode(data), factory)


def dump_clusters(models: Mapping[str, ClusterCore]) -> bytes:
    """Several named clusters (the local server's state) in one snapshot."""
    return _encoder.encode({name: cluster_snapshot(m) for name, m in models.items()})


def load_clusters(data: bytes, factory: Factory[M]) -> dict[str, M]:
    return {name: restore_cluster(s, factory) for name, s in _multi_decoder.decode(data).items()}
