"""A real Kafka-protocol broker on loopback, for development, demos and tests.

Apache Kafka cannot be installed on these machines, so the project starts noida-db (pinned
to 0.2.3), a single Rust binary that speaks the Kafka wire protocol among others; we enable
only its Kafka listener. A user with a real Kafka cluster skips all of this and points the
worker at it with ``bootstrap.servers`` (env ``KIP1279_BOOTSTRAP``).

The broker is started as the binary itself, not through the ``noida-db`` Python wrapper, so
the PID we signal is the broker's. Readiness is a raw ApiVersions v0 request (api key 18)
answered with our correlation id. It never listens beyond loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import ipaddress
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

NOIDA_DB_VERSION = "0.2.3"
LOOPBACK = "127.0.0.1"
API_VERSIONS_KEY = 18
STOP_GRACE_S = 5.0
DEFAULT_READY_TIMEOUT_S = 30.0
_CLIENT_ID = b"kip1279-probe"


class BrokerError(RuntimeError):
    pass


def noida_binary() -> Path:
    """The noida-db binary shipped inside the pinned ``noida-db`` wheel."""
    try:
        version = importlib.metadata.version("noida-db")
    except importlib.metadata.PackageNotFoundError:
        raise BrokerError(f"noida-db is not installed: pip install noida-db=={NOIDA_DB_VERSION}") from None
    if version != NOIDA_DB_VERSION:
        # Other versions were never checked against aiokafka/Faust; refuse rather than guess.
        raise BrokerError(f"noida-db {version} is installed; this project is tested with {NOIDA_DB_VERSION} only")
    import noida_db

    path = Path(noida_db.__file__).resolve().parent / ("noida-db.exe" if os.name == "nt" else "noida-db")
    if not path.is_file():
        raise BrokerError(f"noida-db binary not found at {path}")
    mode = path.stat().st_mode
    if not mode & stat.S_IXUSR:
        path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def require_loopback(host: str) -> str:
    """Refuse any bind address that is not a loopback one."""
    try:
        ok = ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = host == "localhost"
    if not ok:
        raise BrokerError(f"refusing to listen on {host!r}: the local broker only binds loopback")
    return host


def free_port(host: str = LOOPBACK) -> int:
    """A port free on ``host`` right now (the broker binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def api_versions_request(correlation_id: int) -> bytes:
    """A size-prefixed ApiVersions v0 request (request header v1: key, version, correlation id, client id)."""
    body = struct.pack(">hhih", API_VERSIONS_KEY, 0, correlation_id, len(_CLIENT_ID)) + _CLIENT_ID
    return struct.pack(">i", len(body)) + body


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        buf += chunk
    return bytes(buf)


def probe(host: str, port: int, timeout: float = 1.0, correlation_id: int = 0x4B1279) -> bool:
    """True when the broker answers an ApiVersions v0 request with our correlation id."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(api_versions_request(correlation_id))
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            if size < 4:
                return False
            (cid,) = struct.unpack(">i", _recv_exactly(sock, 4))
            return cid == correlation_id
    except (OSError, struct.error):
        return False


async def probe_async(host: str, port: int, timeout: float = 1.0, correlation_id: int = 0x4B1279) -> bool:
    """``probe`` for event-loop code: never blocks the loop."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (TimeoutError, OSError):
        return False
    try:
        writer.write(api_versions_request(correlation_id))
        await writer.drain()
        header = await asyncio.wait_for(reader.readexactly(8), timeout)
        size, cid = struct.unpack(">ii", header)
        return size >= 4 and cid == correlation_id
    except (TimeoutError, OSError, asyncio.IncompleteReadError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _die_with_parent() -> None:
    """Runs in the child before exec: ask Linux for SIGTERM when the parent goes away."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def stop_process(proc: subprocess.Popen[bytes] | None, grace: float = STOP_GRACE_S, kill: bool = False) -> int | None:
    """SIGTERM (SIGKILL right away with ``kill``), wait up to ``grace`` seconds, then SIGKILL.
    The exit code; None without a process."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class LocalBroker:
    """One noida-db Kafka listener on loopback, with its own data directory.

    Use as a context manager, or call ``start()``/``stop()``. Committed data and group offsets
    survive a restart on the same data directory (noida-db keeps them in ``kafka.json``).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int | None = None,
        host: str = LOOPBACK,
        log_path: str | os.PathLike[str] | None = None,
        die_with_parent: bool = True,
    ) -> None:
        """``die_with_parent``: on Linux the broker gets SIGTERM if the thread that started it
        dies, so a crashed test run or script never leaves an orphan broker behind."""
        self.host = require_loopback(host)
        self.die_with_parent = die_with_parent
        self.port = port or free_port(host)
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path) if log_path else self.data_dir / "broker.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: object | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def command(self) -> list[str]:
        return [
            str(noida_binary()), "start",
            "--data-dir", str(self.data_dir),
            "--host", self.host,
            "--only", "kafka",
            "--kafka-port", str(self.port),
        ]  # fmt: skip

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = DEFAULT_READY_TIMEOUT_S) -> LocalBroker:
        if self.is_running():
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_file = log
        self._proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the caller's terminal does not half-kill it
            preexec_fn=_die_with_parent if self.die_with_parent else None,
        )
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float = DEFAULT_READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        attempt = 0
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise BrokerError(f"noida-db exited with code {self._proc.returncode}; see {self.log_path}: {self._log_tail()}")
            attempt += 1
            if probe(self.host, self.port, timeout=1.0, correlation_id=attempt):
                return
            time.sleep(0.05)
        raise BrokerError(f"broker on {self.bootstrap} not ready after {timeout:.0f}s; see {self.log_path}")

    def _log_tail(self, limit: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-limit:].decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def stop(self, grace: float = STOP_GRACE_S) -> int | None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL. Returns the exit code."""
        proc, self._proc = self._proc, None
        code = stop_process(proc, grace)
        log, self._log_file = self._log_file, None
        if log is not None:
            log.close()  # type: ignore[attr-defined]
        return code

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class StopSignals:
    """SIGINT and SIGTERM set ``stopping`` instead of raising, so a foreground command can stop
    what it started before it exits. Install before printing the address: a SIGTERM right after
    it must still stop the process."""

    def __init__(self) -> None:
        self.stopping = False
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def wait(self, is_running: Callable[[], bool]) -> None:
        """Until a signal comes or ``is_running`` turns false."""
        while not self.stopping and is_running():
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    """``kip1279-broker``: run a loopback Kafka-protocol broker in the foreground until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="kip1279-broker",
        description=f"Run a local Kafka-protocol broker (noida-db {NOIDA_DB_VERSION}) on 127.0.0.1. "
        "Development only: with a real Kafka cluster, set bootstrap.servers / KIP1279_BOOTSTRAP instead.",
    )
    parser.add_argument("--data-dir", help="where the broker keeps its data (default: a new temporary directory)")
    parser.add_argument("--port", type=int, default=None, help="Kafka port (default: a free one)")
    parser.add_argument("--ready-timeout", type=float, default=DEFAULT_READY_TIMEOUT_S)
    args = parser.parse_args(argv)
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="kip1279-broker-")
    # Handlers first: a SIGTERM right after the address is printed must still stop the broker.
    signals = StopSignals()
    try:
        broker = LocalBroker(data_dir, port=args.port).start(args.ready_timeout)
    except BrokerError as e:
        print(f"kip1279-broker: {e}", file=sys.stderr)
        return 1
    print(broker.bootstrap, flush=True)
    print(f"data dir {data_dir}, pid {broker.pid}; Ctrl-C stops it", file=sys.stderr, flush=True)
    try:
        signals.wait(broker.is_running)
    finally:
        code = broker.stop()
    if not signals.stopping:
        print(f"kip1279-broker: broker exited on its own (code {code})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
