"""One self-contained HTML page: verdict, violations, lag per mirror, failover timelines, drift.

No JavaScript and no external resources: inline CSS, inline SVG (``audit.charts``). Values
come from the audit queries (already redacted at export); every value is HTML-escaped.

The failover timeline chart shows, per mirror and episode, how many partitions are in each
state over time around the episode. The counts are anchored on the latest snapshot's
``partition_states`` and walked back through the transitions (``count(t) = count(latest) -
sum(deltas after t)``), so they are exact even when the oldest history has been dropped.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from html import escape
from pathlib import Path
from typing import Any

from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F

from audit import layout
from audit.charts import STATE_COLORS, Chart, Marker, Series, downsample, line_chart
from audit.queries import (
    FAILBACK_COMPLETED,
    FAILBACK_STARTED,
    FAILOVER_COMPLETED,
    FAILOVER_STARTED,
    QUERIES,
    AuditParams,
    uses_rollups,
)
from audit.run import QueryResult, run_query
from audit.spark import SnapshotStore, sharing_cores

HTML_ROWS = 200  # rows shown per table; the count says how many there are
# Queries run at a time: one's driver work (planning, code generation, collecting) overlaps the
# other's tasks, and a small query's latency the big one's work.
REPORT_THREADS = 2
# Read whole: the timeline's episodes, and the lag charts' points.
WHOLE = ("failover_timeline", "lag_per_topic")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
TOP_TOPICS = 5
BUCKETS = 120
EVENT_COLORS = {
    FAILOVER_STARTED: "#d62728",
    FAILOVER_COMPLETED: "#1f77b4",
    FAILBACK_STARTED: "#9467bd",
    FAILBACK_COMPLETED: "#2ca02c",
}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:18px 28px}header h1{margin:0 0 4px;font-size:22px}
header .meta{color:#c5cad6;font-size:13px}main{padding:8px 28px 40px;max-width:1200px}
h2{margin:28px 0 10px;font-size:18px;border-bottom:1px solid #d6dae2;padding-bottom:4px}
h3{margin:18px 0 6px;font-size:15px}.verdict{display:inline-block;margin-top:10px;padding:6px 14px;
border-radius:4px;font-weight:600}.pass{background:#2ca02c;color:#fff}.fail{background:#d62728;color:#fff}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0}.card{background:#fff;border:1px solid #d6dae2;
border-left:5px solid #2ca02c;border-radius:4px;padding:8px 12px;min-width:200px}.card.bad{border-left-color:#d62728}
.card .n{font-size:22px;font-weight:600}.card .d{font-size:12px;color:#5b6372}
table{border-collapse:collapse;background:#fff;margin:6px 0 4px;font-size:12.5px}
th,td{border:1px solid #d6dae2;padding:3px 8px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#eceff4}td.wrap{white-space:normal;min-width:260px}.tw{overflow-x:auto;max-width:100%}
td.num{text-align:right;font-variant-numeric:tabular-nums}.ok{color:#2ca02c;font-weight:600}
.note{color:#5b6372;font-size:12px}.chart{background:#fff;border:1px solid #d6dae2;border-radius:4px;margin:6px 0}
.chart .ct{font-weight:600;font-size:13px}.chart .cl{font-size:11px;fill:#3c4352}.chart .ml{font-size:10px}
.chart .pa{fill:#fff;stroke:#b7bdc9}.chart .gr{stroke:#eceff4}.chart .ln{stroke-width:1.8}
.chart .mk{stroke-width:1;stroke-dasharray:3 3}
"""


def _fmt(v: Any) -> tuple[str, bool]:
    if v is None:
        return "", False
    if isinstance(v, bool):
        return str(v).lower(), False
    if isinstance(v, (int, float)):
        return (f"{v:,}" if isinstance(v, int) else f"{v:,.3f}"), True
    return escape(str(v)), False


