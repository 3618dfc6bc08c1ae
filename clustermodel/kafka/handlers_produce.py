"""Produce: acks 0/1/all, v2 batches checked as Kafka checks them, idempotent and transactional producers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from records.kafka_envelope import Request
from records.registry import default_schemas
from records.segments import ATTR_TIMESTAMP_TYPE

from . import errors as E
from .batches import BatchRejected, ProducedBatch, decode_produced, model_payload

if TYPE_CHECKING:
    from ..replica import Partition
    from .context import ListenerContext

S = default_schemas()
_Response = S.struct("ProduceResponse")
_TopicResponse = S.nested("ProduceResponse", "TopicProduceResponse")
_PartitionResponse = S.nested("ProduceResponse", "PartitionProduceResponse")
_LeaderIdAndEpoch = S.nested("ProduceResponse", "LeaderIdAndEpoch")
_RecordError = S.nested("ProduceResponse", "BatchIndexAndErrorMessage")
MAX_LONG = 2**63 - 1  # message.timestamp.before.max.ms's default
TIMESTAMP_AFTER_MAX_MS = 3_600_000  # message.timestamp.after.max.ms's default since Kafka 4.0


def produce(cluster: ListenerContext, broker: int, req: Request) -> object:
    body = req.body
    topics: list[tuple[object, list[object]]] = []
    waits: list[tuple[list[object], int, Partition, int, int]] = []
    for t in body.topic_data:
        parts: list[object] = []
        for pd in t.partition_data:
            response, part = _produce_partition(cluster, broker, req.api_version, body.transactional_id, body.acks,
                                                t.name, pd.index, pd.records)
            if part is not None and body.acks == -1 and part.hw < part.leader_log.leo:
                waits.append((parts, len(parts), part, part.leader_log.leo, part.leader_epoch))
            parts.append(response)
        topics.append((t, parts))
    # No notify: each append wakes the fetches parked on its partition (the model's change hook).
    if body.acks == 0:
        return None
    if not waits:
        return _response(topics)
    return _await_isr(cluster, topics, waits, body.timeout_ms)


def _response(topics: list[tuple[object, list[object]]]) -> object:
    return _Response(responses=[_TopicResponse(name=t.name, topic_id=t.topic_id, partition_responses=parts)
                                for t, parts in topics])


async def _await_isr(cluster: ListenerContext, topics: list[tuple[object, list[object]]],
                     waits: list[tuple[list[object], int, Partition, int, int]], timeout_ms: int) -> object:
    """acks=all: answer once the HW covers the batch (every ISR member has it), as Kafka's purgatory
    does; REQUEST_TIMED_OUT after the request's timeout, NOT_LEADER_OR_FOLLOWER if leadership moved."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, timeout_ms) / 1000
    while True:
        pending = []
        for parts, i, part, end, epoch in waits:
            if part.leader_epoch != epoch or not part.online:
                parts[i] = msgspec.structs.replace(parts[i], error_code=E.NOT_LEADER_OR_FOLLOWER, base_offset=-1)
            elif part.hw < end:
                pending.append((parts, i, part, end, epoch))
        waits = pending
        remaining = deadline - loop.time()
        if not waits or remaining <= 0:
            break
        await cluster.wait_change(remaining)
    for parts, i, *_ in waits:
        parts[i] = msgspec.structs.replace(parts[i], error_code=E.REQUEST_TIMED_OUT, base_offset=-1,
                                           error_message="the ISR did not replicate the batch within the request's timeout")
    return _response(topics)


def _produce_partition(
    cluster: ListenerContext, broker: int, version: int, transactional_id: str | None, acks: int,
    topic: str, index: int, data: bytes | None,
) -> tuple[object, Partition | None]:
    """The partition's response, and the partition when the batch was written."""
    model = cluster.model

    def fail(code: int, message: str | None = None, leader: object = None,
             record_errors: Sequence[tuple[int, str]] = ()) -> tuple[object, None]:
        errors = [_RecordError(batch_index=i, batch_index_error_message=m) for i, m in record_errors]
        return _PartitionResponse(index=index, error_code=code, base_offset=-1, log_start_offset=-1, error_message=message,
                                  record_errors=errors, current_leader=leader or _LeaderIdAndEpoch()), None

    topic_id = model.topic_ids.get(topic)
    if topic_id is None or not 0 <= index < len(model.topics[topic_id].partitions):
        return fail(E.UNKNOWN_TOPIC_OR_PARTITION)
    configs = model.topics[topic_id].configs
    log_append_time = configs.get("message.timestamp.type") == "LogAppendTime"
    now_ms = int(time.time() * 1000)
    window = None if log_append_time else (now_ms - int(configs.get("message.timestamp.before.max.ms", MAX_LONG)),
                                           now_ms + int(configs.get("message.timestamp.after.max.ms", TIMESTAMP_AFTER_MAX_MS)))
    try:
        rb: ProducedBatch | BatchRejected = decode_produced(
            data or b"", version, f"{topic}-{index}", "compact" in configs.get("cleanup.policy", ""), window)
    except BatchRejected as exc:
        rb = exc
    if isinstance(rb, BatchRejected) and rb.request_level:  # Kafka's ProduceRequest.validateRecords, before the log
        return fail(rb.code, str(rb))
    if acks not in (-1, 0, 1):  # ReplicaManager.appendRecords, before the leader and the batch's own checks
        return fail(E.INVALID_REQUIRED_ACKS, f"acks must be -1, 0 or 1, got {acks}")
    state = model.topics[topic_id]
    part = state.partitions[index]
    if part.leader != broker:
        return fail(E.NOT_LEADER_OR_FOLLOWER, None, _LeaderIdAndEpoch(leader_id=part.leader, leader_epoch=part.leader_epoch))
    if state.read_only:
        return fail(E.READ_ONLY_TOPIC, f"{topic} is a mirror topic; it accepts produce once its mirror is STOPPED")
    if isinstance(rb, BatchRejected):
        return fail(rb.code, str(rb), record_errors=rb.record_errors)
    if rb.is_transactional:
        txn = model.txn_state.transactions.get(transactional_id or "")
        if txn is None or not txn.ongoing or part.tp not in txn.partitions or txn.producer_id != rb.producer_id:
            return fail(E.INVALID_TXN_STATE, f"{topic}-{index} is not part of an ongoing transaction of {transactional_id}")
    # LogAppendTime: the broker's clock stamps the batch (every record reads it), as Kafka's LogValidator does.
    append_time = -1
    attributes, timestamp = rb.attributes & ~ATTR_TIMESTAMP_TYPE, rb.max_timestamp
    if log_append_time:
        append_time = now_ms
        attributes, timestamp = attributes | ATTR_TIMESTAMP_TYPE, append_time
    try:
        written = model.produce_kafka_records(
            topic, index, model_payload(rb, attributes), rb.count, rb.last_offset_delta, rb.producer_id,
            rb.producer_epoch, rb.base_sequence, rb.is_transactional, timestamp, acks)
    except Exception as exc:  # noqa: BLE001 - the model's refusal is the client's error code
        return fail(E.code_of(exc), str(exc))
    return _PartitionResponse(index=index, error_code=E.NONE, base_offset=written.base_offset, log_append_time_ms=append_time,
                              log_start_offset=part.leader_log.log_start), part


HANDLERS = {0: produce}
