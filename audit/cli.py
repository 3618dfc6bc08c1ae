"""``kafka-cluster-mirrors audit``: run audit queries over a snapshot store; write the report.

Usage::

    audit [QUERY ...] --snapshots DIR [--json] [--html OUT] [--master URL]
          [--stuck-after 5m] [--episode-gap 5m] [--mirror NAME ...] [--limit N] [--strict]
          [--progress | --no-progress]
    audit --list
    audit export --snapshots DIR (--from-json FILE | --sample)

No QUERY runs them all. Exit codes: 0 no violation; 1 a violation query returned rows (with
``--strict``, drift too), so the command can gate a pipeline; 2 bad usage or no snapshot.
``main(argv)`` takes the arguments after ``audit``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from typing import Any, TextIO

EXIT_OK, EXIT_VIOLATIONS, EXIT_USAGE = 0, 1, 2
CELL_WIDTH = 48


def _duration(text: str) -> float:
    """``300``, ``300s``, ``5m``, ``2h``, ``1d`` -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (examples: 300, 90s, 5m, 2h)")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}[m.group(2)]
    return float(m.group(1)) * scale


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kafka-cluster-mirrors audit",
        description="Audit cluster-mirroring snapshots on Spark. Exit code 1 when a violation query finds rows.",
    )
    p.add_argument("queries", nargs="*", metavar="QUERY", help="queries to run (default: all; see --list)")
    p.add_argument("--snapshots", metavar="DIR", help="snapshot store written by the export")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    p.add_argument("--html", metavar="OUT", help="also write the self-contained HTML report to OUT")
    p.add_argument("--master", help="Spark master (default: $AUDIT_SPARK_MASTER or local[*])")
    p.add_argument("--stuck-after", type=_duration, default=300.0, metavar="DURATION",
                   help="stuck_partitions threshold (default 5m)")  # fmt: skip
    p.add_argument("--episode-gap", type=_duration, default=300.0, metavar="DURATION",
                   help="failover events further apart start a new episode (default 5m)")  # fmt: skip
    p.add_argument("--mirror", action="append", default=[], metavar="NAME", help="only this mirror (repeatable)")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="rows shown per query (0: all; default 50)")
    p.add_argument("--strict", action="store_true", help="config and ACL drift fail the audit too")
    p.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")  # fmt: skip
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--list", action="store_true", help="list the queries and exit")
    return p


def _export_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kafka-cluster-mirrors audit export", description="Write audit snapshots.")
    p.add_argument("--snapshots", metavar="DIR", required=True)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from-json", metavar="FILE", help="an AuditSnapshot as JSON (or a JSON list of them)")
    src.add_argument("--sample", action="store_true", help="the built-in demo history (audit.sample)")
    return p


def _cell(v: Any) -> str:
    text = "" if v is None else str(v)
    text = text.replace("\n", " ")
    return text if len(text) <= CELL_WIDTH else text[: CELL_WIDTH - 1] + "…"


def print_table(columns: Sequence[str], rows: Sequence[dict[str, Any]], out: TextIO) -> None:
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    out.write("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() + "\n")


def _export(argv: Sequence[str], out: TextIO, err: TextIO) -> int:
    import msgspec

    from audit.export import ExportError, export_snapshot
    from audit.model import AuditSnapshot

    args = _export_parser().parse_args(argv)
    if args.sample:
        from audit.sample import sample_history

        snaps = sample_history()
    else:
        try:
            raw = open(args.from_json, "rb").read()
            if raw.lstrip()[:1] == b"[":
                snaps = msgspec.json.decode(raw, type=list[AuditSnapshot])
            else:
                snaps = [msgspec.json.decode(raw, type=AuditSnapshot)]
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as e:
            err.write(f"audit export: {args.from_json}: {e}\n")
            return EXIT_USAGE
    for s in snaps:
        try:
            r = export_snapshot(s, args.snapshots)
        except ExportError as e:
            err.write(f"audit export: {e}\n")
            return EXIT_USAGE
        what = "already exported" if r.skipped else f"{r.rows:,} rows in {r.seconds:.2f}s"
        out.write(f"snapshot offset {s.metadata_offset} taken {r.manifest.taken_at}: {what}\n")
    return EXIT_OK


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["export"]:
        return _export(argv[1:], out, err)

    from audit.queries import QUERIES, AuditParams

    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on bad usage, 0 on --help
        return int(e.code or 0)
    if args.list:
        for name, q in QUERIES.items():
            out.write(f"{name:<30} {q.kind:<10} {q.description}\n")
        return EXIT_OK
    unknown = [q for q in args.queries if q not in QUERIES]
    if unknown:
        err.write(f"audit: unknown quer{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}; "
                  f"known: {', '.join(QUERIES)}\n")  # fmt: skip
        return EXIT_USAGE
    if not args.snapshots:
        err.write("audit: --snapshots DIR is required\n")
        return EXIT_USAGE

    from audit.layout import ManifestError
    from audit.run import run_queries
    from audit.spark import SnapshotStore, spark_session

    try:
        store = SnapshotStore(args.snapshots)
        latest = store.latest
    except (LookupError, ManifestError) as e:
        err.write(f"audit: {e}\n")
        return EXIT_USAGE
    names = list(dict.fromkeys(args.queries)) or list(QUERIES)
    params = AuditParams(stuck_after_s=args.stuck_after, episode_gap_s=args.episode_gap, mirrors=tuple(args.mirror))
    progress = err.isatty() if args.progress is None else args.progress
    spark = spark_session(args.master)
    results = run_queries(
        spark, store, names, params, limit=args.limit or None, strict=args.strict, progress=progress
    )
    failing = [r for r in results if r.fails]
    if args.html:
        from audit.report import build_report, write_report

        path = write_report(args.html, build_report(spark, store, params, results, strict=args.strict))
        err.write(f"audit: report written to {path}\n")

    if args.json:
        doc = {
            "snapshots": {
                "root": str(store.root),
                "count": len(store.manifests),
                "latest_metadata_offset": latest.metadata_offset,
                "latest_taken_at": latest.taken_at,
                "schema_version": latest.schema_version,
            },
            "queries": [r.to_json() for r in results],
            "failing_queries": [r.name for r in failing],
            "ok": not failing,
        }
        out.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        out.write(f"{len(store.manifests)} snapshots; latest at metadata offset {latest.metadata_offset} "
                  f"taken {latest.taken_at}\n")  # fmt: skip
        for r in results:
            flag = "FAIL" if r.fails else ("ok" if r.kind != "info" else "")
            out.write(f"\n== {r.name} ({r.kind}) {r.row_count} rows {flag} [{r.seconds:.1f}s]\n")
            if r.rows:
                print_table(r.columns, r.rows, out)
            if r.truncated:
                out.write(f"... {r.row_count - len(r.rows)} more rows (--limit 0 shows all)\n")
        verdict = f"FAIL: {', '.join(r.name for r in failing)}" if failing else "PASS"
        out.write(f"\naudit {verdict}\n")
    return EXIT_VIOLATIONS if failing else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
