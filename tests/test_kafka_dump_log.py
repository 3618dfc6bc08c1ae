"""``kafka-records dump-log`` against Apache Kafka's own ``kafka-dump-log``, record for record.

Two ways: on the segments stored in tests/data/ (written by Apache Kafka 4.1.2, with Kafka's dump
of each beside it; runs everywhere), and on segments the session's Apache Kafka node writes
during this run (needs Java and the fetched jars; skipped with one reason otherwise, a failure
under KIP1279_REQUIRE_KAFKA=1). tests/kafka_yardstick.py says how the samples are made.
"""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_yardstick import (
    DATA_TOPIC,
    compare_dumps,
    copy_whole_batches,
    ensure_yardstick_activity,
    ours,
    record_types,
)
from reference_data import DATA

from records.cli import EXIT_DAMAGED
from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.brokers.kafka_jars import dump_log_segments

METADATA_DIR = DATA / "apache_kafka_cluster_metadata"
DATA_DIR = DATA / "apache_kafka_data"
SEGMENT = "00000000000000000000.log"

# What the controller must have written, for the comparison to cover what the issue names:
# topics, partitions, configs, ACLs, SCRAM users, features, a producer-ID block; and KRaft's own.
METADATA_TYPES = {
    "TOPIC_RECORD", "PARTITION_RECORD", "REMOVE_TOPIC_RECORD", "CONFIG_RECORD",
    "ACCESS_CONTROL_ENTRY_RECORD", "USER_SCRAM_CREDENTIAL_RECORD", "FEATURE_LEVEL_RECORD", "PRODUCER_IDS_RECORD",
    "REGISTER_BROKER_RECORD", "REGISTER_CONTROLLER_RECORD", "BROKER_REGISTRATION_CHANGE_RECORD",
    "BEGIN_TRANSACTION_RECORD", "END_TRANSACTION_RECORD", "NO_OP_RECORD",
    "LEADER_CHANGE", "KRAFT_VERSION", "KRAFT_VOTERS",
}  # fmt: skip


def _check_metadata(kafka_text: str, lines: list[dict[str, Any]]) -> None:
    assert compare_dumps(kafka_text, lines) == []
    assert METADATA_TYPES <= record_types(lines), METADATA_TYPES - record_types(lines)
    scram = [line for line in lines if isinstance(line["payload"], dict) and line["payload"]["type"] == "USER_SCRAM_CREDENTIAL_RECORD"]
    assert {s["payload"]["data"]["name"] for s in scram} >= {"alice", "bob"}


def _check_data(kafka_text: str, lines: list[dict[str, Any]]) -> None:
    assert compare_dumps(kafka_text, lines, data=True) == []
    data = [line for line in lines if line["keySize"] >= 0 or line["valueSize"] >= 0]
    assert {line["compressCodec"] for line in data} == {"none", "gzip", "snappy", "lz4", "zstd"}
    assert {line["payload"]["type"] for line in lines if line["isControl"]} == {"COMMIT", "ABORT"}
    idempotent = [line for line in lines if not line["isControl"] and line["producerId"] >= 0 and line["baseSequence"] >= 0]
    assert any(line["isTransactional"] for line in idempotent) and any(not line["isTransactional"] for line in idempotent)
    assert any(line["payload"] is None and line["key"] == "k0" for line in lines)  # the tombstone
    assert any(line["headerKeys"] == ["h", "empty"] for line in lines)


# --- the stored samples (no Java needed) -----------------------------------------------------


def test_stored_cluster_metadata_segment_dumps_as_kafka_does() -> None:
    _check_metadata((METADATA_DIR / "kafka-dump.txt").read_text(), ours(METADATA_DIR / SEGMENT, "--include-secrets"))


def test_stored_data_segment_dumps_as_kafka_does() -> None:
    _check_data((DATA_DIR / "kafka-dump.txt").read_text(), ours(DATA_DIR / SEGMENT, "--data"))


