"""Idempotent and transactional producers on a model cluster, with the transaction coordinator.

InitProducerId hands out producer IDs; a transactional ID keeps its producer ID and gets a new
epoch on re-init, which aborts its open transaction first (fencing, as Kafka's coordinator).
Commit and abort write COMMIT/ABORT markers to every partition of the transaction.
"""

from __future__ import annotations

from coordinator.ports import Batch, GroupOffset, NotLeader, TopicPartition

from .core import ClusterCore
from .groups import GroupState
from .errors import TransactionError
from .producers import InvalidProducerEpoch
from .journal import journaled
from .transactions_state import ProducerIdentity, TxnState


class TransactionsMixin(ClusterCore):
    """Producer-side operations; the partitions' producer state does the validation."""

    @journaled
    def init_producer_id(self, transactional_id: str | None = None) -> ProducerIdentity:
        """A new producer ID (epoch 0), or for a known transactional ID the same ID with epoch + 1."""
        state = self.txn_state
        if transactional_id is not None and transactional_id in state.transactions:
            txn = state.transactions[transactional_id]
            # Bump first: the ABORT markers carry the new epoch, so the old producer is fenced.
            txn.producer_epoch += 1
            if txn.ongoing:
                self._end_transaction(txn, commit=False)
            for key in [k for k in state.sequences if k.startswith(f"{txn.producer_id}:")]:
                del state.sequences[key]
            return ProducerIdentity(txn.producer_id, txn.producer_epoch)
        pid = state.next_producer_id
        state.next_producer_id += 1
        if transactional_id is not None:
            state.transactions[transactional_id] = TxnState(pid, 0)
        return ProducerIdentity(pid, 0)

    def _txn(self, transactional_id: str) -> TxnState:
        txn = self.txn_state.transactions.get(transactional_id)
        if txn is None:
            raise TransactionError(f"unknown transactional id {transactional_id}")
        return txn

    @journaled
    def begin_transaction(self, transactional_id: str) -> None:
        txn = self._txn(transactional_id)
        if txn.ongoing:
            raise TransactionError(f"{transactional_id} already has an open transaction")
        txn.ongoing = True
        txn.partitions = []

    @journaled
    def produce_transactional(
        self, transactional_id: str, topic: str, partition: int, records: list[tuple[bytes | None, bytes | None]]
    ) -> Batch:
        """Write a batch inside the open transaction (AddPartitionsToTxn happens implicitly)."""
        txn = self._txn(transactional_id)
        if not txn.ongoing:
            raise TransactionError(f"{transactional_id} has no open transaction")
        tp = self.tp(topic, partition)
        if tp not in txn.partitions:
            txn.partitions.append(tp)
        return self._produce_with_sequence(txn.producer_id, txn.producer_epoch, tp, topic, records, True)

    @journaled
    def produce_idempotent(
        self, producer_id: int, producer_epoch: int, topic: str, partition: int,
        records: list[tuple[bytes | None, bytes | None]],
    ) -> Batch:
        """An idempotent producer's batch with the next sequence for the partition."""
        tp = self.tp(topic, partition)
        return self._produce_with_sequence(producer_id, producer_epoch, tp, topic, records, False)

    def _produce_with_sequence(
        self, pid: int, epoch: int, tp: TopicPartition, topic: str,
        records: list[tuple[bytes | None, bytes | None]], transactional: bool,
    ) -> Batch:
        key = f"{pid}:{tp}"
        seq = self.txn_state.sequences.get(key, 0)
        batch = self.produce(topic, tp.partition, records, pid, epoch, seq, transactional)
        self.txn_state.sequences[key] = (seq + len(records)) & 0x7FFFFFFF
        return batch

    @journaled
    def commit_transaction(self, transactional_id: str) -> list[Batch]:
        """Write COMMIT markers to every partition of the open transaction."""
        return self._end_transaction(self._txn(transactional_id), commit=True)

    @journaled
    def abort_transaction(self, transactional_id: str) -> list[Batch]:
        """Write ABORT markers to every partition of the open transaction."""
        return self._end_transaction(self._txn(transactional_id), commit=False)

    def _end_transaction(self, txn: TxnState, commit: bool) -> list[Batch]:
        if not txn.ongoing:
            raise TransactionError(f"producer {txn.producer_id} has no open transaction")
        parts = [self._topic_partition(tp)[1] for tp in txn.partitions if tp.topic_id in self.topics]
        for part in parts:
            if not part.online:
                # The real coordinator retries until leaders are back; the model refuses up front.
                raise NotLeader(part.tp, part.leader, part.leader_epoch)
        markers = [self._write_txn_marker(p, commit, txn.producer_id, txn.producer_epoch) for p in parts]
        txn.ongoing = False
        txn.partitions = []
        return markers

    # ---------------------------------------------------------------- Kafka clients' transaction calls

    def _client_txn(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnState:
        """The transaction of a Kafka client's request; an old epoch is fenced, as Kafka's coordinator does."""
        txn = self._txn(transactional_id)
        if producer_id != txn.producer_id or producer_epoch < txn.producer_epoch:
            raise InvalidProducerEpoch(
                f"{transactional_id}: producer {producer_id} epoch {producer_epoch} is fenced "
                f"(current {txn.producer_id} epoch {txn.producer_epoch})"
            )
        if producer_epoch > txn.producer_epoch:
            raise TransactionError(f"{transactional_id}: unknown producer epoch {producer_epoch}")
        return txn

    @journaled
    def add_partitions_to_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> None:
        """AddPartitionsToTxn: the first call begins the transaction."""
        txn = self._client_txn(transactional_id, producer_id, producer_epoch)
        tps = [self.tp(topic, partition) for topic, partition in partitions]
        if not txn.ongoing:
            txn.ongoing = True
            txn.partitions = []
            txn.pending_offsets = []
        for tp in tps:
            if tp not in txn.partitions:
                txn.partitions.append(tp)

    @journaled
    def add_offsets_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None:
        """AddOffsetsToTxn: the group's offsets become part of the transaction (it begins if needed)."""
        txn = self._client_txn(transactional_id, producer_id, producer_epoch)
        if not txn.ongoing:
            txn.ongoing = True
            txn.partitions = []
            txn.pending_offsets = []

    @journaled
    def txn_offset_commit(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
        offsets: list[tuple[str, int, int, int] | tuple[str, int, int, int, str]],
    ) -> None:
        """TxnOffsetCommit: (topic, partition, offset, leader epoch[, metadata]) held until EndTxn commits them."""
        txn = self._client_txn(transactional_id, producer_id, producer_epoch)
        if not txn.ongoing:
            raise TransactionError(f"{transactional_id} has no open transaction")
        for topic, partition, offset, epoch, *metadata in offsets:
            tp = self.tp(topic, partition)
            txn.pending_offsets.append(GroupOffset(group_id, tp.topic_id, partition, offset, epoch, *metadata))

    @journaled
    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> list[Batch]:
        """EndTxn: markers on every partition; on commit the pending offsets reach their groups.

        A transaction that never began (no partitions, no offsets) ends with nothing to write.
        """
        txn = self._client_txn(transactional_id, producer_id, producer_epoch)
        if not txn.ongoing:
            return []
        pending = list(txn.pending_offsets)
        markers = self._end_transaction(txn, commit)
        txn.pending_offsets = []
        if commit:
            for o in pending:
                group = self.groups.get(o.group_id)
                if group is None:
                    group = self.groups[o.group_id] = GroupState(o.group_id)
                group.commit(o)
        return markers

    def open_transactional_ids(self) -> list[str]:
        """Transactional IDs with an open transaction (workloads leave some open on purpose)."""
        return sorted(t for t, s in self.txn_state.transactions.items() if s.ongoing)
