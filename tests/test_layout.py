"""The house's layout rules, read from the code's own imports (every import, also those inside
functions and under TYPE_CHECKING): no import circle anywhere, the top-level packages point one
way, and inside ``streams/`` each package imports only packages below it (README, "Layout").
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("records", "coordinator", "clustermodel", "audit", "streams")

# What each top-level package may import of the project's packages (besides itself).
ALLOWED = {
    "records": set(),
    "coordinator": {"records"},
    "clustermodel": {"records", "coordinator"},
    "audit": {"records", "coordinator"},
    "streams": {"records", "coordinator", "clustermodel", "audit"},
}

# streams/ from the bottom up: a room imports only rooms before it in this list.
STREAMS_LAYERS = (
    "streams.config",
    "streams.tls",
    "streams.brokers",
    "streams.state",
    "streams.kafka",
    "streams.runner",
    "streams.admin",
    "streams.worker",
    "streams.demo",
)


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules that ``path`` imports (``from a import b`` counts as ``a.b`` when
    ``a.b`` is a module, else as ``a``)."""
    out = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(path, name, known) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def room(module: str) -> str:
    for layer in STREAMS_LAYERS:
        if module == layer or module.startswith(layer + "."):
            return layer
    return module


def test_no_import_circles() -> None:
    assert cycles(graph()) == []


def test_top_level_packages_point_one_way() -> None:
    wrong = sorted(f"{a} -> {b}" for a, deps in graph().items() for b in deps
                   if a.split(".")[0] != b.split(".")[0] and b.split(".")[0] not in ALLOWED[a.split(".")[0]])
    assert wrong == []


def test_streams_rooms_point_down() -> None:
    g = graph()
    unplaced = sorted(m for m in g if m.startswith("streams.") and room(m) == m and m not in STREAMS_LAYERS)
    assert unplaced == [], "every streams module belongs to a room of STREAMS_LAYERS"
    order = {layer: i for i, layer in enumerate(STREAMS_LAYERS)}
    wrong = sorted(f"{a} -> {b}" for a, deps in g.items() if a.startswith("streams.")
                   for b in deps if b.startswith("streams.") and room(b) != room(a)
                   and order[room(b)] > order[room(a)])  # fmt: skip
    assert wrong == []


def test_cycle_finder_finds_a_circle() -> None:
    # The checks above pass vacuously if the finder is blind: show it sees one.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles(defaultdict(set, {"a": {"b"}})) == []