def _table(columns: Sequence[str], rows: Sequence[dict[str, Any]], total: int | None = None) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for r in rows[:HTML_ROWS]:
        cells = []
        for c in columns:
            text, num = _fmt(r.get(c))
            cls = ' class="num"' if num else (' class="wrap"' if len(text) > 40 else "")
            cells.append(f"<td{cls}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    total = len(rows) if total is None else total
    more = f'<p class="note">showing {min(len(rows), HTML_ROWS):,} of {total:,} rows</p>' if total > HTML_ROWS else ""
    return f"<div class='tw'><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>{more}"


HIDDEN_COLUMNS = frozenset({"first_ms", "last_ms", "topic_id"})  # machine-readable duplicates


def _result_section(r: QueryResult) -> str:
    title = f"<h3>{escape(r.name)} <span class='note'>— {escape(r.description)} ({r.seconds:.1f}s)</span></h3>"
    if r.row_count == 0:
        return title + '<p class="ok">✓ none</p>'
    return title + _table([c for c in r.columns if c not in HIDDEN_COLUMNS], r.rows, r.row_count)


# ---------------------------------------------------------------------------------------------
# Chart data (Spark)
# ---------------------------------------------------------------------------------------------


def _ms(iso: str) -> int:
    """The queries' ISO-8601 UTC text (``queries._ts``) -> epoch millis."""
    return (dt.datetime.fromisoformat(iso) - EPOCH) // dt.timedelta(milliseconds=1)


def _lag_series(per_topic: Sequence[dict[str, Any]]) -> dict[str, list[Series]]:
    """The lag charts from every row of ``lag_per_topic`` (a row per mirror, topic and snapshot):
    the totals and the top topics are summed and ranked here rather than by more Spark jobs."""
    totals: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    topic_pts: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    peak: dict[tuple[str, str], int | None] = {}
    for r in per_topic:
        mirror, topic, lag, at = r["mirror"], r["topic"], r["total_lag"], _ms(r["taken_at"])
        totals[mirror][at] += lag or 0
        topic_pts[(mirror, topic)].append((at, float(lag or 0)))
        was = peak.get((mirror, topic))
        peak[(mirror, topic)] = lag if was is None else (was if lag is None else max(was, lag))
    out: dict[str, list[Series]] = defaultdict(list)
    for m in sorted(totals):
        pts = [(at, float(v)) for at, v in sorted(totals[m].items())]
        out[m].append(Series("all topics", downsample(pts), color="#1d2330"))
    top: set[tuple[str, str]] = set()
    for m in totals:
        ranked = sorted((k for k in peak if k[0] == m), key=lambda k: (peak[k] is None, -(peak[k] or 0), k[1]))
        top.update(ranked[:TOP_TOPICS])
    for m, t in sorted(top):
        out[m].append(Series(t, downsample(sorted(topic_pts[(m, t)])), dashed=True))
    return out


def _episodes(timeline: Sequence[dict[str, Any]], per_mirror: int) -> list[dict[str, Any]]:
    """The last ``per_mirror`` episodes of each mirror, with their events and time window."""
    by_ep: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in timeline:
        by_ep[(r["mirror"], r["episode"])].append(r)
    out: list[dict[str, Any]] = []
    for mirror in sorted({m for m, _ in by_ep}):
        keys = sorted(e for m, e in by_ep if m == mirror)[-per_mirror:]
        for e in keys:
            rows = by_ep[(mirror, e)]
            start, end = min(r["first_ms"] for r in rows), max(r["last_ms"] for r in rows)
            margin = max((end - start) // 4, 5_000)
            # Whole seconds, so the per-second rollup buckets exactly as the raw transitions do.
            w_start = (start - margin) // 1000 * 1000
            bucket_ms = -(-(end + margin - w_start) // (BUCKETS * 1000)) * 1000
            out.append(
                {"id": len(out), "mirror": mirror, "episode": e, "rows": rows, "w_start": w_start,
                 "w_end": w_start + BUCKETS * bucket_ms - 1, "bucket_ms": bucket_ms}
            )  # fmt: skip
    return out


def _latest_states(spark: SparkSession, store: SnapshotStore) -> dict[tuple[str, str], int]:
    """Partitions per (mirror, state) in the latest snapshot: where the chart counts start from."""
    latest = store.read(spark, "partition_states", "latest").groupBy("mirror", "state_name").count().collect()
    return {(r.mirror, r.state_name): r["count"] for r in latest}


def _state_counts(
    spark: SparkSession, store: SnapshotStore, episodes: Sequence[dict[str, Any]], params: AuditParams,
    now: dict[tuple[str, str], int] | None = None,
) -> tuple[dict[int, dict[str, list[tuple[int, float]]]], dict[int, int]]:
    """Per episode id: state -> [(time, partitions in that state)], ``BUCKETS`` steps; and per
    episode id the largest negative count met walking back, clamped to 0. A negative count
    means a state the transition history does not explain (a state written without its
    transition, or history lost in the window): worth a look, and said under the chart.

    The changes come from the per-second rollup where the queries read it, else from every
    transition: the same sums, as windows and buckets are whole seconds."""
    if not episodes:
        return {}, {}
    now = _latest_states(spark, store) if now is None else now
    windows = spark.createDataFrame(
        [(e["id"], e["mirror"], e["w_start"], e["w_end"], e["bucket_ms"]) for e in episodes],
        "eid int, w_mirror string, w_start long, w_end long, bucket_ms long",
    )
    since = min(e["w_start"] for e in episodes)
    if uses_rollups(store, params):
        t = store.read(spark, "transition_seconds", "all").where(F.col("sec") >= since // 1000)
        t = t.where(F.col("from_state") != F.col("to_state"))
        t = t.select("mirror", (F.col("sec") * 1000).alias("at_ms"), "from_state_name", "to_state_name",
                     F.col("transitions").alias("n"))  # fmt: skip
    else:
        t = store.read(spark, "transitions", "all").where(F.col("at_ms") >= since)
        t = t.where(F.col("from_state") != F.col("to_state")).withColumn("n", F.lit(1))
    joined = t.join(F.broadcast(windows), (t.mirror == windows.w_mirror) & (t.at_ms >= windows.w_start))
    bucket = F.least(F.floor((F.col("at_ms") - F.col("w_start")) / F.col("bucket_ms")), F.lit(BUCKETS))
    # One scan, a row per (window, bucket, pair): each pair takes its count from one state and
    # gives it to the other, summed here.
    sums = joined.groupBy("eid", "from_state_name", "to_state_name", bucket.alias("b")).agg(F.sum("n").alias("n"))
    per: dict[tuple[int, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for r in sums.collect():
        per[(r.eid, r.from_state_name)][int(r.b)] -= int(r.n)
        per[(r.eid, r.to_state_name)][int(r.b)] += int(r.n)
    out: dict[int, dict[str, list[tuple[int, float]]]] = {}
    unexplained: dict[int, int] = {}
    for e in episodes:
        bucket_ms = e["bucket_ms"]
        states = {s for (m, s) in now if m == e["mirror"]} | {s for (i, s) in per if i == e["id"]}
        series: dict[str, list[tuple[int, float]]] = {}
        for s in sorted(states):
            d = per.get((e["id"], s), {})
            count = now.get((e["mirror"], s), 0) - d.get(BUCKETS, 0)  # at the window's end
            pts = [(e["w_start"] + BUCKETS * bucket_ms, float(count))]
            for b in range(BUCKETS - 1, -1, -1):  # walk back: undo the bucket's changes
                count -= d.get(b, 0)
                pts.append((e["w_start"] + b * bucket_ms, float(count)))
            pts.reverse()
            low = min(y for _, y in pts)
            if low < 0:
                unexplained[e["id"]] = max(unexplained.get(e["id"], 0), int(-low))
                pts = [(x, max(y, 0.0)) for x, y in pts]
            if any(y > 0 for _, y in pts):
                series[s] = pts
        out[e["id"]] = series
    return out, unexplained


# ---------------------------------------------------------------------------------------------


def build_report(
    spark: SparkSession,
    store: SnapshotStore,
    params: AuditParams,
    results: Sequence[QueryResult] = (),
    *,
    strict: bool = False,
    episodes_per_mirror: int = 3,
    generated_at: dt.datetime | None = None,
) -> str:
    """The report as HTML text. ``results``: queries already run (others are run here, two at
    a time)."""
    spark = sharing_cores(spark, REPORT_THREADS)
    # Results cut shorter than the report shows are run again; WHOLE ones are needed whole.
    have = {
        r.name: r for r in results
        if not (r.truncated and (r.name in WHOLE or len(r.rows) < HTML_ROWS))
    }  # fmt: skip
    given = have.get("failover_timeline")

    def timeline() -> tuple[QueryResult, list[dict[str, Any]], Any]:
        ft = given or run_query(spark, store, "failover_timeline", params)
        episodes = _episodes(ft.rows, episodes_per_mirror)
        return ft, episodes, _state_counts(spark, store, episodes, params, now.result())

    def configs() -> list[Row]:
        return store.read(spark, "mirror_configs", "latest").orderBy("mirror", "config_name").collect()

    with ThreadPoolExecutor(REPORT_THREADS, thread_name_prefix="audit-report") as pool:
        now = pool.submit(_latest_states, spark, store)
        chain = pool.submit(timeline)  # the longest: early, with the charts that need it after it
        runs = {
            n: pool.submit(run_query, spark, store, n, params, limit=None if n in WHOLE else HTML_ROWS, strict=strict)
            for n in QUERIES if n not in have and n != "failover_timeline"
        }  # fmt: skip
        config_rows = pool.submit(configs)
        have.update({n: f.result() for n, f in runs.items()})
        have["failover_timeline"], episodes, (counts, unexplained) = chain.result()
    lag = _lag_series(have["lag_per_topic"].rows)
    configs_ = config_rows.result()
    latest = store.latest
    failing = [r for n, r in have.items() if r.fails]
    generated = (generated_at or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%d %H:%M:%S UTC")

    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width,initial-scale=1'>",
        "<title>Cluster mirroring audit</title><style>", CSS, "</style></head><body><header>",
        "<h1>Cluster mirroring audit</h1>",
        f"<div class='meta'>{len(store.manifests)} snapshots · latest at metadata offset "
        f"{latest.metadata_offset:,}, taken {escape(latest.taken_at)} · schema v{latest.schema_version} · "
        f"mirrors: {escape(', '.join(latest.mirrors) or '—')} · generated {generated}</div>",
        f"<div class='verdict {'fail' if failing else 'pass'}'>"
        + (f"FAIL — {len(failing)} failing quer{'y' if len(failing) == 1 else 'ies'}" if failing else "PASS — no violations")
        + "</div></header><main>",
        "<div class='cards'>",
    ]  # fmt: skip
    for name, q in QUERIES.items():
        if q.kind == "info":
            continue
        r = have[name]
        parts.append(
            f"<div class='card{' bad' if r.fails else ''}'><div class='n'>{r.row_count:,}</div>"
            f"<div class='d'>{escape(name)} ({q.kind})</div></div>"
        )
    parts.append("</div><h2>Violations</h2>")
    parts += [_result_section(have[n]) for n, q in QUERIES.items() if q.kind == "violation"]

    parts.append("<h2>Lag per mirror</h2>")
    if not lag:
        parts.append("<p class='note'>no offsets exported</p>")
    for mirror, series in sorted(lag.items()):
        parts.append(line_chart(Chart(f"{mirror}: lag (source HW − destination LEO), messages", series, "lag")))

    parts.append("<h2>Failovers and failbacks</h2>")
    if not episodes:
        parts.append("<p class='ok'>no failover or failback in the exported history</p>")
    for e in episodes:
        markers = [Marker(r["first_ms"], r["event"], EVENT_COLORS.get(r["event"], "#555")) for r in e["rows"]]
        series = [Series(s, downsample(p), STATE_COLORS.get(s)) for s, p in counts.get(e["id"], {}).items()]
        title = f"{e['mirror']} episode {e['episode']}: partitions per state"
        parts.append(f"<h3>{escape(e['mirror'])} — episode {e['episode']}</h3>")
        parts.append(line_chart(Chart(title, series, "partitions", markers, step=True)))
        if e["id"] in unexplained:
            parts.append(
                f"<p class='note'>⚠ up to {unexplained[e['id']]} partition(s) hold a state the transition "
                "history does not explain; counts are clamped at 0</p>"
            )
        cols = ["event", "partitions", "topics", "first_at", "last_at", "starts_after_s", "spread_s"]
        parts.append(_table(cols, e["rows"]))
    parts.append(_result_section(have["failover_timeline"]))

    iv = have["impact_vs_outcome"]  # one line: the stops' predictions against their outcomes
    parts.append("<p class='ok'>✓ every stop did what its prediction said</p>" if iv.row_count == 0 else
                 f"<p class='note'>⚠ {iv.row_count:,} partition(s) stopped otherwise than predicted "
                 "(query impact_vs_outcome)</p>")  # fmt: skip

    parts.append("<h2>Transitions by type</h2>")
    parts.append(_result_section(have["transition_counts"]))
    parts.append("<h2>Drift</h2>")
    parts += [_result_section(have[n]) for n, q in QUERIES.items() if q.kind == "drift"]
    parts.append("<h2>Lag tables</h2>")
    parts += [_result_section(have[n]) for n in ("lag_per_mirror", "lag_per_topic")]
    parts.append("<h2>Mirror configs <span class='note'>(secrets redacted at export)</span></h2>")
    parts.append(_table(["mirror", "config_name", "config_value", "redacted"], [r.asDict() for r in configs_]))
    parts.append(
        f"<p class='note'>Store: {escape(str(store.root))} · snapshot manifests: {len(store.manifests)} · "
        f"first snapshot at offset {store.manifests[0].metadata_offset:,} ({escape(store.manifests[0].taken_at)})</p>"
    )
    parts.append("</main></body></html>")
    return "".join(parts)


def write_report(path: str | Path, html: str) -> Path:
    out = Path(path)
    layout.write_atomic(out, html.encode("utf-8"))
    return out
