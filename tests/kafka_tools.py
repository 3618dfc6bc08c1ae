"""Apache Kafka's command-line tools, many runs in one JVM (tests/java/KafkaTools.java): a JVM
start costs about 2 s, so a module that runs a tool many times runs them here in one batch.
KafkaTools.java is compiled once per session (Java's source launcher would compile it per run)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from streams.brokers.kafka_jars import java_command

KAFKA_TOOLS = Path(__file__).resolve().parent / "java" / "KafkaTools.java"
_compiled: Path | None = None
_lock = threading.Lock()


@dataclass(frozen=True)
class ToolRun:
    code: int  # the tool's exit code (Kafka's Exit.exit, trapped), 0 when it returned
    stdout: str
    stderr: str


def _command() -> list[str]:
    """``java ... KafkaTools`` on Kafka's classpath plus the classes compiled on first use."""
    global _compiled
    cmd = java_command("KafkaTools", [])
    cp = cmd.index("-cp") + 1
    with _lock:
        if _compiled is None:
            out = Path(tempfile.mkdtemp(prefix="kip1279-kafka-tools-"))
            atexit.register(shutil.rmtree, out, True)
            javac = shutil.which("javac") or "javac"
            done = subprocess.run([javac, "-nowarn", "-cp", cmd[cp], "-d", str(out), str(KAFKA_TOOLS)],
                                  capture_output=True, text=True, timeout=300)  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            _compiled = out
    cmd[cp] = f"{_compiled}{os.pathsep}{cmd[cp]}"
    return cmd


def run_batch(runs: dict[str, tuple[str, list[str], str | None]], timeout: float = 600,
              env: dict[str, str] | None = None) -> dict[str, ToolRun]:  # fmt: skip
    """name -> (main class, arguments, stdin or None), run one after the other in one JVM."""
    lines = []
    for name, (main, args, stdin) in runs.items():
        fields = [name, main, "-" if stdin is None else stdin.replace("\n", "\\n"), *args]
        assert not any("\t" in f or "\n" in f for f in fields), fields
        lines.append("\t".join(fields))
    done = subprocess.run(_command(), input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=timeout,
                          env=env)  # fmt: skip
    results = [json.loads(line) for line in done.stdout.split("\n") if line.startswith("{")]
    assert [r["name"] for r in results] == list(runs), done.stderr[-3000:]
    return {r["name"]: ToolRun(r["code"], r["stdout"], r["stderr"]) for r in results}
