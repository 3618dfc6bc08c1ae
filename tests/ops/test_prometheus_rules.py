"""The alert and recording rules (ops/prometheus/kip1279-rules.yml) under promtool.

``promtool check rules`` lints them; each alert has its own unit test file,
ops/prometheus/tests/<Alert>.yml, run with ``promtool test rules``: one pytest test per alert,
and each file must show the alert both firing and not firing. Every metric a rule reads is one
the worker or the controller serves (``test_grafana_dashboard.served_metrics``), and every alert
has a runbook section in docs/operations.md.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_tools import require
from test_grafana_dashboard import PROMETHEUS_OWN, parse, served_metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "ops" / "prometheus" / "kip1279-rules.yml"
TESTS = ROOT / "ops" / "prometheus" / "tests"
RUNBOOK = ROOT / "docs" / "operations.md"


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


ALERTS = [r["alert"] for r in rules() if "alert" in r]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(require("promtool")), *args], capture_output=True, text=True, timeout=120, cwd=TESTS)


def test_promtool_check_rules_passes():
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_every_test_file_is_an_alert_or_the_recording_rules():
    assert sorted(p.stem for p in TESTS.glob("*.yml")) == sorted([*ALERTS, "recording"])


@pytest.mark.parametrize("alert", ALERTS)
def test_alert_fires_and_does_not_fire_as_its_unit_test_says(alert: str):
    spec = yaml.safe_load((TESTS / f"{alert}.yml").read_text())
    cases = [c for t in spec["tests"] for c in t.get("alert_rule_test", [])]
    assert {c["alertname"] for c in cases} == {alert}, "one file, one alert"
    assert any(c["exp_alerts"] for c in cases), "no case where it fires"
    assert any(not c["exp_alerts"] for c in cases), "no case where it does not fire"
    done = promtool("test", "rules", f"{alert}.yml")
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_recording_rules_compute_what_the_alerts_read():
    done = promtool("test", "rules", "recording.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_broken_expectation_fails(tmp_path: Path):
    """promtool really compares: the same test expecting nothing where the alert fires fails."""
    spec = yaml.safe_load((TESTS / "Kip1279MirrorPartitionsFailed.yml").read_text())
    spec["rule_files"] = [str(RULES)]
    for t in spec["tests"]:
        for c in t["alert_rule_test"]:
            c["exp_alerts"] = []
    (tmp_path / "broken.yml").write_text(yaml.safe_dump(spec))
    done = promtool("test", "rules", str(tmp_path / "broken.yml"))
    assert done.returncode != 0 and "Kip1279MirrorPartitionsFailed" in done.stdout + done.stderr


def test_every_alert_has_a_runbook_section_its_annotation_points_to():
    text = RUNBOOK.read_text()
    for r in rules():
        if "alert" not in r:
            continue
        assert f"### {r['alert']}\n" in text, f"docs/operations.md has no section for {r['alert']}"
        assert r["annotations"]["runbook"] == f"docs/operations.md#{r['alert'].lower()}"
        assert r["labels"]["severity"] in ("critical", "warning", "info")


def test_rules_read_only_served_metrics_and_recorded_ones():
    recorded = {r["record"] for r in rules() if "record" in r}
    known = served_metrics() | PROMETHEUS_OWN | recorded
    exprs = [r["expr"] for r in rules()]
    for expr, got in zip(exprs, parse(exprs), strict=True):
        assert "error" not in got and got["metrics"], (expr, got)
        assert set(got["metrics"]) <= known, f"{expr}: no such metric {set(got['metrics']) - known}"


def test_the_example_scrape_configuration_loads_the_rules():
    done = promtool("check", "config", str(RULES.parent / "prometheus.example.yml"))
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
