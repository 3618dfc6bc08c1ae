"""KRaft framing, the segment dump, and the records CLI."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from records.cli import main
from records.framing import FrameError, MetadataRecordSerde
from records.redact import REDACTED
from records.registry import default_schemas
from reference_data import KRAFT_SEGMENT, kafka_metadata_dir, kip1279_dir, schema_dirs

VECTOR = KRAFT_SEGMENT
TOPIC_ID = uuid.UUID("bfd99e5e-3235-4552-81f8-d4af1741970c")
SERDE = MetadataRecordSerde(default_schemas())


def test_framed_topic_record_bytes() -> None:
    topic = default_schemas().struct("TopicRecord")(name="foo", topic_id=TOPIC_ID)
    wire = SERDE.encode(topic, 0)
    assert wire == b"\x01\x02\x00" + b"\x04foo" + TOPIC_ID.bytes + b"\x00"
    record = SERDE.decode(wire)
    assert (record.message, record.version, record.api_key) == (topic, 0, 2)
    assert SERDE.to_json(record) == {"type": "TOPIC_RECORD", "version": 0, "data": {"name": "foo", "topicId": "v9meXjI1RVKB-NSvF0GXDA"}}


def test_mirror_topic_state_change_record_frame() -> None:
    change = default_schemas().struct("MirrorTopicStateChangeRecord")(topic_id=TOPIC_ID, mirror_name="a-to-b", desired_state=1)
    wire = SERDE.encode(change, 0)
    assert wire[:3] == b"\x01\x1d\x00"  # frame 1, apiKey 29, v0
    assert SERDE.decode(wire).message == change


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (b"\x00\x02\x00", r"byte 0: unsupported frame version 0"),
        (b"\x02\x02\x00", r"byte 0: unsupported frame version 2"),
        (b"\x01\x80\x80\x02\x00", r"byte 1: apiKey 32768 is too large for an int16"),
        (b"\x01\x02\x80\x80\x02", r"byte 2: version 32768 is too large"),
        (b"\x01\x7f\x00", r"unknown metadata record apiKey 127"),
        (b"\x01\x02\x05", r"TopicRecord has no version 5"),
        (b"\x01", r"byte 1: bad frame header: truncated varint"),
        (b"\x01\x02\x00\x04fo", r"field Name, byte 3: TopicRecord v0: truncated"),
        (b"\x01\x02\x00\x04foo" + TOPIC_ID.bytes + b"\x00\xde\xad", r"byte 24: 2 bytes of garbage after the TopicRecord body"),
    ],
)
def test_frame_errors(wire: bytes, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        SERDE.decode(wire)


EXPECTED_DUMP = [
    (1, 1, 0, 2660385008, {"type": "BEGIN_TRANSACTION_RECORD", "version": 0, "data": {"name": "Bootstrap records"}}),
    (2, 1, 0, 2660385008, {"type": "FEATURE_LEVEL_RECORD", "version": 0, "data": {"name": "metadata.version", "featureLevel": 20}}),
    (3, 1, 0, 2660385008, {"type": "ZK_MIGRATION_STATE_RECORD", "version": 0, "data": {"zkMigrationState": 0}}),
    (4, 1, 0, 2660385008, {"type": "END_TRANSACTION_RECORD", "version": 0, "data": {}}),
    (34, 1, 145, 161276315, {"type": "TOPIC_RECORD", "version": 0, "data": {"name": "foo", "topicId": "v9meXjI1RVKB-NSvF0GXDA"}}),
    (35, 1, 145, 161276315, {
        "type": "PARTITION_RECORD", "version": 1,
        "data": {"partitionId": 0, "topicId": "v9meXjI1RVKB-NSvF0GXDA", "replicas": [1], "isr": [1], "removingReplicas": [],
                 "addingReplicas": [], "leader": 1, "leaderEpoch": 0, "partitionEpoch": 0, "directories": ["AiSXPLrdRM-HREWplhnaNA"]},
    }),
]


def _run(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    out = io.StringIO()
    err = io.StringIO()
    old_in, old_err = sys.stdin, sys.stderr
    sys.stdin, sys.stderr = io.StringIO(stdin), err
    try:
        code = main(argv, out)
    finally:
        sys.stdin, sys.stderr = old_in, old_err
    return code, out.getvalue(), err.getvalue()


def _records(out: str) -> list[dict]:
    """dump-log's record lines (its batch lines left out)."""
    return [r for r in map(json.loads, out.splitlines()) if r.get("kind") != "batch"]


