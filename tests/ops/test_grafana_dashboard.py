"""The Grafana dashboard (ops/grafana/kip1279-mirrors.json): every query parses with Prometheus's
own PromQL parser (``promql-names``, built by bin/setup from Prometheus's Go module) and names
only metrics the worker or the controller serves, read from their collectors, not from a list.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_tools import require

from streams.config import WorkerConfig
from streams.worker.metrics import ControllerMetrics, WorkerMetrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "ops" / "grafana" / "kip1279-mirrors.json"
PROMETHEUS_OWN = {"up", "ALERTS"}  # series Prometheus makes itself
# Grafana's variables, as Grafana substitutes them before Prometheus sees a query.
VARIABLES = {"$__rate_interval": "1m", "$mirror": ".*"}


def served_metrics() -> set[str]:
    """Every sample name a worker's and a controller's /metrics can hold, from their collectors
    (families are listed even with no sample; histograms and counters with their suffixes)."""
    worker = SimpleNamespace(config=WorkerConfig(), store=SimpleNamespace(lock=threading.Lock(), durable={}),
                             stats={}, mirrors={}, clock_ms=lambda: 0, loader=None,
                             image=SimpleNamespace(mirrors=SimpleNamespace(mirrors={}), topics={}, offset=-1))  # fmt: skip
    names: set[str] = set()
    for metrics in (WorkerMetrics(worker), ControllerMetrics(SimpleNamespace())):  # type: ignore[arg-type]
        metrics.checks = (True, True)  # as after the refresh a scrape runs first
        for fam in metrics.registry.collect():
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(fam.type, ("",))
            names |= {fam.name + s for s in suffixes}
    return names


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # a collapsed row holds its panels
    return out


def queries(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]


def substituted(query: str) -> str:
    for var, value in VARIABLES.items():
        query = query.replace(var, value)
    assert "$" not in query, f"a Grafana variable the test does not know: {query}"
    return query


def parse(queries: list[str]) -> list[dict[str, Any]]:
    done = subprocess.run([str(require("promql-names"))], input=json.dumps(queries), capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    return json.loads(done.stdout)


def test_every_query_parses_and_names_only_served_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = queries(dashboard)
    assert len(exprs) >= 20
    served = served_metrics() | PROMETHEUS_OWN
    used: set[str] = set()
    for expr, got in zip(exprs, parse([substituted(q) for q in exprs]), strict=True):
        assert "error" not in got, f"{expr}: {got['error']}"
        assert got["metrics"], expr
        assert set(got["metrics"]) <= served, f"{expr}: no such metric {set(got['metrics']) - served}"
        used |= set(got["metrics"])
    var = next(v for v in dashboard["templating"]["list"] if v["name"] == "mirror")
    m = re.fullmatch(r"label_values\((\w+), mirror\)", var["query"]["query"])
    assert m and m.group(1) in served
    # The panels the issue asks for read these: states, readiness, lag, fetches, syncs, stops, metadata log.
    assert {"kip1279_mirror_partitions", "kip1279_mirror_failover_ready", "kip1279_mirror_max_lag_offsets",
            "kip1279_mirror_partition_lag_offsets", "kip1279_mirror_fetch_bytes_total",
            "kip1279_mirror_sync_last_success_timestamp_seconds", "kip1279_mirror_partition_stop_seconds_bucket",
            "kip1279_mirror_stop_request_seconds_bucket", "kip1279_metadata_log_lag_offsets"} <= used  # fmt: skip


def test_the_check_catches_a_typo_and_a_syntax_error():
    bad = parse(["sum(kip1279_mirror_max_lag)", "sum by (mirror (kip1279_mirror_partitions)", '{mirror="a"}'])
    assert bad[0]["metrics"] == ["kip1279_mirror_max_lag"] and "kip1279_mirror_max_lag" not in served_metrics()
    assert "parse error" in bad[1]["error"]
    assert bad[2]["error"] == "a selector names no metric"


def test_the_panels_are_well_formed():
    dashboard = json.loads(DASHBOARD.read_text())
    ps = panels(dashboard)
    assert len({p["id"] for p in ps}) == len(ps)
    for p in ps:
        assert p["title"]
        assert 0 <= p["gridPos"]["x"] and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        if p["type"] != "row":
            assert p["description"] and p["targets"], p["title"]
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "mirror"]
    assert [p["title"] for p in ps if p["type"] == "row"] == ["Mirrors at a glance", "Per mirror ($mirror)",
                                                               "Stops and the metadata log"]  # fmt: skip
