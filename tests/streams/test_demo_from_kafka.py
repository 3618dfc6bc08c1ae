"""The --from-kafka verdict (``streams.demo.from_kafka.verdict_problems``) on tampered evidence,
the open transactions it derives from a source's log, and the client accounting's allowance for
a source whose read_committed Fetch leaves out open transactions."""

from __future__ import annotations

import struct
import msgspec
import pytest
from crc32c import crc32c

from coordinator.ports import Batch, ControlType, PartitionOffsets
from streams.demo import clients as dc
from streams.demo.from_kafka import PartitionEvidence, open_transactions, verdict_problems

rep = msgspec.structs.replace
_HEADER = struct.Struct(">qiibIhiqqqhii")


def raw(base: int, count: int, pid: int = -1, txn: bool = False, control: bool = False, body: bytes = b"records") -> bytes:
    """A RecordBatch v2 with a valid CRC32C (the records section is opaque here)."""
    attrs = (0x10 if txn else 0) | (0x20 if control else 0)
    header = _HEADER.pack(base, 0, -1, 2, 0, attrs, count - 1, 1000, 1000, pid, 0 if pid >= 0 else -1, 0, count)
    data = bytearray(header + body)
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def batch(base: int, count: int, pid: int = -1, txn: bool = False, ctype: ControlType | None = None,
          payload: bytes | None = None) -> Batch:  # fmt: skip
    control = ctype is not None
    return Batch(base_offset=base, last_offset=base + count - 1, leader_epoch=-1 if not control else 0, producer_id=pid,
                 producer_epoch=0 if pid >= 0 else -1, base_sequence=0, is_transactional=txn, is_control=control,
                 control_type=ctype, timestamp=1000, record_count=count,
                 payload=payload if payload is not None else raw(base, count, pid, txn, control))  # fmt: skip


SOURCE = [batch(0, 3), batch(3, 2, pid=7, txn=True), batch(5, 1, pid=7, txn=True, ctype=ControlType.COMMIT),
          batch(6, 2, pid=9, txn=True), batch(8, 1)]  # producer 9's transaction is left open: LSO 6  # fmt: skip
# B after the failover: the source's batches, the stop's ABORT of producer 9 and its PID reset,
# then what B's producers wrote.
B_LOG = [*SOURCE, batch(9, 1, pid=9, txn=True, ctype=ControlType.ABORT, payload=b"model marker"),
         batch(10, 1, pid=-1, ctype=ControlType.MIRROR_PID_RESET, payload=b"model reset"), batch(11, 4)]  # fmt: skip
COMMITTED = [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]


def evidence(**changes: object) -> PartitionEvidence:
    good = PartitionEvidence(name="orders-0", source_batches=list(SOURCE),
                             source_offsets=PartitionOffsets(log_start=0, lso=6, hw=9, leo=9, leader_epoch=0),
                             source_committed=list(COMMITTED), source_epoch=0,
                             b_at_lag0=PartitionOffsets(log_start=0, lso=6, hw=9, leo=9, leader_epoch=11),
                             b_committed=list(COMMITTED), b_log=list(B_LOG), b_epoch=11)  # fmt: skip
    return good._replace(**changes)


def test_untampered_evidence_passes() -> None:
    assert verdict_problems([evidence()], []) == []
    assert [(o.producer_id, o.first_offset) for o in open_transactions(SOURCE)] == [(9, 6)]


def _flip(payload: bytes, at: int) -> bytes:
    return payload[:at] + bytes([payload[at] ^ 1]) + payload[at + 1:]