@pytest.mark.parametrize("schemas", [None, str(kafka_metadata_dir())])
def test_dump_log_of_a_real_kraft_segment(schemas: str | None) -> None:
    code, out, err = _run(["dump-log", str(VECTOR)] + (["--schemas", schemas] if schemas else []))
    assert (code, err) == (0, "")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(r["offset"], r["partitionLeaderEpoch"], r["position"], r["crc"], r["payload"]) for r in lines if "offset" in r] == EXPECTED_DUMP
    assert [(b["position"], b["isvalid"]) for b in lines if b.get("kind") == "batch"] == [(0, True), (145, True)]


def test_dump_log_reports_a_crc_mismatch_after_the_good_batches(tmp_path: Path) -> None:
    data = bytearray(VECTOR.read_bytes())
    data[200] ^= 0xFF  # inside the second batch
    broken = tmp_path / "broken.log"
    broken.write_bytes(bytes(data))
    code, out, err = _run(["dump-log", str(broken)])
    assert code == 3  # damage found; the damaged batch is shown, as Kafka shows it
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(b["position"], b["isvalid"]) for b in lines if b.get("kind") == "batch"] == [(0, True), (145, False)]
    assert [r["offset"] for r in lines if "offset" in r][:4] == [1, 2, 3, 4]
    assert "batch at byte 145" in err and "CRC mismatch" in err


def test_dump_log_reports_truncation(tmp_path: Path) -> None:
    cut = tmp_path / "cut.log"
    cut.write_bytes(VECTOR.read_bytes()[:250])
    code, out, err = _run(["dump-log", str(cut)])
    assert code == 3 and len([line for line in out.splitlines() if '"kind": "batch"' not in line]) == 4
    assert "105 invalid bytes at the end, from byte 145" in err and "truncated batch at byte 145" in err


def test_dump_log_keeps_going_past_an_undecodable_value(tmp_path: Path) -> None:
    from records.segments import Record, build_batch, encode_segment

    good = SERDE.encode(default_schemas().struct("TopicRecord")(name="t", topic_id=TOPIC_ID), 0)
    batch = build_batch(
        [Record(0, 0, None, b"\x01\x7f\x00"), Record(1, 0, None, good)], base_offset=0, base_timestamp=0, partition_leader_epoch=3
    )
    path = tmp_path / "poison.log"
    path.write_bytes(encode_segment([batch]))
    code, out, err = _run(["dump-log", str(path)])
    lines = [json.loads(line) for line in out.splitlines() if '"kind": "batch"' not in line]
    assert code == 3 and len(lines) == 2
    assert "unknown metadata record apiKey 127" in lines[0]["payloadError"]
    assert lines[1]["payload"]["type"] == "TOPIC_RECORD"
    assert "offset 0" in err


def test_dump_log_control_batches(tmp_path: Path) -> None:
    from records.segments import abort_marker_batch, encode_segment, mirror_pid_reset_batch

    path = tmp_path / "control.log"
    path.write_bytes(encode_segment([
        abort_marker_batch(base_offset=0, producer_id=7, producer_epoch=1, coordinator_epoch=5, timestamp=0),
        mirror_pid_reset_batch(base_offset=1, source_cluster_id="cluster-a", timestamp=0),
    ]))
    code, out, err = _run(["dump-log", str(path)])
    assert (code, err) == (0, "")
    payloads = [json.loads(line)["payload"] for line in out.splitlines() if '"kind": "batch"' not in line]
    assert payloads[0] == {"type": "ABORT", "version": 0, "data": {"coordinatorEpoch": 5}}
    assert payloads[1]["type"] == "MIRROR_PID_RESET"
    assert payloads[1]["data"] == {"version": 0, "sourceClusterId": "cluster-a"}


@pytest.mark.parametrize("folder", [None, *schema_dirs().values()])
def test_validate(folder: Path | None) -> None:
    code, out, err = _run(["validate"] + (["--schemas", str(folder)] if folder else []))
    assert (code, err) == (0, "")
    assert "valid, 0 with errors" in out


def test_validate_reports_every_error(tmp_path: Path) -> None:
    for name in ("A", "B"):
        (tmp_path / f"{name}.json").write_text('{"name": "%s", "type": "metadata"}' % name)
    code, _, err = _run(["validate", "--schemas", str(tmp_path)])
    assert code == 2
    assert err.count("error: ") == 2 and "A.json" in err and "B.json" in err


