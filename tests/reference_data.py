"""Where the tests find their yardsticks: Kafka's own schemas, and the real KRaft segment.

A plain clone has everything a test needs: the segment in ``tests/data/``, the project's
``schemas/``, and Kafka's RPC schemas as kafka-python ships them (a test dependency). Kafka's
full reference folders (``kafka-metadata/``, ``kafka-message/``, ``kip-1279/``) are a stronger
yardstick, used whenever they are present: ``$KAFKA_REFERENCE_SCHEMAS``, else
``../shared/reference`` beside the project. Nothing is skipped when they are absent: the same
checks run on the folders that are present.
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

from records.registry import PROJECT_SCHEMAS, SchemaSet

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DATA = PROJECT_ROOT / "tests" / "data"
KRAFT_SEGMENT = DATA / "cluster_metadata_00000000000000000000.log"
KAFKA_PYTHON_RPC = "kafka.protocol.schemas.resources"
ENV = "KAFKA_REFERENCE_SCHEMAS"

# Files in each folder of the reference layout, as Kafka 3.9 and the KIP-1279 prototype have them.
REFERENCE_COUNTS = {"kafka-metadata": 25, "kafka-message": 13, "kip-1279": 26}


def reference_root() -> Path | None:
    """The full reference folder, or None. A folder named by the variable must exist."""
    named = os.environ.get(ENV)
    if named:
        root = Path(named)
        missing = [f for f in REFERENCE_COUNTS if not (root / f).is_dir()]
        if missing:
            raise FileNotFoundError(f"${ENV}={named}: no {', '.join(missing)} folder in it")
        return root
    beside = PROJECT_ROOT.parent / "shared" / "reference"
    return beside if all((beside / f).is_dir() for f in REFERENCE_COUNTS) else None


REFERENCE = reference_root()


def kafka_python_rpc_dir() -> Path:
    """Kafka's RPC schemas inside the installed kafka-python (3.x)."""
    folder = Path(str(importlib.resources.files(KAFKA_PYTHON_RPC)))
    if not any(folder.glob("*.json")):
        raise FileNotFoundError(f"{folder}: kafka-python ships no RPC schemas here; the tests need kafka-python>=3")
    return folder


def kafka_python_rpc_schemas() -> SchemaSet:
    return SchemaSet.load(kafka_python_rpc_dir())


def schema_dirs() -> dict[str, Path]:
    """Every schema folder the codec is checked on: the reference ones if present, else kafka-python's."""
    dirs = {"project": PROJECT_SCHEMAS}
    if REFERENCE is not None:
        dirs.update({name: REFERENCE / name for name in REFERENCE_COUNTS})
    else:
        dirs["kafka-python-rpc"] = kafka_python_rpc_dir()
    return dirs


def kafka_metadata_dir() -> Path:
    """Kafka's metadata record schemas: the reference folder, else the project's own copies."""
    return REFERENCE / "kafka-metadata" if REFERENCE is not None else PROJECT_SCHEMAS


def kip1279_dir() -> Path:
    """The KIP-1279 prototype's schemas: the reference folder, else the project's own."""
    return REFERENCE / "kip-1279" if REFERENCE is not None else PROJECT_SCHEMAS


def describe() -> str:
    return f"reference schemas from {REFERENCE}" if REFERENCE is not None else "no reference folder: project and kafka-python schemas"
