"""Transaction coordinator state of a model cluster: producer IDs, transactional IDs, sequences."""

from __future__ import annotations

import msgspec

from coordinator.ports import GroupOffset, TopicPartition


class ProducerIdentity(msgspec.Struct, frozen=True):
    """InitProducerId's answer."""

    producer_id: int
    producer_epoch: int


class TxnState(msgspec.Struct):
    """One transactional ID: its producer, and the partitions of the open transaction."""

    producer_id: int
    producer_epoch: int
    partitions: list[TopicPartition] = []
    ongoing: bool = False
    # TxnOffsetCommit's offsets, written to their groups when the transaction commits.
    pending_offsets: list[GroupOffset] = []


class TxnCoordinatorState(msgspec.Struct):
    next_producer_id: int = 1000
    transactions: dict[str, TxnState] = {}
    # Next sequence per "producer_id:topic_id-partition" for the model's own producers.
    sequences: dict[str, int] = {}

    def next_sequence(self, producer_id: int, tp: TopicPartition, count: int) -> int:
        key = f"{producer_id}:{tp}"
        seq = self.sequences.get(key, 0)
        self.sequences[key] = (seq + count) & 0x7FFFFFFF
        return seq
