"""dump-log shows every batch: an emptied one, a damaged one (and goes on after it), and says
through its exit code that damage was found. No Java needed (tests/test_kafka_dump_log_text.py
diffs the same cases with Kafka's own tool)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from crc32c import crc32c

from records.cli import EXIT_DAMAGED, build_parser, main
from records.segments import Record, RecordBatch, build_batch, encode_segment

SEGMENT = "00000000000000000000.log"


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old, sys.stderr = sys.stderr, err
    try:
        code = main(["dump-log", *argv], out=out)
    finally:
        sys.stderr = old
    return code, out.getvalue(), err.getvalue()


def _emptied_and_full(tmp_path: Path) -> Path:
    """What the cleaner leaves of an idempotent producer's batch whose records were all
    superseded (its offsets and producer state, no records), then a batch with two records."""
    emptied = RecordBatch(base_offset=0, partition_leader_epoch=0, attributes=0, last_offset_delta=2,
                          base_timestamp=1000, max_timestamp=1000, producer_id=1, producer_epoch=0, base_sequence=0)  # fmt: skip
    full = build_batch([Record(0, 0, b"k", b"v"), Record(1, 0, b"k", b"w")], base_offset=3, base_timestamp=2000)
    path = tmp_path / SEGMENT
    path.write_bytes(encode_segment([emptied, full]))
    return path


def test_an_emptied_batch_is_shown(tmp_path: Path) -> None:
    path = _emptied_and_full(tmp_path)
    code, out, _ = _run(str(path), "--data")
    batches = [line for line in map(json.loads, out.splitlines()) if line.get("kind") == "batch"]
    assert code == 0 and [(b["baseOffset"], b["lastOffset"], b["count"], b["producerId"], b["isvalid"]) for b in batches] == [
        (0, 2, 0, 1, True), (3, 4, 2, -1, True)]  # fmt: skip
    code, out, _ = _run(str(path), "--format", "kafka")
    assert out.splitlines()[2] == (
        "baseOffset: 0 lastOffset: 2 count: 0 baseSequence: 0 lastSequence: 2 producerId: 1 producerEpoch: 0"
        " partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty"
        f" position: 0 CreateTime: 1000 size: 61 magic: 2 compresscodec: none crc: {crc32c(path.read_bytes()[21:61])}"
        " isvalid: true"
    )


@pytest.mark.parametrize(("at", "bits"), [(17, 0x80), (61 + 3, 0x01), (16, 2 ^ 7)], ids=["crc", "records", "magic"])
def test_a_damaged_batch_is_reported_and_passed(tmp_path: Path, at: int, bits: int) -> None:
    data = bytearray(_emptied_and_full(tmp_path).read_bytes())
    data[61 + at] ^= bits  # in the second batch (the first is 61 bytes)
    path = tmp_path / SEGMENT
    path.write_bytes(bytes(data) + encode_segment([build_batch([Record(0, 0, None, b"after")], base_offset=5, base_timestamp=0)]))
    code, out, err = _run(str(path), "--data")
    lines = [json.loads(line) for line in out.splitlines()]
    batches = [(b["baseOffset"], b["isvalid"], b["magic"]) for b in lines if b.get("kind") == "batch"]
    assert code == EXIT_DAMAGED and "batch at byte 61" in err
    magic = 7 if at == 16 else 2
    assert batches == [(0, True, 2), (3, at == 16, magic), (5, True, 2)]  # the CRC does not cover the magic byte
    assert [r["payload"] for r in lines if "offset" in r][-1] == "after"  # the dump went on
    code, text, _ = _run(str(path), "--format", "kafka")
    assert code == EXIT_DAMAGED and text.count("baseOffset:") == 3


def test_bytes_after_the_last_batch_are_reported_as_kafka_reports_them(tmp_path: Path) -> None:
    path = _emptied_and_full(tmp_path)
    path.write_bytes(path.read_bytes()[:-10])
    code, text, err = _run(str(path), "--format", "kafka", "--deep-iteration")
    assert code == EXIT_DAMAGED and "truncated batch at byte 61" in err
    assert text.splitlines()[-1] == f"Found {path.stat().st_size - 61} invalid bytes at the end of {SEGMENT}"


def test_the_help_documents_the_exit_codes() -> None:
    sub = next(a for a in build_parser()._subparsers._group_actions if a.dest == "command")  # type: ignore[union-attr]
    text = sub.choices["dump-log"].format_help()
    assert "3 damage found" in text and "2 bad usage" in text and "0 all read and sound" in text