def test_encode_decode_round_trip_through_the_cli() -> None:
    data = {"name": "foo", "topicId": "v9meXjI1RVKB-NSvF0GXDA"}
    code, out, _ = _run(["encode", "--type", "TopicRecord", "--version", "0", "--frame"], json.dumps(data))
    assert code == 0
    framed = out.strip()
    assert framed == "01020004666f6fbfd99e5e3235455281f8d4af1741970c00"
    code, out, _ = _run(["decode", "--frame", framed])
    assert json.loads(out) == {"type": "TOPIC_RECORD", "version": 0, "data": data}
    # decode --frame's output feeds encode --frame unchanged
    code, again, _ = _run(["encode", "--type", "TopicRecord", "--version", "0", "--frame"], out)
    assert again.strip() == framed
    code, out, _ = _run(["decode", "--type", "TopicRecord", "--version", "0", framed[6:]])
    assert json.loads(out) == data


def test_decode_with_reference_schemas_unchanged() -> None:
    code, out, err = _run(["decode", "--schemas", str(kip1279_dir()), "--type", "MirrorPartitionStateKey", "--version", "0", "0002616200000000000000000000000000000001" + "00000003"])
    assert (code, err) == (0, "")
    assert json.loads(out) == {"mirrorName": "ab", "topicId": "AAAAAAAAAAAAAAAAAAAAAQ", "partition": 3}


