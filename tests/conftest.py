"""Suite-wide: puts tests/ on sys.path (shared helpers) and says which yardstick the run uses."""

from __future__ import annotations

import reference_data


def pytest_report_header() -> str:
    return f"yardstick: {reference_data.describe()}"
