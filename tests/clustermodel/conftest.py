"""Fixtures of the cluster model tests: a model server in a subprocess on a free loopback port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


class ServerProcess:
    """A running ``python -m clustermodel.server``; ``stop`` sends SIGTERM and waits."""

    def __init__(self, *args: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "clustermodel.server", "--host", "127.0.0.1", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r} {self.proc.stderr.read() if self.proc.stderr else ''}")
        self.port = int(line.split()[1])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def model_server() -> Iterator[ServerProcess]:
    server = ServerProcess("--cluster", "default", "--seed", "1")
    yield server
    assert server.stop() == 0


@pytest.fixture
def server_factory() -> Iterator[type[ServerProcess]]:
    started: list[ServerProcess] = []

    class Factory(ServerProcess):
        def __init__(self, *args: str) -> None:
            super().__init__(*args)
            started.append(self)

    yield Factory
    for server in started:
        server.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing test that used an in-process model prints its seed and the steps to reproduce it."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    from clustermodel import ClusterModel

    funcargs = getattr(item, "funcargs", {})
    for name, value in funcargs.items():
        if isinstance(value, ClusterModel):
            report.sections.append((f"model {name!r}: seed and steps", value.format_repro()))
