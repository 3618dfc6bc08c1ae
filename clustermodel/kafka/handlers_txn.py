"""Transactions: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.ports import NotLeader
from records.kafka_envelope import Request
from records.registry import default_schemas

from ..producers import InvalidProducerEpoch
from . import errors as E
from .handlers_cluster import not_coordinator

if TYPE_CHECKING:
    from .context import ListenerContext

S = default_schemas()
_InitResponse = S.struct("InitProducerIdResponse")
_AddPartsResponse = S.struct("AddPartitionsToTxnResponse")
_AddPartsTopic = S.nested("AddPartitionsToTxnResponse", "AddPartitionsToTxnTopicResult")
_AddPartsPartition = S.nested("AddPartitionsToTxnResponse", "AddPartitionsToTxnPartitionResult")
_AddOffsetsResponse = S.struct("AddOffsetsToTxnResponse")
_TxnCommitResponse = S.struct("TxnOffsetCommitResponse")
_TxnCommitTopic = S.nested("TxnOffsetCommitResponse", "TxnOffsetCommitResponseTopic")
_TxnCommitPartition = S.nested("TxnOffsetCommitResponse", "TxnOffsetCommitResponsePartition")
_EndResponse = S.struct("EndTxnResponse")

# KIP-588: from these versions on the coordinator answers PRODUCER_FENCED, before them INVALID_PRODUCER_EPOCH.
_FENCED_FROM = {22: 3, 24: 2, 25: 2, 26: 2, 28: 3}


def _code(exc: Exception, req: Request) -> int:
    if isinstance(exc, InvalidProducerEpoch):
        return E.PRODUCER_FENCED if req.api_version >= _FENCED_FROM[req.api_key] else E.INVALID_PRODUCER_EPOCH
    if isinstance(exc, NotLeader):
        # Markers cannot be written while a partition of the transaction is offline: Kafka's
        # coordinator keeps retrying and answers the client with this retriable error.
        return E.CONCURRENT_TRANSACTIONS
    return E.code_of(exc)


def init_producer_id(cluster: ListenerContext, broker: int, req: Request) -> object:
    txn_id = req.body.transactional_id
    if txn_id is not None:
        code = not_coordinator(cluster, broker, txn_id)
        if code:
            return _InitResponse(error_code=code, producer_id=-1, producer_epoch=-1)
    try:
        ident = cluster.model.init_producer_id(txn_id)
    except Exception as exc:  # noqa: BLE001
        return _InitResponse(error_code=_code(exc, req), producer_id=-1, producer_epoch=-1)
    cluster.notify()
    return _InitResponse(error_code=E.NONE, producer_id=ident.producer_id, producer_epoch=ident.producer_epoch)


def add_partitions_to_txn(cluster: ListenerContext, broker: int, req: Request) -> object:
    b = req.body
    txn_id = b.v3_and_below_transactional_id
    topics = [(t.name, list(t.partitions)) for t in b.v3_and_below_topics]
    code = not_coordinator(cluster, broker, txn_id)
    if not code:
        unknown = [(n, p) for n, ps in topics for p in ps
                   if n not in cluster.model.topic_ids or not 0 <= p < len(cluster.model.topic(n).partitions)]
        if unknown:
            code = E.UNKNOWN_TOPIC_OR_PARTITION
        else:
            try:
                cluster.model.add_partitions_to_txn(txn_id, b.v3_and_below_producer_id, b.v3_and_below_producer_epoch,
                                                    [(n, p) for n, ps in topics for p in ps])
            except Exception as exc:  # noqa: BLE001
                code = _code(exc, req)
    return _AddPartsResponse(results_by_topic_v3_and_below=[
        _AddPartsTopic(name=n, results_by_partition=[_AddPartsPartition(partition_index=p, partition_error_code=code) for p in ps])
        for n, ps in topics
    ])


def add_offsets_to_txn(cluster: ListenerContext, broker: int, req: Request) -> object:
    b = req.body
    code = not_coordinator(cluster, broker, b.transactional_id)
    if not code:
        try:
            cluster.model.add_offsets_to_txn(b.transactional_id, b.producer_id, b.producer_epoch, b.group_id)
        except Exception as exc:  # noqa: BLE001
            code = _code(exc, req)
    return _AddOffsetsResponse(error_code=code)


def txn_offset_commit(cluster: ListenerContext, broker: int, req: Request) -> object:
    """Sent to the group coordinator, as in Kafka."""
    b = req.body
    code = not_coordinator(cluster, broker, b.group_id)
    if not code:
        offsets = [(t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata or "")
                   for t in b.topics for p in t.partitions]
        if any(n not in cluster.model.topic_ids for n, *_ in offsets):
            code = E.UNKNOWN_TOPIC_OR_PARTITION
        else:
            try:
                cluster.model.txn_offset_commit(b.transactional_id, b.producer_id, b.producer_epoch, b.group_id, offsets)
            except Exception as exc:  # noqa: BLE001
                code = _code(exc, req)
    return _TxnCommitResponse(topics=[
        _TxnCommitTopic(name=t.name, partitions=[_TxnCommitPartition(partition_index=p.partition_index, error_code=code)
                                                 for p in t.partitions])
        for t in b.topics
    ])


def end_txn(cluster: ListenerContext, broker: int, req: Request) -> object:
    b = req.body
    code = not_coordinator(cluster, broker, b.transactional_id)
    if not code:
        try:
            cluster.model.end_txn(b.transactional_id, b.producer_id, b.producer_epoch, b.committed)
        except Exception as exc:  # noqa: BLE001
            code = _code(exc, req)
        cluster.notify()
    return _EndResponse(error_code=code, producer_id=-1, producer_epoch=-1)


HANDLERS = {22: init_producer_id, 24: add_partitions_to_txn, 25: add_offsets_to_txn, 28: txn_offset_commit, 26: end_txn}
