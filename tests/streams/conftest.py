"""Real-broker fixtures for the stream worker tests: one noida-db broker per test session, and
the session's Apache Kafka node (tests/kafka_fixtures.py) for the modules that opt in.

A module marked ``pytestmark = pytest.mark.brokers("noida-db", "apache-kafka")`` runs each test
that uses ``worker_config`` (or ``kafka_broker``) once per broker; unmarked, they run on noida-db
only. On Apache Kafka they are skipped with one reason when Java or its jars are missing. The
``slow`` ones (the worker crash and rebalance scenarios) run there too, on the session's node;
KIP1279_KAFKA_SCENARIOS=0 leaves them out (a local shortcut; CI runs them).

Each test isolates itself with its own topic prefix (``cluster_name``), so the tests share one
broker process without seeing each other's topics. The broker is stopped (SIGTERM, then kill
after 5 s) when the session ends, even on failure.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.brokers.noida import LocalBroker
from streams.config import WorkerConfig

_counter = itertools.count()
BROKER_KINDS = ("noida-db", "apache-kafka")
SCENARIOS_ENV = "KIP1279_KAFKA_SCENARIOS"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "brokers(*kinds): run the module's broker tests on each of noida-db, apache-kafka")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("brokers")
    if marker is not None and "kafka_broker" in metafunc.fixturenames:
        unknown = set(marker.args) - set(BROKER_KINDS)
        if unknown:
            raise pytest.UsageError(f"unknown broker kinds {sorted(unknown)}; known: {BROKER_KINDS}")
        metafunc.parametrize("kafka_broker", marker.args, indirect=True)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    b = LocalBroker(tmp_path_factory.mktemp("noida-db"))
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def kafka_broker(request: pytest.FixtureRequest) -> object:
    """The broker of this test: noida-db, or (parametrised by ``brokers``) the session's Apache Kafka.
    Anything with ``.bootstrap``."""
    kind = getattr(request, "param", "noida-db")
    if kind == "apache-kafka" and request.node.get_closest_marker("slow") and os.environ.get(SCENARIOS_ENV) == "0":
        pytest.skip(f"slow scenario on Apache Kafka left out by {SCENARIOS_ENV}=0")
    return request.getfixturevalue("broker" if kind == "noida-db" else "apache_kafka")


@pytest.fixture
def worker_config(kafka_broker: LocalBroker, tmp_path: Path) -> WorkerConfig:
    """A config whose topics are unique to this test (prefix = a fresh cluster name)."""
    name = f"t{next(_counter)}-{uuid.uuid4().hex[:6]}"
    return WorkerConfig(
        bootstrap_servers=kafka_broker.bootstrap,
        cluster_name=name,
        state_partitions=4,
        data_dir=str(tmp_path / "data"),
        controller_listener="127.0.0.1:0",
    )


@pytest.fixture(scope="session")
def loaded_kafka_source(apache_kafka_3: object) -> Iterator[object]:
    """The 3-broker Apache Kafka source loaded once by ``kafka_source_data.load_source`` at
    replication factor 3 (same topics, groups, configs and open transaction as the noida-db
    source); shared by the port tests and the end-to-end mirror test."""
    import asyncio

    from kafka_source_data import load_source

    loop = asyncio.new_event_loop()
    open_txn = loop.run_until_complete(load_source(apache_kafka_3.bootstrap, replication=3))  # type: ignore[attr-defined]
    try:
        yield apache_kafka_3
    finally:
        loop.run_until_complete(open_txn.stop())
        loop.close()
