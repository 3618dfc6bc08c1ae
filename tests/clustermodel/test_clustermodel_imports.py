"""clustermodel/ has no import circle: every import counts, function-level and TYPE_CHECKING ones too."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "records", "coordinator", "clustermodel")  # what clustermodel may import, and itself


def _modules() -> dict[str, Path]:
    mods = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            # ``from pkg import mod`` imports pkg.mod; ``from mod import name`` imports mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_import_graph_has_no_cycle() -> None:
    mods = _modules()
    graph = {name: _imports(name, path, mods) for name, path in mods.items()}
    assert "clustermodel.cluster" in graph["clustermodel.server"]  # the walk sees imports at all
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        raise AssertionError(f"import circle: {' -> '.join(exc.args[1])}") from None
