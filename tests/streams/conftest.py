"""Real-broker fixtures for the stream worker tests: one noida-db broker per test session.

Each test isolates itself with its own topic prefix (``cluster_name``), so the tests share one
broker process without seeing each other's topics. The broker is stopped (SIGTERM, then kill
after 5 s) when the session ends, even on failure.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.broker import LocalBroker
from streams.config import WorkerConfig

_counter = itertools.count()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    b = LocalBroker(tmp_path_factory.mktemp("noida-db"))
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def worker_config(broker: LocalBroker, tmp_path: Path) -> WorkerConfig:
    """A config whose topics are unique to this test (prefix = a fresh cluster name)."""
    name = f"t{next(_counter)}-{uuid.uuid4().hex[:6]}"
    return WorkerConfig(
        bootstrap_servers=broker.bootstrap,
        cluster_name=name,
        state_partitions=4,
        data_dir=str(tmp_path / "data"),
        controller_listener="127.0.0.1:0",
    )