def test_the_comparison_sees_a_difference() -> None:
    kafka_text = (DATA_DIR / "kafka-dump.txt").read_text()
    lines = ours(DATA_DIR / SEGMENT, "--data")
    for field, value in (("crc", 1), ("sequence", 99), ("payload", "other"), ("compressCodec", "none"), ("timestamp", 0)):
        changed = copy.deepcopy(lines)
        index = next(i for i, line in enumerate(changed) if line[field] != value and not line["isControl"])
        changed[index][field] = value
        assert any(f": {field}: Kafka" in d for d in compare_dumps(kafka_text, changed, data=True)), field
    assert compare_dumps(kafka_text, lines[:-1], data=True)[0].startswith("Kafka dumped")
    meta_text = (METADATA_DIR / "kafka-dump.txt").read_text()
    meta = ours(METADATA_DIR / SEGMENT, "--include-secrets")
    scram = next(line for line in meta if isinstance(line["payload"], dict) and line["payload"]["type"] == "USER_SCRAM_CREDENTIAL_RECORD")
    scram["payload"]["data"]["iterations"] += 1
    assert len(compare_dumps(meta_text, meta)) == 1


def test_dump_log_redacts_scram_key_material_by_default() -> None:
    lines = ours(METADATA_DIR / SEGMENT)
    scram = [line["payload"]["data"] for line in lines if isinstance(line["payload"], dict)
             and line["payload"]["type"] == "USER_SCRAM_CREDENTIAL_RECORD"]  # fmt: skip
    assert scram and all(s["salt"] == s["storedKey"] == s["serverKey"] == "(redacted)" for s in scram)


# --- live: segments the session's Apache Kafka writes now -------------------------------------


@pytest.fixture(scope="module")
def written_segments(apache_kafka: ApacheKafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The shared node's metadata log and a data topic, after the yardstick's admin calls and produces."""
    ensure_yardstick_activity(apache_kafka.bootstrap)
    yield tmp_path_factory.mktemp("segments")


def test_live_cluster_metadata_log_dumps_as_kafka_does(apache_kafka: ApacheKafkaCluster, written_segments: Path) -> None:
    segment = copy_whole_batches(apache_kafka.metadata_log_dir / SEGMENT, written_segments / "meta" / SEGMENT)
    kafka_text = dump_log_segments([segment], "--cluster-metadata-decoder")
    _check_metadata(kafka_text, ours(segment, "--include-secrets"))


def test_live_data_segment_dumps_as_kafka_does(apache_kafka: ApacheKafkaCluster, written_segments: Path) -> None:
    node = apache_kafka.nodes[0]
    segment = copy_whole_batches(node.log_dir / f"{DATA_TOPIC}-0" / SEGMENT, written_segments / "data" / SEGMENT)
    kafka_text = dump_log_segments([segment], "--deep-iteration", "--print-data-log")
    _check_data(kafka_text, ours(segment, "--data"))


def test_a_corrupt_compressed_batch_is_reported_and_the_dump_goes_on(tmp_path: Path) -> None:
    from crc32c import crc32c

    from records.cli import main
    from records.segments import iter_segment

    data = bytearray((DATA_DIR / SEGMENT).read_bytes())
    position = 0
    for batch in iter_segment(bytes(data), decompress=True):
        if batch.compression == 3:  # lz4
            break
        position += batch.size_in_bytes
    end = position + batch.size_in_bytes
    data[position + 61 : end] = bytes(b ^ 0x5A for b in data[position + 61 : end])  # garble the frame
    data[position + 17 : position + 21] = crc32c(bytes(data[position + 21 : end])).to_bytes(4, "big")  # a valid CRC
    bad = tmp_path / SEGMENT
    bad.write_bytes(bytes(data))
    out = io.StringIO()
    assert main(["dump-log", "--data", str(bad)], out=out) == EXIT_DAMAGED
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    offsets = [line["offset"] for line in lines if "offset" in line]
    assert [line["baseOffset"] for line in lines if line.get("kind") == "batch"].count(batch.base_offset) == 1  # still shown
    lz4 = set(range(batch.base_offset, batch.last_offset + 1))
    assert not lz4 & set(offsets) and max(offsets) > batch.last_offset  # skipped, and later batches printed
