"""The local broker: start, ApiVersions readiness, clean stop, loopback only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.brokers.noida import BrokerError, LocalBroker, free_port, probe, probe_async, require_loopback


def test_start_probe_stop(tmp_path: Path) -> None:
    b = LocalBroker(tmp_path / "b")
    try:
        b.start(timeout=20)
        assert b.is_running() and b.host == "127.0.0.1"
        assert probe(b.host, b.port, correlation_id=12345)
        pid = b.pid
    finally:
        code = b.stop()
    assert code is not None
    assert not b.is_running()
    assert not probe(b.host, b.port, timeout=0.3)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the broker process itself is gone, not just a wrapper


async def test_async_probe_of_shared_broker(broker: LocalBroker) -> None:
    assert await probe_async(broker.host, broker.port, correlation_id=7)
    assert not await probe_async("127.0.0.1", free_port(), timeout=0.3)


def test_refuses_non_loopback(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match="loopback"):
        LocalBroker(tmp_path, host="0.0.0.0")
    assert require_loopback("127.0.0.1") == "127.0.0.1"
    assert require_loopback("::1") == "::1"


def test_restart_keeps_data_dir(tmp_path: Path) -> None:
    port = free_port()
    with LocalBroker(tmp_path / "d", port=port) as b:
        assert b.port == port
    with LocalBroker(tmp_path / "d", port=port) as b:
        assert probe(b.host, b.port)


def test_console_entry_prints_bootstrap_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.brokers.noida", "--data-dir", str(tmp_path / "cli")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline().strip()  # type: ignore[union-attr]
        host, _, port = line.rpartition(":")
        assert host == "127.0.0.1" and port.isdigit(), line
        assert probe(host, int(port))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        deadline = time.monotonic() + 5
        while probe(host, int(port), timeout=0.2) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not probe(host, int(port), timeout=0.2)  # the broker child was stopped too
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_broker_does_not_outlive_a_killed_parent(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.brokers.noida", "--data-dir", str(tmp_path / "orphan")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        host, _, port = proc.stdout.readline().strip().rpartition(":")  # type: ignore[union-attr]
        assert probe(host, int(port))
    finally:
        proc.kill()  # no chance to clean up: the kernel's parent-death signal must do it
        proc.wait()
    deadline = time.monotonic() + 6
    while probe(host, int(port), timeout=0.2) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not probe(host, int(port), timeout=0.2)
