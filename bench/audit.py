"""Audit bench: export 10M transition rows and 50,000 partition rows, then time every query.

Workload (defaults; see ``--help``):

- 50,000 mirror partitions: 1,000 topics of 50 partitions over 4 mirrors;
- 10,000,000 state transitions, 200 per partition, every one legal: UNKNOWN -> PREPARING ->
  MIRRORING, then a 9-step cycle (epoch fencing, pause/resume, failover STOPPING -> STOPPED,
  failback STOPPED -> PREPARING -> MIRRORING), one step a minute, partitions up to 20 s apart,
  so each cycle is one failover episode per mirror (~22 each);
- 4 snapshots: the transitions split in log order (appended incrementally), and each
  snapshot holds all 50,000 partitions (states, epochs, offsets), 10,000 group syncs, and
  a few config/ACL drift rows and mirror configs (with a secret, redacted on the way).

Columns are generated vectorised with ``pyarrow.compute`` (no per-row Python) and handed to
``audit.export.export_tables``, the same path ``export_snapshot`` takes after turning rows
into columns. ``export_rows_per_s`` = rows written / wall time of the export calls.

Then one Spark session (``--master``, default ``local[2]``) is started and warmed up
(``audit.warmup``, timed apart: ``session_start_seconds``, ``warmup_seconds``), and runs every query in
``audit.queries.QUERIES`` as the CLI does (collect up to 50 rows, count when there are more),
each timed with ``time.perf_counter`` and the Spark JVM's CPU time; the report build is timed on
its own. The export writes the rollups of ``audit.rollup`` beside the transitions; the queries that
read them (``LAYOUT_QUERIES``) run again on both layouts, alternately (the raw transitions with
``AuditParams(rollups=False)``: the previous layout), with failover_timeline's previous algorithm
too, and the bench asserts all give the same rows. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

# This file is bench/audit.py: run as a script, its own directory comes first on sys.path and
# "audit" would import this file instead of the audit package. Put the project root there.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from audit.export import export_tables  # noqa: E402
from audit.model import UNDEFINED  # noqa: E402
from coordinator.states import MirrorState as S  # noqa: E402

BASE_MS = 1_767_225_600_000
STEP_MS = 60_000
PARTITIONS_PER_TOPIC = 50
# Transition k of a partition: k < 2 the start, then CYCLE[(k - 2) % 9].
START = [(S.UNKNOWN, S.PREPARING, "topic started"), (S.PREPARING, S.MIRRORING, "log aligned")]
CYCLE = [
    (S.MIRRORING, S.EPOCH_FENCING, "fetched batch epoch above local"),
    (S.EPOCH_FENCING, S.MIRRORING, "destination epoch bumped"),
    (S.MIRRORING, S.PAUSING, "pause requested"),
    (S.PAUSING, S.PAUSED, "fetcher removed"),
    (S.PAUSED, S.MIRRORING, "resume requested"),
    (S.MIRRORING, S.STOPPING, "stop requested (failover)"),
    (S.STOPPING, S.STOPPED, "ISR caught up"),
    (S.STOPPED, S.PREPARING, "start requested (failback)"),
    (S.PREPARING, S.MIRRORING, "log aligned"),
]
STEPS = START + CYCLE
# The queries that read the export's rollups, timed on both layouts.
LAYOUT_QUERIES = ("failover_timeline", "transition_counts", "illegal_transitions", "lag_per_mirror", "lag_per_topic")


def _i64(v: int) -> pa.Scalar:
    return pa.scalar(v, pa.int64())


def _arange(n: int) -> pa.Array:
    return pc.subtract(pc.cumulative_sum(pa.repeat(_i64(1), n)), _i64(1))


def _step_index(k: pa.Array) -> pa.Array:
    """k -> index into STEPS."""
    cyc = pc.add(pc.modulo(pc.subtract(k, _i64(2)), _i64(len(CYCLE))), _i64(2))
    return pc.if_else(pc.less(k, _i64(2)), k, cyc)


def _dict(indices: pa.Array, values: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(indices.cast(pa.int32()), pa.array(values, pa.string()))


class Workload:
    def __init__(self, partitions: int, transitions: int, mirrors: int, seed: int) -> None:
        self.P = partitions
        self.K = transitions // partitions  # transitions per partition
        self.T = self.K * partitions
        self.mirror_names = [f"m{i}-to-dest" for i in range(mirrors)]
        topics = -(-partitions // PARTITIONS_PER_TOPIC)
        self.topic_names = [f"topic-{t:05d}" for t in range(topics)]
        self.topic_ids = [str(uuid.UUID(int=(seed << 64) + t)) for t in range(topics)]
        self.seed = seed
        p = _arange(partitions)
        self.p_topic = pc.divide(p, _i64(PARTITIONS_PER_TOPIC))
        self.p_part = pc.modulo(p, _i64(PARTITIONS_PER_TOPIC)).cast(pa.int32())
        self.p_mirror = pc.modulo(self.p_topic, _i64(mirrors))
        self.p_jitter = pc.modulo(pc.multiply(p, _i64(7919)), _i64(20_000))

    def key_columns(self, p_idx: pa.Array | None) -> dict[str, pa.Array]:
        """mirror/topic/topic_id/partition for partitions ``p_idx`` (None: all)."""
        topic = self.p_topic if p_idx is None else pc.take(self.p_topic, p_idx)
        mirror = self.p_mirror if p_idx is None else pc.take(self.p_mirror, p_idx)
        part = self.p_part if p_idx is None else pc.take(self.p_part, p_idx)
        return {
            "mirror": _dict(mirror, self.mirror_names),
            "topic": _dict(topic, self.topic_names),
            "topic_id": _dict(topic, self.topic_ids),
            "partition": part,
        }

    def transitions(self) -> pa.Table:
        r = _arange(self.T)
        k = pc.divide(r, _i64(self.P))  # time-major: all partitions' k-th transition, then k+1
        p = pc.subtract(r, pc.multiply(k, _i64(self.P)))
        step = _step_index(k)
        at = pc.add(pc.add(_i64(BASE_MS), pc.multiply(k, _i64(STEP_MS))), pc.take(self.p_jitter, p))
        return pa.table(
            {
                **self.key_columns(p),
                "from_state": pc.take(pa.array([int(f) for f, _, _ in STEPS], pa.int8()), step),
                "to_state": pc.take(pa.array([int(t) for _, t, _ in STEPS], pa.int8()), step),
                "at_ms": at,
                "metadata_offset": pc.add(_i64(1_000), pc.divide(r, _i64(10))),
                "reason": _dict(step, [why for _, _, why in STEPS]),
            }
        )

    def snapshot_tables(self, k_last: int, taken_at_ms: int, lag_seed: int) -> dict[str, pa.Table]:
        """All partitions after their ``k_last``-th transition."""
        n = self.P
        keys = self.key_columns(None)
        to_state = int(STEPS[0 if k_last < 2 else 2 + (k_last - 2) % len(CYCLE)][1])
        prev_state = int(STEPS[0 if k_last < 2 else 2 + (k_last - 2) % len(CYCLE)][0])
        entered = pc.add(_i64(BASE_MS + k_last * STEP_MS), self.p_jitter)
        lag = pc.floor(pc.multiply(pc.random(n, initializer=lag_seed), 2_000.0)).cast(pa.int64())
        p = _arange(n)
        src_hw = pc.add(_i64(1_000_000 + k_last * 10_000), pc.multiply(p, _i64(3)))
        sle = pa.repeat(pa.scalar(5 + k_last // len(CYCLE), pa.int32()), n)
        dle = pc.add(sle, pa.scalar(10, pa.int32()))
        zeros64 = pa.repeat(_i64(0), n)
        g = pc.multiply(_arange(n // 5), _i64(5))  # every 5th partition has a synced group
        g_hw = pc.take(src_hw, g)
        g_leo = pc.subtract(g_hw, pc.take(lag, g))
        committed = pc.subtract(g_hw, _i64(100))
        synced = pc.max_element_wise(pa.repeat(_i64(0), len(g)), pc.min_element_wise(committed, g_leo))
        mirror_cfg = [(m, k, v) for m in self.mirror_names for k, v in (
            ("bootstrap.servers", "source:9092"),
            ("sasl.jaas.config", 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                 'username="u" password="bench-secret";'),
        )]  # fmt: skip
        return {
            "partition_states": pa.table(
                {
                    **keys,
                    "state": pa.repeat(pa.scalar(to_state, pa.int8()), n),
                    "previous_state": pa.repeat(pa.scalar(prev_state, pa.int8()), n),
                    "state_entered_ms": entered,
                    "retry_attempt": pa.repeat(pa.scalar(0, pa.int32()), n),
                    "error_message": pa.nulls(n, pa.string()),
                }
            ),
            "epochs": pa.table(
                {
                    **keys,
                    "state": pa.repeat(pa.scalar(to_state, pa.int8()), n),
                    "source_leader_epoch": sle,
                    "dest_leader_epoch": dle,
                    "last_mirrored_epoch": pa.repeat(pa.scalar(UNDEFINED, pa.int32()), n),
                }
            ),
            "offsets": pa.table(
                {
                    **keys,
                    "source_log_start": zeros64,
                    "source_lso": src_hw,
                    "source_hw": src_hw,
                    "dest_log_start": zeros64,
                    "dest_hw": pc.subtract(src_hw, lag),
                    "dest_leo": pc.subtract(src_hw, lag),
                    "last_mirrored_epoch": pa.repeat(pa.scalar(UNDEFINED, pa.int32()), n),
                    "lag": lag,
                }
            ),
            "group_syncs": pa.table(
                {
                    **self.key_columns(g),
                    "group_id": _dict(pc.modulo(g, _i64(7)), [f"group-{i}" for i in range(7)]),
                    "group_type": _dict(pa.repeat(_i64(0), len(g)), ["consumer"]),
                    "source_committed": committed,
                    "synced_offset": synced,
                    "dest_log_start": pa.repeat(_i64(0), len(g)),
                    "dest_leo": g_leo,
                    "leader_epoch": pc.take(dle, g),
                    "synced_at_ms": pa.repeat(_i64(taken_at_ms - 5_000), len(g)),
                }
            ),
            "mirror_configs": pa.table(
                {
                    "mirror": [m for m, _, _ in mirror_cfg],
                    "config_name": [k for _, k, _ in mirror_cfg],
                    "config_value": [v for _, _, v in mirror_cfg],
                    "redacted": [False] * len(mirror_cfg),
                }
            ),
        }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (0.0 where there is no /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transitions", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=50_000)
    ap.add_argument("--mirrors", type=int, default=4)
    ap.add_argument("--snapshots", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--out", help="snapshot store directory (default: a temp dir, removed after)")
    ap.add_argument("--no-report", action="store_true", help="skip timing the HTML report")
    ap.add_argument("--html", metavar="OUT", help="keep the HTML report there")
    ap.add_argument("--seed", type=int, default=1279)
    ap.add_argument("--no-warm-up", action="store_true",
                    help="time the first query with the session's start-up in it (audit.warmup not run)")
    ap.add_argument("--no-compare", action="store_true",
                    help="skip running failover_timeline's previous algorithm beside the current one")
    args = ap.parse_args(argv)

    load_at_start = round(os.getloadavg()[0], 2)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="audit-bench-"))
    if args.out and out.exists():
        shutil.rmtree(out)
    w = Workload(args.partitions, args.transitions, args.mirrors, args.seed)
    t0 = time.perf_counter()
    transitions = w.transitions()
    gen_s = time.perf_counter() - t0
    print(f"generated {transitions.num_rows:,} transitions in {gen_s:.2f}s", file=sys.stderr)

    export_s, export_rows, export_bytes = 0.0, 0, 0
    per_snap = w.K // args.snapshots
    for j in range(args.snapshots):
        k_lo, k_hi = j * per_snap, (w.K if j == args.snapshots - 1 else (j + 1) * per_snap)
        part = transitions.slice(k_lo * w.P, (k_hi - k_lo) * w.P)  # zero-copy, log order
        taken = BASE_MS + k_hi * STEP_MS + 30_000
        tables = {"transitions": part, **w.snapshot_tables(k_hi - 1, taken, args.seed + j)}
        offset = 1_000 + (k_hi * w.P - 1) // 10
        t = time.perf_counter()
        res = export_tables(tables, metadata_offset=offset, taken_at_ms=taken, out_dir=out)
        dt = time.perf_counter() - t
        export_s += dt
        export_rows += res.rows
        export_bytes += sum(f.bytes for e in res.manifest.tables.values() for f in e.files)
        print(f"snapshot {j + 1}/{args.snapshots}: {res.rows:,} rows in {dt:.2f}s", file=sys.stderr)

    from audit.queries import QUERIES, AuditParams
    from audit.run import run_query
    from audit.spark import SnapshotStore, spark_session

    from audit.warmup import warm_up

    t = time.perf_counter()
    spark = spark_session(args.master)
    session_s = time.perf_counter() - t
    store = SnapshotStore(out)
    params = AuditParams()
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
    session_cpu_s = _cpu_seconds(jvm_pid)
    warmup_s = warmup_cpu_s = None
    if not args.no_warm_up:  # start-up paid once, before the first query, and reported apart
        t = time.perf_counter()
        warm_up(spark)
        warmup_s, warmup_cpu_s = round(time.perf_counter() - t, 3), round(_cpu_seconds(jvm_pid) - session_cpu_s, 3)
        print(f"warm-up (the report over a tiny sample store): {warmup_s:.2f}s, JVM CPU {warmup_cpu_s:.2f}s",
              file=sys.stderr)  # fmt: skip
    query_s: dict[str, float] = {}
    query_cpu_s: dict[str, float] = {}
    rows: dict[str, int] = {}
    for name in QUERIES:
        cpu0 = _cpu_seconds(jvm_pid)
        r = run_query(spark, store, name, params, limit=50)
        query_s[name], rows[name] = round(r.seconds, 3), r.row_count
        query_cpu_s[name] = round(_cpu_seconds(jvm_pid) - cpu0, 3)
        print(f"{name:<30} {r.row_count:>10,} rows {r.seconds:7.2f}s  JVM CPU {query_cpu_s[name]:6.2f}s", file=sys.stderr)
    # Side by side, in the same session, each once more and alternately now that the session is
    # warm: failover_timeline's previous algorithm (bench/audit_previous.py) on the raw transitions;
    # the current queries on the raw transitions (the previous layout: AuditParams(rollups=False));
    # and the current queries on the export's rollups (what the loop above timed).
    compare: dict[str, dict[str, float]] = {"previous": {}, "current": {}}
    layouts: dict[str, dict[str, dict[str, float]]] = {"raw_transitions": {}, "rollups": {}}
    if not args.no_compare:
        sys.path.append(str(_HERE))  # after the project root: "audit" stays the package
        from audit_previous import failover_timeline as previous_timeline
        from audit_previous import previous_run

        raw = AuditParams(rollups=False)

        def timed(run: Callable[[], int], expected: int, what: str) -> dict[str, float]:
            cpu0, t = _cpu_seconds(jvm_pid), time.perf_counter()
            n = run()
            wall, cpu = time.perf_counter() - t, _cpu_seconds(jvm_pid) - cpu0
            assert n == expected, f"{what}: {n} rows, not {expected}"
            return {"seconds": round(wall, 3), "jvm_cpu_seconds": round(cpu, 3)}

        def best(into: dict[str, float], got: dict[str, float]) -> None:
            if not into or got["seconds"] < into["seconds"]:
                into.update(got)

        ft = "failover_timeline"
        for label in ("previous", "current", "previous", "current"):
            run = (lambda: previous_run(spark, store, params, 50)) if label == "previous" else (
                lambda: run_query(spark, store, ft, params, limit=50).row_count)
            best(compare[label], timed(run, rows[ft], f"{label} {ft}"))
        for name in LAYOUT_QUERIES:
            for layout_name, p in (("raw_transitions", raw), ("rollups", params)) * 2:
                got = timed(lambda: run_query(spark, store, name, p, limit=50).row_count, rows[name],
                            f"{layout_name} {name}")  # fmt: skip
                best(layouts[layout_name].setdefault(name, {}), got)
            r, u = layouts["raw_transitions"][name], layouts["rollups"][name]
            print(f"{name:<30} raw transitions {r['seconds']:6.2f}s (JVM CPU {r['jvm_cpu_seconds']:5.2f}s); "
                  f"rollups {u['seconds']:6.2f}s (JVM CPU {u['jvm_cpu_seconds']:5.2f}s)", file=sys.stderr)  # fmt: skip
        print(f"failover_timeline warm, previous: {compare['previous']['seconds']:.2f}s (JVM CPU "
              f"{compare['previous']['jvm_cpu_seconds']:.2f}s); current: {compare['current']['seconds']:.2f}s "
              f"(JVM CPU {compare['current']['jvm_cpu_seconds']:.2f}s)", file=sys.stderr)
        # Same results, row for row (not timed): rollups, raw transitions and the previous algorithm.
        for name in LAYOUT_QUERIES:
            a = run_query(spark, store, name, params).rows
            b = run_query(spark, store, name, raw).rows
            assert a == b, f"{name}: rollups and raw transitions differ"
            if name == ft:
                assert [r.asDict() for r in previous_timeline(spark, store, params).collect()] == a, \
                    "failover_timeline: the previous algorithm differs"
        print("same rows: rollups, raw transitions, previous algorithm", file=sys.stderr)
    report_s = report_cpu_s = None
    if not args.no_report:
        from audit.report import build_report

        cpu0, t = _cpu_seconds(jvm_pid), time.perf_counter()
        html = build_report(spark, store, params)
        report_s = round(time.perf_counter() - t, 3)
        report_cpu_s = round(_cpu_seconds(jvm_pid) - cpu0, 3)
        print(f"report: {len(html):,} bytes in {report_s:.2f}s, JVM CPU {report_cpu_s:.2f}s", file=sys.stderr)
        if args.html:
            Path(args.html).write_text(html, encoding="utf-8")
    jvm_cpu_total = _cpu_seconds(jvm_pid)
    spark.stop()
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)

    slowest = max(query_s, key=lambda n: query_s[n])
    result = {
        "bench": "audit",
        "transitions": transitions.num_rows,
        "partitions": w.P,
        "mirrors": args.mirrors,
        "snapshots": args.snapshots,
        "generate_seconds": round(gen_s, 3),
        "export_rows": export_rows,
        "export_bytes": export_bytes,
        "export_seconds": round(export_s, 3),
        "export_rows_per_s": round(export_rows / export_s),
        "spark_master": args.master,
        "session_start_seconds": round(session_s, 3),  # JVM and SparkContext
        "session_start_jvm_cpu_seconds": round(session_cpu_s, 3),
        # audit.warmup before the first query (None: --no-warm-up, the first query pays it)
        "warmup_seconds": warmup_s,
        "warmup_jvm_cpu_seconds": warmup_cpu_s,
        "query_seconds": query_s,
        "query_jvm_cpu_seconds": query_cpu_s,  # CPU the Spark JVM spent: less sensitive to a busy machine
        "query_rows": rows,
        "slowest_query": slowest,
        "slowest_query_seconds": query_s[slowest],
        "report_seconds": report_s,  # every query again (two at a time) and the charts' data
        "report_jvm_cpu_seconds": report_cpu_s,
        # best of two warm runs each, same session: the previous algorithm and run path, and the current
        "failover_timeline_previous": compare["previous"] or None,
        "failover_timeline_current": compare["current"] or None,
        # the queries that read the rollups, best of two warm runs each on either layout, same session
        "layout_previous_raw_transitions": layouts["raw_transitions"] or None,
        "layout_current_rollups": layouts["rollups"] or None,
        "jvm_cpu_seconds_total": round(jvm_cpu_total, 3),
        "goal_export_rows_per_s": 1_000_000,
        "goal_query_seconds": 3,
        "goal_report_seconds": 5,
        "goals_met": export_rows / export_s >= 1_000_000 and query_s[slowest] <= 3
        and (report_s is None or report_s <= 5),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "load_average_5m": round(os.getloadavg()[1], 2),
        "load_average_at_start_1m": load_at_start,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
