"""Suite-wide: puts tests/ on sys.path (shared helpers), says which yardstick the run uses, and
offers the session's Apache Kafka cluster (``apache_kafka``, tests/kafka_fixtures.py)."""

from __future__ import annotations

import reference_data
from kafka_fixtures import REQUIRE_ENV, apache_kafka, apache_kafka_3, kafka_required  # noqa: F401 - fixtures for all tests

from streams.brokers.kafka_jars import kafka_version, missing_reason


def pytest_report_header() -> list[str]:
    reason = missing_reason()
    kafka = f"Apache Kafka {kafka_version()}" if reason is None else f"no Apache Kafka ({reason})"
    if kafka_required():
        kafka += f"; {REQUIRE_ENV}=1: its tests fail rather than skip"
    return [f"yardstick: {reference_data.describe()}", f"apache kafka: {kafka}"]
