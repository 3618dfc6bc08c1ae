"""``kafka-records dump-log --format kafka`` against Apache Kafka's ``kafka-dump-log``, text diffed
line for line: on the stored samples (Kafka's dumps beside them), on damaged copies of them, and on
every kind of file that the session's Apache Kafka node writes during this run (rolled segments,
indexes, time indexes, a transaction index, producer snapshots, LogAppendTime and compacted
topics, __consumer_offsets, __transaction_state and the metadata log). Kafka's side needs Java and
the fetched jars; without them those tests skip (fail under KIP1279_REQUIRE_KAFKA=1).
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_fixtures import require_apache_kafka
from kafka_tools import run_batch
from kafka_yardstick import (
    APPEND_TIME_TOPIC,
    COMPACTED_TOPIC,
    DATA_TOPIC,
    ROLLED_TOPIC,
    copy_whole_batches,
    ensure_yardstick_activity,
    write_log_dir_activity,
)
from reference_data import DATA

from records.cli import EXIT_DAMAGED, main
from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.brokers.kafka_jars import DUMP_LOG_TOOL

METADATA_DIR = DATA / "apache_kafka_cluster_metadata"
DATA_DIR = DATA / "apache_kafka_data"
SEGMENT = "00000000000000000000.log"
DEEP = ("--deep-iteration", "--print-data-log")


def ours(files: list[Path], *options: str, secrets: bool = True) -> tuple[int, str, str]:
    """``kafka-records dump-log --format kafka``: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    old_err, sys.stderr = sys.stderr, err
    try:
        code = main(["dump-log", "--format", "kafka", *(["--include-secrets"] if secrets else []),
                     "--files", ",".join(map(str, files)), *options], out=out)  # fmt: skip
    finally:
        sys.stderr = old_err
    return code, out.getvalue(), err.getvalue()


def kafka_batch(runs: dict[str, tuple[list[Path], tuple[str, ...]]]) -> dict[str, str]:
    """Kafka's ``kafka-dump-log`` on each (files, options), all in one JVM: name -> its stdout
    (exit code 0). In UTF-8: Java picks the locale's charset, ASCII under C, '?' for the rest."""
    batch = run_batch({name: (DUMP_LOG_TOOL, ["--files", ",".join(map(str, files)), *options], None)
                       for name, (files, options) in runs.items()}, env=dict(os.environ, LC_ALL="C.UTF-8"))  # fmt: skip
    bad = {name: r.stderr[-2000:] for name, r in batch.items() if r.code != 0}
    assert not bad, bad
    return {name: r.stdout for name, r in batch.items()}


def assert_same_text(theirs: str, mine: str) -> None:
    """Line for line; on a difference, the first lines that differ."""
    a, b = theirs.splitlines(), mine.splitlines()
    diff = [(i, x, y) for i, (x, y) in enumerate(zip(a, b)) if x != y][:3]
    assert not diff and len(a) == len(b), (len(a), len(b), diff)


# --- stored samples (Kafka's dumps stored beside them; no Java needed) ------------------------


@pytest.mark.parametrize(
    ("folder", "options"),
    [(DATA_DIR, ("--print-data-log",)), (METADATA_DIR, ("--cluster-metadata-decoder",))],
)
def test_stored_segments_print_as_kafka_printed_them(folder: Path, options: tuple[str, ...]) -> None:
    segment = folder / SEGMENT
    stored = (folder / "kafka-dump.txt").read_text()
    # Kafka's first line names the file as it was given then.
    stored = f"Dumping {segment}\n" + stored.split("\n", 1)[1]
    code, text, _ = ours([segment], *options)
    assert code == 0
    assert_same_text(stored, text)


def test_the_metadata_dump_redacts_only_secrets_by_default() -> None:
    segment = METADATA_DIR / SEGMENT
    _, clear, _ = ours([segment], "--cluster-metadata-decoder")
    _, redacted, _ = ours([segment], "--cluster-metadata-decoder", secrets=False)
    changed = [(a, b) for a, b in zip(clear.splitlines(), redacted.splitlines()) if a != b]
    assert changed and all("USER_SCRAM_CREDENTIAL_RECORD" in a and '"salt":"(redacted)"' in b for a, b in changed)


