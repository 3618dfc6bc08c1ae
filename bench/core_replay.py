"""Core replay benchmark: a 1,000-topic x 50-partition mirrored cluster, then a mass failover.

1. Builds the metadata log a destination controller would hold: 1,000 TopicRecords, 50,000
   PartitionRecords, a cluster mirror and 1,000 MirrorTopicStateChangeRecords (START), all as
   framed bytes, the way the worker reads them.
2. Replays it from EMPTY (decode included) and reports records/s.
3. Mass stop ("link flap"): the controller validates a stop of every topic (one record per
   topic), then the worker replays those 1,000 framed records and decides ``local_changes``:
   50,000 mirror partitions to stop.

The goal is the whole of it (log replay + mass stop decision) under 2 s on one core.
The last line printed is one JSON object.

    .venv/bin/python bench/core_replay.py [--topics 1000] [--partitions 50] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator.admin import create_cluster_mirror, stop_mirror_topics  # noqa: E402
from coordinator.changes import local_changes  # noqa: E402
from coordinator.delta import MetadataDelta  # noqa: E402
from coordinator.image import EMPTY_IMAGE, MetadataImage  # noqa: E402
from coordinator.states import DesiredState  # noqa: E402
from records.framing import MetadataRecordSerde  # noqa: E402
from records.registry import default_schemas  # noqa: E402

MIRROR = "a-to-b"


def build_log(topics: int, partitions: int) -> list[bytes]:
    s = default_schemas()
    serde = MetadataRecordSerde(s)
    topic, part, state = s.struct("TopicRecord"), s.struct("PartitionRecord"), s.struct("MirrorTopicStateChangeRecord")
    out: list[bytes] = []
    for r in create_cluster_mirror(EMPTY_IMAGE, MIRROR, {
        "bootstrap.servers": "source-1:9092,source-2:9092", "security.protocol": "SASL_SSL",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required;",
    }).records:
        out.append(serde.encode(r.message, r.version))
    ids = [uuid.UUID(int=(7 << 96) | i) for i in range(topics)]
    for i, tid in enumerate(ids):
        out.append(serde.encode(topic(name=f"orders-{i:04d}", topic_id=tid), 0))
        for p in range(partitions):
            replicas = ((p % 6) + 1, ((p + 1) % 6) + 1, ((p + 2) % 6) + 1)
            out.append(serde.encode(part(partition_id=p, topic_id=tid, replicas=replicas, isr=replicas,
                                         leader=replicas[0], leader_epoch=0, partition_epoch=0), 0))
    for tid in ids:
        out.append(serde.encode(state(topic_id=tid, mirror_name=MIRROR, desired_state=int(DesiredState.START)), 0))
    return out


def replay(framed: list[bytes], image: MetadataImage) -> tuple[MetadataDelta, MetadataImage]:
    d = MetadataDelta(image)
    first = image.offset + 1
    for i, data in enumerate(framed):
        d.replay_framed(data, first + i, 1)
    return d, d.apply()


def run_once(framed: list[bytes], partitions_total: int) -> dict[str, float]:
    t0 = time.perf_counter()
    _, image = replay(framed, EMPTY_IMAGE)
    t1 = time.perf_counter()
    assert len(image.mirrors.topics) * (partitions_total // len(image.mirrors.topics)) == partitions_total

    # the controller's side: validate the stop and produce one record per topic
    t2 = time.perf_counter()
    result = stop_mirror_topics(image, MIRROR, patterns=[".*"])
    t3 = time.perf_counter()
    serde = MetadataRecordSerde(default_schemas())
    stop_framed = [serde.encode(r.message, r.version) for r in result.records]

    # the worker's side: replay the stop records and decide
    t4 = time.perf_counter()
    delta, after = replay(stop_framed, image)
    changes = local_changes(delta, after)
    t5 = time.perf_counter()
    assert len(changes.stop) == partitions_total and not delta.problems, (len(changes.stop), delta.problems[:3])
    return {
        "log_replay_s": t1 - t0,
        "admin_stop_validate_s": t3 - t2,
        "mass_stop_s": t5 - t4,
        "stop_records": float(sum(r.api_key == 29 for r in result.records)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    total = args.topics * args.partitions

    framed = build_log(args.topics, args.partitions)
    size = sum(map(len, framed))
    print(f"metadata log: {len(framed):,} framed records, {size / 1e6:.1f} MB "
          f"({args.topics:,} topics x {args.partitions} partitions, mirrored by {MIRROR!r})")
    runs = [run_once(framed, total) for _ in range(args.runs)]
    best = {k: min(r[k] for r in runs) for k in runs[0]}
    rps = len(framed) / best["log_replay_s"]
    decided = best["log_replay_s"] + best["mass_stop_s"]
    print(f"replay from EMPTY (decode + replay + apply): {best['log_replay_s']:.3f} s  -> {rps:,.0f} records/s")
    print(f"controller validates StopMirrorTopics .*:     {best['admin_stop_validate_s'] * 1e3:.1f} ms "
          f"-> {int(best['stop_records']):,} MirrorTopicStateChangeRecords")
    print(f"worker replays the stop + local_changes:      {best['mass_stop_s'] * 1e3:.1f} ms "
          f"-> {total:,} mirror partitions to stop")
    load = os.getloadavg()[0]
    print(f"log replay + mass stop decision:              {decided:.3f} s (goal < 2 s) "
          f"[best of {args.runs}; 1-min load average {load:.1f} on {os.cpu_count()} CPUs]")
    print(json.dumps({
        "records": len(framed),
        "topics": args.topics,
        "partitions": total,
        "replay_records_per_s": round(rps),
        "log_replay_seconds": round(best["log_replay_s"], 4),
        "admin_stop_validate_seconds": round(best["admin_stop_validate_s"], 4),
        "mass_stop_seconds": round(best["mass_stop_s"], 4),
        "mass_stop_50k_seconds": round(decided, 4),
        "goal_met": decided < 2.0,
        "loadavg_1m": round(load, 2),
    }))


if __name__ == "__main__":
    main()
