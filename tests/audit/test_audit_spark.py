"""Session defaults of audit.spark."""

from __future__ import annotations

import os

from audit.spark import local_cores, sharing_cores


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


def test_queries_sharing_the_cores_share_the_shuffle_partitions(spark) -> None:  # type: ignore[no-untyped-def]
    # The report runs two queries at a time: each gets half the partitions, in a session of its
    # own over the same context, so the caller's setting stays as it was.
    key = "spark.sql.shuffle.partitions"
    before = int(spark.conf.get(key))
    shared = sharing_cores(spark, 2)
    assert shared.sparkContext is spark.sparkContext
    assert int(shared.conf.get(key)) == max(1, before // 2)
    assert int(sharing_cores(spark, before + 1).conf.get(key)) == 1
    assert int(spark.conf.get(key)) == before