# --- damaged copies, diffed with Kafka run on them now ---------------------------------------


def _damaged(tmp_path: Path) -> dict[str, Path]:
    """Copies of the stored data segment, each damaged one way that Kafka's tool gets through."""
    data = (DATA_DIR / SEGMENT).read_bytes()
    cases = {
        "crc": (17, 0x01),  # a bit of the first batch's stored CRC
        "attributes": (62, 0x40),  # the first record's attributes byte: the CRC fails, the records read
        "key": (66, 0x01),  # the first record's key: k0 reads j0, and the CRC fails
        "magic": (16, 2 ^ 7),  # magic 7: not covered by the CRC; Kafka reads it as v2
    }
    out = {}
    for name, (at, bits) in cases.items():
        damaged = bytearray(data)
        damaged[at] ^= bits
        out[name] = tmp_path / name / SEGMENT
        out[name].parent.mkdir()
        out[name].write_bytes(bytes(damaged))
    out["truncated"] = tmp_path / "truncated" / SEGMENT
    out["truncated"].parent.mkdir()
    out["truncated"].write_bytes(data[:-30])
    return out


def test_a_damaged_batch_is_shown_invalid_and_the_dump_goes_on_as_in_kafka(tmp_path: Path) -> None:
    require_apache_kafka()
    files = _damaged(tmp_path)
    theirs = kafka_batch({str(options): (list(files.values()), options) for options in ((), DEEP)})
    for options in ((), DEEP):
        code, text, err = ours(list(files.values()), *options)
        assert code == EXIT_DAMAGED, err
        assert_same_text(theirs[str(options)], text)
    assert text.count("isvalid: false") == 3 and "key: j0" in text  # crc, attributes, key
    assert "magic: 7" in text and "invalid bytes at the end of 00000000000000000000.log" in text
    for name in files:
        assert f"{files[name]}:" in err, name  # each damage named on stderr


def test_a_record_that_does_not_parse_ends_its_batch_not_the_dump(tmp_path: Path) -> None:
    """Kafka stops with a stack trace here (InvalidRecordException); we go on with the next batch."""
    data = bytearray((DATA_DIR / SEGMENT).read_bytes())
    data[100] ^= 0x01  # inside the first batch's second record: its value length goes bad
    segment = tmp_path / SEGMENT
    segment.write_bytes(bytes(data))
    code, text, err = ours([segment], *DEEP)
    lines = text.splitlines()
    assert code == EXIT_DAMAGED and "record 1 has a value of length -13" in err
    assert lines[2].endswith("isvalid: false") and lines[3].startswith("| offset: 0 ")
    assert lines[4].startswith("baseOffset: 4 ")  # the next batch, after the one record that read
    assert len([line for line in lines if line.startswith("baseOffset:")]) == 9


# --- what the session's Kafka node writes now --------------------------------------------------


def _last_segment(folder: Path) -> str:
    return sorted(folder.glob("*.log"))[-1].name.split(".")[0]


def _wait_for_an_emptied_batch(folder: Path, timeout: float = 60.0) -> None:
    """The cleaner compacts the topic's closed segments: wait until its first batch is empty."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        first = folder / SEGMENT
        if first.exists() and " count: 0 " in ours([first])[1]:
            return
        time.sleep(0.5)
    raise AssertionError(f"the log cleaner did not empty a batch of {folder} in {timeout} s")


@pytest.fixture(scope="module")
def log_dir(apache_kafka: ApacheKafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the node's partition folders after the yardstick's writes (whole batches only)."""
    node = apache_kafka.nodes[0]
    ensure_yardstick_activity(apache_kafka.bootstrap)
    write_log_dir_activity(apache_kafka.bootstrap)
    _wait_for_an_emptied_batch(node.log_dir / f"{COMPACTED_TOPIC}-0")
    dest = tmp_path_factory.mktemp("log-dir")
    for folder in node.log_dir.iterdir():
        if not folder.is_dir() or not folder.name.startswith(("yardstick-", "__consumer_offsets-", "__transaction_state-")):
            continue
        if folder.name.endswith("-delete"):
            continue
        target = dest / folder.name
        target.mkdir()
        for f in folder.iterdir():
            if f.suffix == ".log":
                copy_whole_batches(f, target / f.name)
            elif f.suffix in (".index", ".timeindex", ".txnindex", ".snapshot") or f.name == "leader-epoch-checkpoint":
                shutil.copyfile(f, target / f.name)
    segment = copy_whole_batches(apache_kafka.metadata_log_dir / SEGMENT, dest / "__cluster_metadata-0" / SEGMENT)
    assert segment.stat().st_size > 0
    yield dest


