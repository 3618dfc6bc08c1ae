"""Apache Kafka's fetched jars (the version pinned in tools/kafka/pom.xml, fetched by bin/setup): where
they are, why they may be missing, and how a Kafka class runs on them (a broker or one of Kafka's tools).

The source version matrix adds older brokers, one folder each: tools/kafka/versions/<version>/pom.xml,
its jars in that folder's lib/ (``version_lib``); ``source_versions`` lists them with the pinned one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from streams.brokers.noida import (
    BrokerError,
)


REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_TOOLS_DIR = REPO_ROOT / "tools" / "kafka"
POM = KAFKA_TOOLS_DIR / "pom.xml"
DEFAULT_LIB = KAFKA_TOOLS_DIR / "lib"
VERSIONS_DIR = KAFKA_TOOLS_DIR / "versions"
DEFAULT_HEAP = "512m"
TOOL_HEAP = "256m"
DUMP_LOG_TOOL = "org.apache.kafka.tools.DumpLogSegments"


class KafkaUnavailable(BrokerError):
    """Java or the fetched Kafka jars are missing: the caller can skip, with this reason."""


def kafka_version(pom: Path = POM) -> str:
    """The pinned Kafka version: ``<kafka.version>`` of tools/kafka/pom.xml."""
    m = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom.read_text())
    if not m:
        raise KafkaUnavailable(f"no <kafka.version> in {pom}")
    return m.group(1).strip()


def kafka_lib(lib: Path | None = None) -> Path:
    return Path(lib or os.environ.get("KIP1279_KAFKA_LIB") or DEFAULT_LIB)


def version_key(version: str) -> tuple[int, ...]:
    """``"3.9.1"`` -> ``(3, 9, 1)``, to order and compare versions."""
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


def source_versions() -> list[str]:
    """The source version matrix: every tools/kafka/versions/*/pom.xml and the pinned version, oldest first."""
    found = {kafka_version(pom) for pom in VERSIONS_DIR.glob("*/pom.xml")}
    found.add(kafka_version())
    return sorted(found, key=version_key)


def version_lib(version: str) -> Path:
    """The folder of jars of one version of the matrix (the pinned version's is ``kafka_lib()``)."""
    if version == kafka_version():
        return kafka_lib()
    return VERSIONS_DIR / version / "lib"


def missing_reason(lib: Path | None = None, version: str | None = None) -> str | None:
    """Why Apache Kafka (the pinned version, or ``version`` of the matrix) cannot run here (one
    line), or None when it can. The pinned version needs its tools too; the others only the broker."""
    if shutil.which("java") is None:
        return "Apache Kafka tests need Java 17 (`java` is not on PATH) and Maven; then run bin/setup"
    try:
        pinned = kafka_version()
    except (OSError, KafkaUnavailable) as e:
        return f"Apache Kafka's pin is unreadable: {e}"
    version = version or pinned
    lib = kafka_lib(lib) if version == pinned else Path(lib or version_lib(version))
    jars = [f"kafka_2.13-{version}.jar"] + ([f"kafka-tools-{version}.jar"] if version == pinned else [])
    if not all((lib / jar).is_file() for jar in jars):
        how = "run bin/setup" if shutil.which("mvn") else "install Maven (`mvn` is not on PATH), then run bin/setup"
        return f"Apache Kafka {version} jars are not in {lib}: {how}"
    return None


def java_command(main_class: str, args: Sequence[str], heap: str = TOOL_HEAP, log4j: Path | None = None,
                 lib: Path | None = None, version: str | None = None) -> list[str]:  # fmt: skip
    """``java ... main_class args`` on the fetched classpath (raises KafkaUnavailable). ``version``:
    one of the matrix's, on its own jars; before 4.0 Kafka logs through log4j 1 (reload4j), so
    ``log4j`` is then a log4j 1 properties file."""
    reason = missing_reason(lib, version)
    if reason:
        raise KafkaUnavailable(reason)
    if version is not None and lib is None:
        lib = version_lib(version)
    log4j_v1 = version is not None and version_key(version) < (4,)
    java = shutil.which("java")
    assert java is not None
    opts = [
        f"-Xmx{heap}", "-Xms64m", "-Xss1m", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError",
        "-XX:ActiveProcessorCount=2", "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
    ]  # fmt: skip
    if log4j is not None:
        opts.append(f"-Dlog4j.configuration=file:{log4j}" if log4j_v1 else f"-Dlog4j2.configurationFile={log4j}")
    else:
        opts.append("-Dlog4j2.level=ERROR")  # tools: quiet unless broken
    return [java, *opts, "-cp", str(kafka_lib(lib) / "*"), main_class, *args]


def run_tool(main_class: str, args: Sequence[str], timeout: float = 120.0, lib: Path | None = None) -> str:
    """Runs one Kafka tool class to completion; returns its stdout, raises with its stderr on failure."""
    cmd = java_command(main_class, args, lib=lib)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
        raise BrokerError(f"{main_class} exited with code {proc.returncode}: {detail}")
    return proc.stdout


def dump_log_segments(files: Sequence[str | os.PathLike[str]], *options: str, lib: Path | None = None) -> str:
    """Kafka's ``kafka-dump-log``: e.g. ``dump_log_segments([f], "--cluster-metadata-decoder")``."""
    return run_tool(DUMP_LOG_TOOL, ["--files", ",".join(str(f) for f in files), *options], lib=lib)
