"""A tour of the records tooling on a small mirror metadata log.

Writes a KRaft-style metadata log segment for a mirror ``a-to-b`` over two topics (topics,
partitions, a leader change, then start, stop and start again of the mirror topics), dumps it
the way ``kafka-dump-log --cluster-metadata-decoder`` does, and encodes a ``__mirror_state``
entry. Deterministic: the same bytes every run.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import uuid
from pathlib import Path

from records.dump import dump_segment
from records.framing import MetadataRecordSerde
from records.registry import default_schemas
from records.segments import Record, build_batch, encode_segment, iter_segment

MIRROR = "a-to-b"


def build_log() -> bytes:
    schemas = default_schemas()
    serde = MetadataRecordSerde(schemas)
    topic = schemas.struct("TopicRecord")
    partition = schemas.struct("PartitionRecord")
    change = schemas.struct("PartitionChangeRecord")
    mirror = schemas.struct("MirrorTopicStateChangeRecord")
    topics = {name: uuid.UUID(int=(i + 1) << 64 | 0x1279) for i, name in enumerate(["orders", "payments"])}

    batches: list[list[bytes]] = []
    setup: list[bytes] = []
    for name, topic_id in topics.items():
        setup.append(serde.encode(topic(name=name, topic_id=topic_id), 0))
        for p in range(2):
            setup.append(serde.encode(partition(partition_id=p, topic_id=topic_id, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1 + p, leader_epoch=0, partition_epoch=0), 0))
    batches.append(setup)
    batches.append([serde.encode(change(partition_id=0, topic_id=topics["orders"], leader=2, isr=(2, 3)), 0)])
    for desired in (0, 1, 0):  # start, stop (failover), start (failback)
        batches.append([serde.encode(mirror(topic_id=t, mirror_name=MIRROR, desired_state=desired), 0) for t in topics.values()])

    offset = 0
    encoded = []
    for i, values in enumerate(batches):
        records = [Record(offset_delta=j, timestamp_delta=0, key=None, value=v) for j, v in enumerate(values)]
        encoded.append(build_batch(records, base_offset=offset, base_timestamp=1_780_000_000_000 + i, partition_leader_epoch=1))
        offset += len(values)
    return encode_segment(encoded)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where to write the segment (default: a temporary folder)")
    args = parser.parse_args(argv)
    data = build_log()
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="kip1279-demo-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "00000000000000000000.log"
    path.write_bytes(data)
    batches = [b for b in iter_segment(data)]
    records = sum(len(b.records) for b in batches)  # type: ignore[union-attr]
    print(f"wrote {path}: {len(data)} bytes, {len(batches)} batches, {records} framed metadata records\n")
    print(f"kafka-records dump-log {path.name} (payloads; the full lines also carry batch, epoch and CRC):")
    schemas = default_schemas()
    lines = io.StringIO()
    errors = dump_segment(data, MetadataRecordSerde(schemas), lines)
    for line in lines.getvalue().splitlines():
        record = json.loads(line)
        if record.get("kind") == "batch":
            continue
        print(f"  offset {record['offset']:>2}  epoch {record['partitionLeaderEpoch']}  {json.dumps(record['payload'])}")

    key = schemas.struct("MirrorPartitionStateKey")(mirror_name=MIRROR, topic_id=uuid.UUID(int=1 << 64 | 0x1279), partition=0)
    value = schemas.struct("MirrorPartitionStateValue")(state=6, previous_state=5, leader_epoch=12, state_epoch=4, applied_offset=records - 1)
    print("\n__mirror_state entry for orders-0 after failover (STOPPED, from STOPPING):")
    print(f"  key   {schemas.encode(key, 0).hex()}  {schemas.to_json(key, 0)}")
    print(f"  value {schemas.encode(value, 0).hex()}  {schemas.to_json(value, 0)}")
    if errors:
        print(f"\n{len(errors)} errors: " + "; ".join(errors), file=sys.stderr)
        return 1
    print("\nverdict: every record decoded, every batch CRC32C checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