@pytest.mark.parametrize(("tamper", "expected"), [
    # a byte of a record changed on B, CRC left as it was: bytes differ and the CRC no longer holds
    ({"b_log": [rep(B_LOG[0], payload=_flip(B_LOG[0].payload, 65)), *B_LOG[1:]]}, "batch bytes differ"),
    ({"b_log": [rep(B_LOG[0], payload=_flip(B_LOG[0].payload, 65)), *B_LOG[1:]]}, "CRC32C mismatch"),
    # the CRC field itself differs
    ({"b_log": [rep(B_LOG[0], payload=_flip(B_LOG[0].payload, 18)), *B_LOG[1:]]}, "CRCs are not the source's"),
    # a batch missing on B, or at another offset, or with other producer fields
    ({"b_log": [B_LOG[0], *B_LOG[2:]]}, "are not the source's"),
    ({"b_log": [rep(B_LOG[0], producer_id=5), *B_LOG[1:]]}, "are not the source's"),
    ({"b_at_lag0": PartitionOffsets(log_start=0, lso=9, hw=9, leo=9, leader_epoch=11)}, "B's LSO 9 at lag 0"),
    ({"b_at_lag0": PartitionOffsets(log_start=0, lso=6, hw=8, leo=9, leader_epoch=11)}, "B's HW 8 at lag 0"),
    ({"b_committed": COMMITTED[:-1]}, "read_committed differs"),
    ({"b_committed": [*COMMITTED[:-1], (4, b"x")]}, "read_committed differs"),
    # the open transaction not aborted on B, or aborted twice, or committed
    ({"b_log": [*SOURCE, B_LOG[-2], B_LOG[-1]]}, "expected one ABORT"),
    ({"b_log": [*SOURCE, B_LOG[-3], batch(10, 1, pid=9, txn=True, ctype=ControlType.ABORT), rep(B_LOG[-2], base_offset=11)]},
     "expected one ABORT"),
    ({"b_log": [*SOURCE, rep(B_LOG[-3], control_type=ControlType.COMMIT), *B_LOG[-2:]]}, "expected one ABORT"),
    ({"b_epoch": -1}, "DLE -1 < SLE 0"),
    ({"source_offsets": PartitionOffsets(log_start=0, lso=7, hw=9, leo=9, leader_epoch=0)}, "the source's LSO 7"),
    ({"source_batches": SOURCE[:-1]}, "do not reach its HW"),
])  # fmt: skip
def test_each_tampering_fails_the_verdict(tamper: dict[str, object], expected: str) -> None:
    problems = verdict_problems([evidence(**tamper)], [])
    assert any(expected in p for p in problems), problems


def test_no_open_transaction_and_client_problems_fail_it() -> None:
    closed = [*SOURCE[:3], rep(SOURCE[4], base_offset=6, last_offset=6, payload=raw(6, 1))]
    ev = evidence(source_batches=closed, b_log=closed, source_offsets=PartitionOffsets(0, 7, 7, 7, 0),
                  b_at_lag0=PartitionOffsets(0, 7, 7, 7, 11))  # fmt: skip
    assert verdict_problems([ev], []) == ["no transaction was open on the source at the failover"]
    assert verdict_problems([evidence()], ["clients: 1 gap"]) == ["clients: 1 gap"]


def test_account_counts_records_the_source_never_served_below_the_last_commit_only() -> None:
    tp = ("orders", 0)
    produced = [dc.Produced(*tp, 0, b"p0", "plain"), dc.Produced(*tp, 1, b"t1", "committed"),
                dc.Produced(*tp, 2, b"p2", "plain"), dc.Produced(*tp, 3, b"t3", "committed"),
                dc.Produced(*tp, 4, b"p4", "plain")]  # fmt: skip
    on_a = [dc.Consumed(*tp, 0, b"p0"), dc.Consumed(*tp, 2, b"p2")]  # offset 1 never served by the source
    on_b = [dc.Consumed(*tp, 4, b"p4")]  # offset 3 (past the commit) missed across the switch
    strict = dc.account(produced, on_a, on_b, {tp: 3}, {tp: 3}, {tp: 5})
    assert strict.gaps == 2 and strict.skipped_by_source == 0
    lenient = dc.account(produced, on_a, on_b, {tp: 3}, {tp: 3}, {tp: 5}, source_skips_open_transactions=True)
    assert lenient.gaps == 1 and lenient.skipped_by_source == 1
    assert any("never read (gaps): orders-0@3" in p for p in lenient.problems)
    # a plain record the group never read below its commit is a gap all the same
    lost_plain = dc.account(produced, on_a[1:], [dc.Consumed(*tp, 3, b"t3"), *on_b], {tp: 3}, {tp: 3}, {tp: 5},
                            source_skips_open_transactions=True)  # fmt: skip
    assert lost_plain.gaps == 1 and lost_plain.skipped_by_source == 1

