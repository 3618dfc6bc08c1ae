"""Suite-wide: puts tests/ on sys.path (shared helpers), says which yardstick the run uses, and
offers the session's Apache Kafka cluster (``apache_kafka``, tests/kafka_fixtures.py) and its
Spark session (``spark``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import reference_data
from kafka_fixtures import REQUIRE_ENV, apache_kafka, apache_kafka_3, kafka_required  # noqa: F401 - fixtures for all tests

from streams.brokers.kafka_jars import kafka_version, missing_reason


def pytest_report_header() -> list[str]:
    reason = missing_reason()
    kafka = f"Apache Kafka {kafka_version()}" if reason is None else f"no Apache Kafka ({reason})"
    if kafka_required():
        kafka += f"; {REQUIRE_ENV}=1: its tests fail rather than skip"
    from prometheus_tools import REQUIRE_ENV as PROM_ENV, prometheus_required

    from streams.demo.prometheus import missing_reason as prometheus_missing, prometheus_version

    why = prometheus_missing("prometheus") or prometheus_missing("promtool") or prometheus_missing("promql-names")
    prom = f"Prometheus {prometheus_version()}" if why is None else f"no Prometheus ({why})"
    if prometheus_required():
        prom += f"; {PROM_ENV}=1: its tests fail rather than skip"
    return [f"yardstick: {reference_data.describe()}", f"apache kafka: {kafka}", f"prometheus: {prom}"]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One real Spark session (~7 s to start) for every test that runs the audit: local[2] as
    BROKER.md says. ``audit.spark.spark_session()`` hands it to the code under test as well."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (the `audit` extra)")
    from audit.spark import spark_session

    session = spark_session("local[2]", app_name="kip1279-audit-tests", **{"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()
