"""A real Prometheus on loopback, for the main job's last line and the live alert tests.

bin/setup builds ``prometheus`` and ``promtool`` from Prometheus's Go module (the version pinned in
tools/prometheus/promql-names/go.mod) into the git-ignored tools/prometheus/bin/. ``LocalPrometheus``
scrapes the given workers and controllers as jobs ``kip1279-worker`` and ``kip1279-controller``
(the job names ops/prometheus/kip1279-rules.yml expects), evaluates the rules, and answers over its
HTTP API. Nothing else of the project needs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = REPO_ROOT / "tools" / "prometheus"
GO_MOD = TOOLS_DIR / "promql-names" / "go.mod"
RULES = REPO_ROOT / "ops" / "prometheus" / "kip1279-rules.yml"
WORKER_JOB, CONTROLLER_JOB = "kip1279-worker", "kip1279-controller"


def prometheus_version(go_mod: Path = GO_MOD) -> str:
    """The pinned module version (``v0.316.0``: Prometheus's Go module numbering)."""
    m = re.search(r"^\s*(?:require\s+)?github\.com/prometheus/prometheus\s+(v\S+)", go_mod.read_text(), re.M)
    if m is None:
        raise ValueError(f"no github.com/prometheus/prometheus requirement in {go_mod}")
    return m.group(1)


def tools_bin() -> Path:
    return Path(os.environ.get("KIP1279_PROMETHEUS_BIN") or TOOLS_DIR / "bin")


def tool(name: str) -> Path:
    return tools_bin() / name


def missing_reason(name: str = "prometheus") -> str | None:
    """Why ``name`` (prometheus, promtool, promql-names) cannot run here (one line), or None."""
    if tool(name).is_file() and os.access(tool(name), os.X_OK):
        return None
    if shutil.which("go") is None and not Path("/usr/local/go/bin/go").is_file():
        return "Prometheus's tools are built by bin/setup with Go, and Go is not installed (`go` is not on PATH)"
    return f"Prometheus's tools are not built in {tools_bin()}: run bin/setup"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config_text(targets: Mapping[str, Sequence[str]], rule_files: Sequence[Path], interval_s: float) -> str:
    """prometheus.yml: one static job per entry of ``targets`` (JSON is YAML)."""
    every = f"{int(interval_s * 1000)}ms"
    return json.dumps({
        "global": {"scrape_interval": every, "scrape_timeout": every, "evaluation_interval": every},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(addrs)}]}
                           for job, addrs in targets.items() if addrs],
    }, indent=1)  # fmt: skip


class LocalPrometheus:
    """A Prometheus server scraping ``targets`` (job -> HOST:PORTs) with ``rule_files``."""

    def __init__(self, workdir: Path, targets: Mapping[str, Sequence[str]], rule_files: Sequence[Path] = (RULES,),
                 interval_s: float = 1.0) -> None:  # fmt: skip
        self.workdir = workdir
        self.targets, self.rule_files, self.interval_s = targets, rule_files, interval_s
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> LocalPrometheus:
        reason = missing_reason()
        if reason is not None:
            raise FileNotFoundError(reason)
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(config_text(self.targets, self.rule_files, self.interval_s))
        self.port = free_port()
        log = open(self.workdir / "prometheus.log", "wb")  # noqa: SIM115 - the child writes it
        self.proc = subprocess.Popen(
            [str(tool("prometheus")), f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"prometheus not ready within {timeout} s: {self.log_tail()}")

    def log_tail(self, n: int = 20) -> str:
        path = self.workdir / "prometheus.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else ""

    def api(self, path: str, **params: str) -> Any:
        """``data`` of a GET on the HTTP API (``/api/v1/...``)."""
        query = "&".join(f"{k}={urllib.parse.quote(v)}" for k, v in params.items())
        with urllib.request.urlopen(f"{self.url}{path}{'?' + query if query else ''}", timeout=10) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise RuntimeError(f"{path}: {body}")
        return body["data"]

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing): labels, annotations, state, activeAt, value."""
        return list(self.api("/api/v1/alerts")["alerts"])

    def firing(self) -> dict[str, list[dict[str, str]]]:
        """Alert name -> the label sets firing now."""
        out: dict[str, list[dict[str, str]]] = {}
        for a in self.alerts():
            if a["state"] == "firing":
                out.setdefault(a["labels"]["alertname"], []).append(a["labels"])
        return out

    def targets_up(self) -> dict[str, bool]:
        """scrape URL -> whether its last scrape succeeded."""
        return {t["scrapeUrl"]: t["health"] == "up" for t in self.api("/api/v1/targets")["activeTargets"]}

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def alerts_line(prom: LocalPrometheus) -> str:
    """The main job's last line: ``alerts: none firing`` or which fire (and which are pending)."""
    active = prom.alerts()

    def named(state: str) -> str:
        shown = set()
        for a in active:
            if a["state"] == state:
                labels = a["labels"]
                who = labels.get("mirror") or labels.get("instance", "")
                shown.add(labels["alertname"] + (f" ({who})" if who else ""))
        return ", ".join(sorted(shown))

    firing, pending = named("firing"), named("pending")
    return "alerts: " + (f"{firing} firing" if firing else "none firing") + (f"; pending: {pending}" if pending else "")
