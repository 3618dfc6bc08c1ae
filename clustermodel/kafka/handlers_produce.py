"""Produce: acks 0/1/all, CRC-checked v2 batches, idempotent and transactional producers."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import msgspec

from records.kafka_envelope import Request
from records.registry import default_schemas

from . import errors as E
from .batches import BatchRejected, decode_produced, model_payload

if TYPE_CHECKING:
    from ..replica import Partition
    from .context import ListenerContext

S = default_schemas()
_Response = S.struct("ProduceResponse")
_TopicResponse = S.nested("ProduceResponse", "TopicProduceResponse")
_PartitionResponse = S.nested("ProduceResponse", "PartitionProduceResponse")
_LeaderIdAndEpoch = S.nested("ProduceResponse", "LeaderIdAndEpoch")


def produce(cluster: ListenerContext, broker: int, req: Request) -> object:
    body = req.body
    topics: list[tuple[object, list[object]]] = []
    waits: list[tuple[list[object], int, Partition, int, int]] = []
    for t in body.topic_data:
        parts: list[object] = []
        for pd in t.partition_data:
            response, part = _produce_partition(cluster, broker, body.transactional_id, body.acks, t.name, pd.index, pd.records)
            if part is not None and body.acks == -1 and part.hw < part.leader_log.leo:
                waits.append((parts, len(parts), part, part.leader_log.leo, part.leader_epoch))
            parts.append(response)
        topics.append((t, parts))
    cluster.notify()
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
    cluster: ListenerContext, broker: int, transactional_id: str | None, acks: int,
    topic: str, index: int, data: bytes | None,
) -> tuple[object, Partition | None]:
    """The partition's response, and the partition when the batch was written."""
    model = cluster.model

    def fail(code: int, message: str | None = None, leader: object = None) -> tuple[object, None]:
        return _PartitionResponse(index=index, error_code=code, base_offset=-1, log_start_offset=-1,
                                  error_message=message, current_leader=leader or _LeaderIdAndEpoch()), None

    topic_id = model.topic_ids.get(topic)
    if topic_id is None or not 0 <= index < len(model.topics[topic_id].partitions):
        return fail(E.UNKNOWN_TOPIC_OR_PARTITION)
    state = model.topics[topic_id]
    part = state.partitions[index]
    if part.leader != broker:
        return fail(E.NOT_LEADER_OR_FOLLOWER, None, _LeaderIdAndEpoch(leader_id=part.leader, leader_epoch=part.leader_epoch))
    if state.read_only:
        return fail(E.READ_ONLY_TOPIC, f"{topic} is a mirror topic; it accepts produce once its mirror is STOPPED")
    if acks not in (-1, 0, 1):
        return fail(E.INVALID_REQUEST, f"acks must be -1, 0 or 1, got {acks}")
    try:
        batches = decode_produced(data or b"")
    except BatchRejected as exc:
        return fail(exc.code, str(exc))
    if not batches:
        return fail(E.INVALID_REQUEST, "no record batch")
    first_offset = -1
    for rb in batches:
        if rb.is_control:
            return fail(E.INVALID_REQUEST, "clients may not produce control batches")
        if not rb.count:
            return fail(E.INVALID_REQUEST, "empty record batch")
        if rb.is_transactional:
            txn = model.txn_state.transactions.get(transactional_id or "")
            if txn is None or not txn.ongoing or part.tp not in txn.partitions or txn.producer_id != rb.producer_id:
                return fail(E.INVALID_TXN_STATE, f"{topic}-{index} is not part of an ongoing transaction of {transactional_id}")
        try:
            written = model.produce_kafka_records(
                topic, index, model_payload(rb), rb.count, rb.last_offset_delta, rb.producer_id,
                rb.producer_epoch, rb.base_sequence, rb.is_transactional, rb.max_timestamp, acks)
        except Exception as exc:  # noqa: BLE001 - the model's refusal is the client's error code
            return fail(E.code_of(exc), str(exc))
        if first_offset < 0:
            first_offset = written.base_offset
    return _PartitionResponse(index=index, error_code=E.NONE, base_offset=first_offset, log_append_time_ms=-1,
                              log_start_offset=part.leader_log.log_start), part


HANDLERS = {0: produce}