def _logs(log_dir: Path) -> list[Path]:
    return sorted(f for f in log_dir.glob("*/*.log") if f.stat().st_size and f.parent.name != "__cluster_metadata-0")


def _indexes(log_dir: Path) -> list[Path]:
    """Index files whose segment has batches (Kafka's tool stops with NoSuchElementException on
    an index whose log is empty, the active segment of an idle partition)."""
    return sorted(f for f in log_dir.glob("*/*.*index")
                  if f.suffix != ".txnindex" and (f.parent / (f.name.split(".")[0] + ".log")).stat().st_size)  # fmt: skip


def _index_files(log_dir: Path) -> list[Path]:
    return _indexes(log_dir) + sorted(log_dir.glob("*/*.snapshot")) + sorted(log_dir.glob("*/*.txnindex"))


def _closed_indexes(log_dir: Path) -> list[Path]:
    # Closed segments only: Kafka's check stops with an exception on an active segment's
    # preallocated time index (ours reports it and goes on).
    return [f for f in _indexes(log_dir) if f.name.split(".")[0] != _last_segment(f.parent)]


COORDINATOR_LOGS = (("__consumer_offsets-", "--offsets-decoder"), ("__transaction_state-", "--transaction-log-decoder"))


@pytest.fixture(scope="module")
def kafka_dumps(log_dir: Path) -> dict[str, str]:
    """Kafka's tool on every live file set the tests below diff, in one JVM rather than one each."""
    runs: dict[str, tuple[list[Path], tuple[str, ...]]] = {}
    for options in ((), ("--deep-iteration",), DEEP):
        runs[f"segments {options}"] = (_logs(log_dir), options)
    runs["metadata"] = ([log_dir / "__cluster_metadata-0" / SEGMENT], ("--cluster-metadata-decoder",))
    for prefix, option in COORDINATOR_LOGS:
        runs[option] = ([f for f in _logs(log_dir) if f.parent.name.startswith(prefix)], (option,))
    for options in ((), ("--verify-index-only",)):
        runs[f"indexes {options}"] = (_index_files(log_dir), options)
    runs["sanity"] = (_closed_indexes(log_dir), ("--index-sanity-check",))
    return kafka_batch(runs)


def test_live_segments_print_as_kafka_prints_them(log_dir: Path, kafka_dumps: dict[str, str]) -> None:
    logs = _logs(log_dir)
    topics = {f.parent.name.rsplit("-", 1)[0] for f in logs}
    assert {DATA_TOPIC, ROLLED_TOPIC, APPEND_TIME_TOPIC, COMPACTED_TOPIC, "__consumer_offsets", "__transaction_state"} <= topics
    for options in ((), ("--deep-iteration",), DEEP):
        code, text, err = ours(logs, *options)
        assert code == 0, err
        assert_same_text(kafka_dumps[f"segments {options}"], text)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert f"compresscodec: {codec} " in text
    assert "LogAppendTime: " in text and "endTxnMarker: ABORT" in text
    compacted = text.split(f"{COMPACTED_TOPIC}-0/{SEGMENT}\n", 1)[1]
    assert " count: 0 " in compacted.splitlines()[1]  # the emptied batch, shown as Kafka shows it


