"""Session defaults of audit.spark."""

from __future__ import annotations

import os

from audit.spark import local_cores


def test_local_masters_shuffle_into_one_partition_per_core() -> None:
    assert [local_cores(m) for m in ("local", "local[3]", "local[3,4]")] == [1, 3, 3]
    assert local_cores("local[*]") == local_cores("local-cluster[2,1,1024]") == (os.cpu_count() or 1)


def test_local_jvm_runs_c1_with_the_tiered_code_cache(spark) -> None:  # type: ignore[no-untyped-def]
    # C1 alone reserves 48 MB of code cache, which a session's generated code fills; then the
    # JIT stops. The session's own JVM, asked through its management beans.
    if os.environ.get("AUDIT_SPARK_JAVA_OPTIONS"):
        return  # the caller chose the JVM options
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    pools = {p.getName(): p.getUsage().getMax() for p in beans.getMemoryPoolMXBeans()}
    code = sum(v for k, v in pools.items() if "CodeHeap" in k or "CodeCache" in k)
    assert code >= 200 << 20, pools
    assert "-XX:TieredStopAtLevel=1" in list(beans.getRuntimeMXBean().getInputArguments())
