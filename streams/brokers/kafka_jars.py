"""Apache Kafka's fetched jars (the version pinned in tools/kafka/pom.xml, fetched by bin/setup): where
they are, why they may be missing, and how a Kafka class runs on them (a broker or one of Kafka's tools)."""

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
DEFAULT_HEAP = "512m"
TOOL_HEAP = "256m"
DUMP_LOG_TOOL = "kafka.tools.DumpLogSegments"


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


def missing_reason(lib: Path | None = None) -> str | None:
    """Why Apache Kafka cannot run here (one line), or None when it can."""
    if shutil.which("java") is None:
        return "Apache Kafka tests need Java 17 (`java` is not on PATH) and Maven; then run bin/setup"
    lib = kafka_lib(lib)
    try:
        version = kafka_version()
    except (OSError, KafkaUnavailable) as e:
        return f"Apache Kafka's pin is unreadable: {e}"
    if not (lib / f"kafka_2.13-{version}.jar").is_file() or not (lib / f"kafka-tools-{version}.jar").is_file():
        how = "run bin/setup" if shutil.which("mvn") else "install Maven (`mvn` is not on PATH), then run bin/setup"
        return f"Apache Kafka {version} jars are not in {lib}: {how}"
    return None


def java_command(main_class: str, args: Sequence[str], heap: str = TOOL_HEAP, log4j: Path | None = None,
                 lib: Path | None = None) -> list[str]:  # fmt: skip
    """``java ... main_class args`` on the fetched classpath (raises KafkaUnavailable)."""
    reason = missing_reason(lib)
    if reason:
        raise KafkaUnavailable(reason)
    java = shutil.which("java")
    assert java is not None
    opts = [
        f"-Xmx{heap}", "-Xms64m", "-Xss1m", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError",
        "-XX:ActiveProcessorCount=2", "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
    ]  # fmt: skip
    if log4j is not None:
        opts.append(f"-Dlog4j2.configurationFile={log4j}")
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
