"""End to end, real processes and a real Prometheus: the alerts of ops/prometheus fire and clear.

The model server, B's controller and a ``kip1279-worker`` on the session's broker, each serving
/metrics; a Prometheus server (built by bin/setup from Prometheus's Go module) scrapes both as jobs
``kip1279-worker`` and ``kip1279-controller`` every 0.5 s and evaluates the shipped rules. The
source A is made unreachable: Kip1279MirrorPartitionsFailed and Kip1279MirrorNotFailoverReady
fire, as Prometheus's HTTP API reports them; A back, both clear. The rules are the shipped file
with only those two alerts' ``for`` cut to 1 s (10 minutes of waiting proves nothing here: the
promtool unit tests pin the durations).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from prometheus_tools import require
from test_streams_e2e_source_outage import BACKOFF, MIRROR
from worker_harness import Rig

from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker
from streams.demo.prometheus import CONTROLLER_JOB, RULES, WORKER_JOB, LocalPrometheus, alerts_line

WATCHED = ("Kip1279MirrorPartitionsFailed", "Kip1279MirrorNotFailoverReady")


def rules_with_short_fors(path: Path) -> Path:
    spec = yaml.safe_load(RULES.read_text())
    cut = 0
    for group in spec["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") in WATCHED:
                rule["for"] = "1s"
                cut += 1
    assert cut == len(WATCHED)
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.slow
def test_prometheus_fires_the_failed_and_readiness_alerts_in_a_source_outage_and_clears_them(
        broker: LocalBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    require("prometheus")
    monkeypatch.setenv("KIP1279_METRICS_LISTENER", "127.0.0.1:0")
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 2, "audit": 1}, tick=0.1, seed=37)
    prom = None
    try:
        rig.start(("B",))
        controller = rig.printed("controller-B", "METRICS")
        rig.spawn_worker("B")
        worker = rig.printed("worker-B", "METRICS")
        prom = LocalPrometheus(tmp_path / "prometheus", {WORKER_JOB: [worker], CONTROLLER_JOB: [controller]},
                               [rules_with_short_fors(tmp_path / "rules.yml")], interval_s=0.5).start()  # fmt: skip
        n = len(rig.tps)

        rig.create_mirror("B", MIRROR, "A", BACKOFF)
        rig.produce("A", 0.5, 37)
        rig.start_topics("B", MIRROR)
        rig.wait("every partition MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING))
        rig.wait("both targets scraped", lambda: list(prom.targets_up().values()) == [True, True], 30)
        rig.wait("Prometheus sees the mirror ready for a failover",
                 lambda: _value(prom, "mirror:kip1279_mirror_failover_ready:min") == 1, 60)  # fmt: skip
        assert prom.firing() == {}
        assert alerts_line(prom).startswith("alerts: none firing")

        # A unreachable: FAILED, and not ready.
        a = rig.clients["A"]
        a.set_unreachable(True)
        rig.wait("both alerts firing", lambda: set(WATCHED) <= set(prom.firing()), 60)
        firing = {x["labels"]["alertname"]: x for x in prom.alerts() if x["state"] == "firing"}
        failed = firing["Kip1279MirrorPartitionsFailed"]
        assert failed["labels"]["mirror"] == MIRROR and failed["labels"]["severity"] == "critical"
        assert failed["annotations"]["summary"] == f"Mirror {MIRROR}: {int(float(failed['value']))} partition(s) FAILED"
        assert 1 <= float(failed["value"]) <= n
        assert firing["Kip1279MirrorNotFailoverReady"]["labels"]["mirror"] == MIRROR
        assert "Kip1279MirrorPartitionsFailed" in alerts_line(prom)
        assert prom.targets_up() and all(prom.targets_up().values()), "a dead source is no reason to restart"

        # A back: MIRRORING again by itself, ready again, and the alerts gone (not even pending).
        a.set_unreachable(False)
        rig.wait("every partition MIRRORING again", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING), 60)
        rig.wait("both alerts cleared",
                 lambda: not {x["labels"]["alertname"] for x in prom.alerts()} & set(WATCHED), 60)  # fmt: skip
        assert _value(prom, "mirror:kip1279_mirror_failover_ready:min") == 1
        assert _value(prom, "mirror:kip1279_mirror_failed_partitions:sum") == 0
    finally:
        if prom is not None:
            prom.stop()
        rig.close()


def _value(prom: LocalPrometheus, query: str) -> float | None:
    result = prom.api("/api/v1/query", query=query)["result"]
    return float(result[0]["value"][1]) if result else None


def test_the_alerts_line_says_none_or_which(tmp_path: Path) -> None:
    """The main job's last line, from a real Prometheus with a rule that fires at once."""
    require("prometheus")
    rules = tmp_path / "always.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "t", "rules": [
        {"alert": "Kip1279Always", "expr": 'label_replace(vector(1), "mirror", "m", "", "")'},
        {"alert": "Kip1279Later", "expr": "vector(1)", "for": "1h"}]}]}))  # fmt: skip
    prom = LocalPrometheus(tmp_path / "p", {}, [rules], interval_s=0.2).start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(prom.alerts()) < 2:
            time.sleep(0.2)
        assert alerts_line(prom) == "alerts: Kip1279Always (m) firing; pending: Kip1279Later"
    finally:
        prom.stop()
    empty = LocalPrometheus(tmp_path / "q", {}, [], interval_s=0.2).start()
    try:
        assert alerts_line(empty) == "alerts: none firing"
    finally:
        empty.stop()
