"""Prometheus's tools for the tests (built by bin/setup with Go into tools/prometheus/bin/).

Where Go or a built tool is missing, each test that needs it is skipped with one reason;
``KIP1279_REQUIRE_PROMETHEUS=1`` (set by .ci/run) turns that skip into a failure, so CI always
runs them, as ``KIP1279_REQUIRE_KAFKA`` does for Apache Kafka.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streams.demo.prometheus import missing_reason, tool

REQUIRE_ENV = "KIP1279_REQUIRE_PROMETHEUS"


def prometheus_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip() not in ("", "0", "false", "no")


def require(name: str) -> Path:
    """The tool's path; else skip (or, under KIP1279_REQUIRE_PROMETHEUS=1, fail)."""
    reason = missing_reason(name)
    if reason is None:
        return tool(name)
    if prometheus_required():
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)