def test_live_metadata_log_prints_as_kafka_prints_it(log_dir: Path, kafka_dumps: dict[str, str]) -> None:
    segment = log_dir / "__cluster_metadata-0" / SEGMENT
    code, text, err = ours([segment], "--cluster-metadata-decoder")
    assert code == 0, err
    assert_same_text(kafka_dumps["metadata"], text)
    assert "KRaftVoters {" in text and '"type":"USER_SCRAM_CREDENTIAL_RECORD"' in text


def test_live_coordinator_topics_print_as_kafka_prints_them(log_dir: Path, kafka_dumps: dict[str, str]) -> None:
    texts = {}
    for prefix, option in COORDINATOR_LOGS:
        logs = [f for f in _logs(log_dir) if f.parent.name.startswith(prefix)]
        assert logs, prefix
        code, text, err = ours(logs, option)
        assert code == 0, err
        assert_same_text(kafka_dumps[option], text)
        texts[option] = text
    # a group's metadata with its member's subscription and assignment decoded, and its commit
    assert '"protocolType":"consumer"' in texts["--offsets-decoder"] and '"assignedPartitions":[' in texts["--offsets-decoder"]
    assert 'key: {"type":"1","data":{"group":"yardstick-group"' in texts["--offsets-decoder"]
    assert '"transactionalId":"yardstick-txn"' in texts["--transaction-log-decoder"]


def test_the_coordinator_schemas_are_kafkas_own() -> None:
    """schemas/kafka-*-coordinator/ hold the pinned Kafka's files byte for byte (from the fetched jars)."""
    import zipfile

    from streams.brokers.kafka_jars import kafka_lib, kafka_version

    require_apache_kafka()
    lib, version = kafka_lib(), kafka_version()
    jars = {"kafka-group-coordinator": ["kafka-group-coordinator", "kafka-clients"], "kafka-transaction-coordinator": ["kafka-transaction-coordinator"]}
    for folder, sources in jars.items():
        ours_ = {f.name: f.read_bytes() for f in (Path(__file__).parents[1] / "schemas" / folder).glob("*.json")}
        assert ours_, folder
        for name, data in ours_.items():
            found = []
            for jar in sources:
                with zipfile.ZipFile(lib / f"{jar}-{version}.jar") as z:
                    if f"common/message/{name}" in z.namelist():
                        found.append(z.read(f"common/message/{name}"))
            assert found == [data], f"{folder}/{name}"


def test_live_indexes_snapshots_and_txn_indexes_print_as_kafka_prints_them(log_dir: Path, kafka_dumps: dict[str, str]) -> None:
    indexes = _indexes(log_dir)
    snapshots = sorted(log_dir.glob("*/*.snapshot"))
    txn = sorted(log_dir.glob("*/*.txnindex"))
    assert {f.suffix for f in indexes} == {".index", ".timeindex"} and snapshots and txn
    files = _index_files(log_dir)
    for options in ((), ("--verify-index-only",)):
        _, text, _ = ours(files, *options)
        assert_same_text(kafka_dumps[f"indexes {options}"], text)
    _, text, _ = ours(files)
    assert "offset: " in text and "timestamp: " in text and "producerId: " in text and "lastStableOffset: " in text


def test_live_index_sanity_check_prints_as_kafka_prints_it(log_dir: Path, kafka_dumps: dict[str, str]) -> None:
    closed = _closed_indexes(log_dir)
    assert closed
    code, text, err = ours(closed, "--index-sanity-check")
    assert code == 0, err
    assert_same_text(kafka_dumps["sanity"], text)
    assert text.count("passed sanity check.") + text.count(" is empty.") == len(closed)
    assert "passed sanity check." in text


def test_a_leader_epoch_checkpoint_is_read(log_dir: Path) -> None:
    """Kafka 4.4.0's tool stops on this file (StringIndexOutOfBoundsException: no dot in its name)."""
    checkpoint = log_dir / f"{DATA_TOPIC}-0" / "leader-epoch-checkpoint"
    code, text, _ = ours([checkpoint])
    assert code == 0 and text.splitlines()[1:] == ["epoch: 0 startOffset: 0"]
