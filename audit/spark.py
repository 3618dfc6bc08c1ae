"""Spark session defaults and reading the snapshot store into DataFrames.

The master is ``local[*]`` unless told otherwise (argument, or ``AUDIT_SPARK_MASTER``); any
Spark master works, as long as its executors can read the store's path. The local driver
binds to loopback only and runs without the UI.

Reads go through the manifests (``audit.layout``): ``latest`` is the newest complete
snapshot, ``all`` every complete snapshot. Transitions are history, so they are always read
from every snapshot up to the newest. Explicit schemas (from ``model.TABLES``) mean no
inference: a mirror named ``2024`` stays a string.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final, Literal

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from audit import layout
from audit.model import ALL_TABLES, INCREMENTAL_TABLES

DEFAULT_MASTER: Final = "local[*]"
MASTER_ENV: Final = "AUDIT_SPARK_MASTER"
JAVA_OPTIONS_ENV: Final = "AUDIT_SPARK_JAVA_OPTIONS"  # local mode: the driver JVM's options

Scope = Literal["latest", "all"]


def spark_session(master: str | None = None, *, app_name: str = "kip1279-audit", **conf: str) -> SparkSession:
    """An existing active session, or a new one with the audit defaults."""
    active = SparkSession.getActiveSession()
    if active is not None and master is None and not conf:
        return active
    master = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
    builder = SparkSession.builder.master(master).appName(app_name)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # audit.cli draws its own bar on stderr
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "8",  # audit results are small; 200 tasks is overhead
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.files.maxPartitionBytes": str(16 << 20),  # split big transition files
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        # Files come from manifests: list them on the driver, not with a Spark job per read.
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
    }
    if master.startswith("local"):
        # local mode runs the executors inside the driver JVM: its heap is all there is. One
        # shuffle partition per core: a task more each is pure overhead on results this small.
        defaults |= {
            "spark.sql.shuffle.partitions": str(local_cores(master)),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": os.environ.get("AUDIT_SPARK_DRIVER_MEMORY", "2g"),
            # Audit queries are short and each compiles new code: C2's compile time cost more CPU
            # than its faster code saved (docs/audit-performance.md). C1 alone gets a 48 MB code
            # cache, which a session's generated code fills within a few reports: then the JIT
            # stops and all runs interpreted; 240 MB is the tiered default. Only when this session
            # starts the JVM; a conf argument overrides it.
            "spark.driver.extraJavaOptions": os.environ.get(
                JAVA_OPTIONS_ENV, "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
            ),
        }
    for k, v in (defaults | conf).items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def sharing_cores(spark: SparkSession, queries: int) -> SparkSession:
    """A session (same context, own SQL conf) for ``queries`` run at a time: each query's
    shuffles get its share of the shuffle partitions. With two at a time on ``local[2]``, one
    partition each cost less JVM CPU than one per core (docs/audit-performance.md); the
    caller's session keeps its setting."""
    shared = spark.newSession()
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    shared.conf.set("spark.sql.shuffle.partitions", str(max(1, partitions // queries)))
    return shared


def local_cores(master: str) -> int:
    """Worker threads of a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master)
    if m is None or m.group(1) == "*":  # local-cluster[...] too: this machine's cores
        return os.cpu_count() or 1
    return max(1, int(m.group(1) or 1))


_SPARK_TYPES: Final[dict[pa.DataType, T.DataType]] = {
    pa.string(): T.StringType(),
    pa.int8(): T.ByteType(),
    pa.int16(): T.ShortType(),
    pa.int32(): T.IntegerType(),
    pa.int64(): T.LongType(),
    pa.bool_(): T.BooleanType(),
}


def spark_schema(table: str) -> T.StructType:
    """The table's columns plus the hive partition columns, typed."""
    fields = [
        T.StructField(f.name, _SPARK_TYPES[f.type], f.nullable) for f in ALL_TABLES[table] if f.name != "mirror"
    ]
    fields += [
        T.StructField("mirror", T.StringType(), False),
        T.StructField("date", T.DateType(), False),
        T.StructField("snapshot_offset", T.LongType(), False),
        T.StructField("taken_at_ms", T.LongType(), False),
    ]
    return T.StructType(fields)


class NoSnapshots(LookupError):
    pass


class SnapshotStore:
    """The complete snapshots under ``root``, read once (a query run sees one fixed set)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.manifests = layout.list_manifests(self.root)

    @property
    def latest(self) -> layout.Manifest:
        if not self.manifests:
            raise NoSnapshots(f"no complete snapshot (no manifest) under {self.root}")
        return self.manifests[-1]

    def has(self, table: str, version: int = 1) -> bool:
        """Every snapshot lists ``table``, at ``version`` or later (snapshots exported before a
        rollup, or a column of it, existed do not)."""
        return bool(self.manifests) and all(
            table in m.tables and m.tables[table].version >= version for m in self.manifests
        )

    def files(self, table: str, scope: Scope, only: set[tuple[str, int, int]] | None = None) -> list[str]:
        """``only``: just the files of these (mirror, snapshot offset, taken at ms)."""
        if table in INCREMENTAL_TABLES:
            scope = "all"
        manifests = self.manifests if scope == "all" else [self.latest]
        return [
            str(self.root / f.path)
            for m in manifests
            for f in m.files(table)
            if only is None or (f.mirror, m.metadata_offset, m.taken_at_ms) in only
        ]

    def read(
        self, spark: SparkSession, table: str, scope: Scope = "latest", *, only: set[tuple[str, int, int]] | None = None
    ) -> DataFrame:
        if not self.manifests:
            raise NoSnapshots(f"no complete snapshot (no manifest) under {self.root}")
        files = self.files(table, scope, only)
        schema = spark_schema(table)
        if not files:
            return spark.createDataFrame([], schema)
        return spark.read.schema(schema).option("basePath", str(self.root / table)).parquet(*files)