@pytest.mark.parametrize(
    ("argv", "stdin", "message"),
    [
        (["decode", "--frame", "zz"], "", "input is not hex: character 'z' at position 0"),
        (["decode", "--frame", "010200"], "", "field Name, byte 3"),
        (["decode", "--frame", "00"], "", "unsupported frame version 0"),
        (["decode", "--type", "TopicRecord", "--version", "0", "04666f6f"], "", "field TopicId, byte 4: truncated"),
        (["decode", "--type", "Nope", "--version", "0", "00"], "", "no message named 'Nope'"),
        (["encode", "--type", "TopicRecord", "--version", "0"], "{", "input is not JSON: line 1 column 2"),
        (["encode", "--type", "TopicRecord", "--version", "0"], '{"name": "x"}', "field topicId: missing; it is mandatory in version 0"),
        (["encode", "--type", "TopicRecord", "--version", "0"], '{"name": 1, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"}', "field name: expected a string"),
        (["encode", "--type", "PartitionRecord", "--version", "0"], '{"partitionId": 1, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ", "replicas": [1, "x"], "isr": [], "removingReplicas": [], "addingReplicas": [], "leader": 1, "leaderEpoch": 0, "partitionEpoch": 0}', "field replicas[1]: expected an integer"),
        (["encode", "--type", "PartitionRecord", "--version", "0"], '{"partitionId": 1, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ", "replicas": [], "isr": [], "removingReplicas": [], "addingReplicas": [], "leader": 1, "leaderEpoch": 0, "partitionEpoch": 0, "directories": []}', "field directories: not a field of PartitionRecord version 0"),
        (["encode", "--type", "TopicRecord", "--version", "0"], '{"name": "x", "topicId": "short"}', "field topicId: 'short' is not a Kafka UUID"),
        (["encode", "--type", "MirrorTopicStateChangeRecord", "--version", "0"], '{"topicId": "AAAAAAAAAAAAAAAAAAAAAQ", "mirrorName": null, "desiredState": 300}', "field desiredState: 300 is out of range for int8"),
        (["encode", "--type", "TopicRecord", "--version", "9"], '{}', "TopicRecord has no version 9"),
    ],
)
def test_bad_input_gets_one_precise_line_and_exit_2(argv: list[str], stdin: str, message: str) -> None:
    code, out, err = _run(argv, stdin)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_console_entry_point_never_prints_a_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "missing.log"
    proc = subprocess.run([sys.executable, "-m", "records", "dump-log", str(missing)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: cannot read") and "Traceback" not in proc.stderr


def test_dump_log_positions_follow_the_stored_batch_length(tmp_path: Path) -> None:
    from test_segments import non_canonical

    path = tmp_path / "non-canonical.log"
    path.write_bytes(non_canonical(VECTOR.read_bytes()))
    code, out, err = _run(["dump-log", str(path)])
    assert (code, err) == (0, "")
    lines = _records(out)
    assert {(r["position"], r["size"]) for r in lines if r["baseOffset"] == 1} == {(0, 146)}
    assert {(r["position"], r["crc"]) for r in lines if r["baseOffset"] == 34} == {(146, 161276315)}
    assert [r["payload"] for r in lines] == [e[4] for e in EXPECTED_DUMP]


JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="mirror" password="pw-1279";'
TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC


def _config_record(name: str, value: str | None) -> bytes:
    config = default_schemas().struct("ConfigRecord")
    return SERDE.encode(config(resource_type=TOPIC_RESOURCE, resource_name="a-to-b", name=name, value=value), 0)


@pytest.mark.parametrize(("name", "value"), [("sasl.jaas.config", JAAS), ("ssl.keystore.password", "ks-secret")])
def test_decode_frame_redacts_a_sensitive_config_value(name: str, value: str) -> None:
    framed = _config_record(name, value).hex()
    code, out, err = _run(["decode", "--frame", framed])
    assert (code, err) == (0, "")
    assert json.loads(out)["data"] == {"resourceType": TOPIC_RESOURCE, "resourceName": "a-to-b", "name": name, "value": REDACTED}
    assert value not in out
    code, out, _ = _run(["decode", "--frame", "--include-secrets", framed])
    assert code == 0 and json.loads(out)["data"]["value"] == value
    code, out, _ = _run(["decode", "--type", "ConfigRecord", "--version", "0", framed[6:]])
    assert code == 0 and json.loads(out)["value"] == REDACTED


def test_decode_frame_keeps_harmless_config_values() -> None:
    code, out, _ = _run(["decode", "--frame", _config_record("retention.ms", "1000").hex()])
    assert code == 0 and json.loads(out)["data"]["value"] == "1000"


def test_dump_log_redacts_sensitive_config_values(tmp_path: Path) -> None:
    from records.segments import Record, build_batch, encode_segment

    values = [_config_record("sasl.jaas.config", JAAS), _config_record("retention.ms", "1000")]
    batch = build_batch([Record(i, 0, None, v) for i, v in enumerate(values)], base_offset=0, base_timestamp=0, partition_leader_epoch=1)
    path = tmp_path / "configs.log"
    path.write_bytes(encode_segment([batch]))

    code, out, err = _run(["dump-log", str(path)])
    assert (code, err) == (0, "")
    assert [r["payload"]["data"]["value"] for r in _records(out)] == [REDACTED, "1000"]
    assert "pw-1279" not in out
    code, out, _ = _run(["dump-log", "--raw", str(path)])
    payloads = [json.loads(line)["payload"] for line in out.splitlines() if '"kind": "batch"' not in line]
    assert code == 0 and payloads[0] == REDACTED and base64.b64decode(payloads[1]) == values[1]
    code, out, _ = _run(["dump-log", "--include-secrets", str(path)])
    assert code == 0 and _records(out)[0]["payload"]["data"]["value"] == JAAS


def test_dump_log_hides_a_config_record_that_does_not_decode(tmp_path: Path) -> None:
    """A record that does not decode cannot be checked for a secret (a ConfigRecord whose body is
    broken, a record of an unknown type): its raw bytes are hidden, unless --include-secrets."""
    from records.segments import Record, build_batch, encode_segment

    broken = _config_record("sasl.jaas.config", JAAS) + b"\x00"
    unknown_type = b"\x01\x7f\x00"  # frame version 1, apiKey 127 (no such record), version 0
    batch = build_batch([Record(0, 0, None, broken), Record(1, 0, None, unknown_type)], base_offset=0,
                        base_timestamp=0, partition_leader_epoch=1)  # fmt: skip
    path = tmp_path / "broken.log"
    path.write_bytes(encode_segment([batch]))
    for raw in ([], ["--raw"]):
        code, out, _ = _run(["dump-log", *raw, str(path)])
        lines = _records(out)
        assert lines[0]["payload"] == lines[1]["payload"] == REDACTED and "pw-1279" not in out, raw
        assert base64.b64encode(unknown_type).decode() not in out
    code, out, _ = _run(["dump-log", "--include-secrets", str(path)])
    assert base64.b64decode(_records(out)[0]["payload"]) == broken
    assert base64.b64decode(_records(out)[1]["payload"]) == unknown_type
