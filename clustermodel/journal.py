"""The operation journal: every public call on a model cluster, so a failing run can be replayed.

Given the seed, the constructor arguments and the steps, a model replays to the same state
(no wall clock, no global randomness). ``format_repro`` prints what a failing test should show.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import msgspec

P = ParamSpec("P")
R = TypeVar("R")

_MAX_ARG_REPR = 120


class Step(msgspec.Struct, frozen=True):
    """One call: method name and arguments as given."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}

    def __str__(self) -> str:
        parts = [_short(a) for a in self.args] + [f"{k}={_short(v)}" for k, v in self.kwargs.items()]
        return f"{self.method}({', '.join(parts)})"


class _Journaled(Protocol):
    _journal: list[Step] | None
    _journal_depth: int


S = TypeVar("S", bound=_Journaled)


def journaled(fn: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Record the outermost public call in the cluster's journal before running it."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._journal is None or self._journal_depth:
            return fn(self, *args, **kwargs)
        self._journal.append(Step(name, tuple(args), dict(kwargs)))
        self._journal_depth += 1
        try:
            return fn(self, *args, **kwargs)
        finally:
            self._journal_depth -= 1

    return wrapper


def format_steps(header: str, steps: list[Step]) -> str:
    lines = [header] + [f"  {i:>4}: {step}" for i, step in enumerate(steps)]
    return "\n".join(lines)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_ARG_REPR else text[: _MAX_ARG_REPR - 3] + "..."
