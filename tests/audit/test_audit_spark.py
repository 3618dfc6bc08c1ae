"""Session defaults of audit.spark."""

from __future__ import annotations

import os

from audit.spark import local_cores


def test_local_masters_shuffle_into_one_partition_per_core() -> None:
    assert [local_cores(m) for m in ("local", "local[3]", "local[3,4]")] == [1, 3, 3]
    assert local_cores("local[*]") == local_cores("local-cluster[2,1,1024]") == (os.cpu_count() or 1)
