"""A machine speed index, printed beside CPU-second figures so that they travel between machines.

A fixed pure-Python loop (dict and list work, integer arithmetic, a method call: what the
coordinator's Python spends its time on) timed in CPU-seconds of this process, best of three
short runs: ``python_loop_mops`` is millions of loop iterations per CPU-second of one core.
Run alone: ``python -m bench.speed_index``; the last line is one JSON object.
"""

from __future__ import annotations

import json
import sys
import time

_ITERATIONS = 300_000


class _Box:
    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def add(self, k: int) -> None:
        self.n += k


def _loop(n: int) -> int:
    seen: dict[int, int] = {}
    out: list[int] = []
    box = _Box()
    for i in range(n):
        k = (i * 2654435761) & 0xFFFF
        seen[k] = seen.get(k, 0) + 1
        if i & 7 == 0:
            out.append(k)
        box.add(k & 3)
    return len(seen) + len(out) + box.n


def speed_index(runs: int = 3) -> dict[str, float]:
    """``python_loop_mops``: the loop's millions of iterations per CPU-second (best of ``runs``)."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.process_time()
        _loop(_ITERATIONS)
        best = min(best, time.process_time() - t0)
    return {"python_loop_mops": round(_ITERATIONS / max(best, 1e-9) / 1e6, 2)}


def per_1k_partitions(cpu_seconds: dict[str, float | None], partitions: int) -> float | None:
    """All processes' CPU-seconds per 1,000 partitions (None without a partition or a figure)."""
    figures = [v for v in cpu_seconds.values() if v is not None]
    if partitions <= 0 or not figures:
        return None
    return round(sum(figures) / partitions * 1000, 4)


if __name__ == "__main__":
    sys.stdout.write(json.dumps(speed_index()) + "\n")
