"""``--promote``: a planned migration that loses nothing (Confluent's promote, to our standard).

A stop that first waits, polling the impact preview (PreviewMirrorTopics), until

- the lag is 0 on every selected partition (nothing on the source the destination lacks);
- no transaction is open on the destination (``--abort-open-transactions``: go ahead and abort them);
- a group offset sync has completed after the last commit seen on the source (the destination
  holds every selected group's last source commit);

then stops, waits for STOPPED, and prints the preview as it was at the cut. It refuses, changing
nothing, when the source does not answer (that is ``--stop``'s case), and gives up after
``--timeout`` seconds, saying what it was still waiting for.

Records written on the source between the last check and the stop are not covered: a planned
migration stops the source's producers first, and the stop's own impact record (the
``MirrorFailoverImpactRecord`` the controller appends with it) keeps what it found at the cut.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TextIO

from coordinator.states import MirrorState
from streams.admin.client import ClusterMirrorAdmin
from streams.admin.preview import print_preview

POLL_S = 0.5
EXIT_OK, EXIT_ERROR = 0, 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--abort-open-transactions", action="store_true",
                   help="promote: go ahead although transactions are open on the destination (the stop aborts them)")  # fmt: skip
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="promote: give up (changing nothing) after SECONDS of waiting for lag 0, no open "
                        "transaction and a group sync after the last commit (default 300)")  # fmt: skip


def waiting_for(response: Any, abort_open: bool) -> list[str]:
    """What the promote still waits for, from one preview; empty: it may stop now."""
    parts = [p for t in response.topics for p in t.partitions]
    reasons = []
    lagging = [p for p in parts if p.lost_records != 0]
    if lagging:
        reasons.append(f"lag 0 ({sum(max(p.lost_records, 0) for p in lagging)} records behind on "
                       f"{len(lagging)} partitions)")  # fmt: skip
    if not abort_open:
        open_txns = sum(len(p.transactions) for p in parts)
        if open_txns:
            reasons.append(f"{open_txns} open transactions on the destination to end (or --abort-open-transactions)")
    unsynced = sorted({g.group_id for g in response.groups if g.destination_committed_offset != g.source_committed_offset})
    if unsynced:
        reasons.append(f"a group offset sync after the last commit of {', '.join(unsynced)}")
    return reasons


async def promote(admin: ClusterMirrorAdmin, mirror: str, names: Sequence[str], patterns: Sequence[str], *,
                  abort_open: bool, timeout: float, out: TextIO, err: TextIO,
                  wait_for_states: Callable[..., Awaitable[bool]]) -> int:  # fmt: skip
    deadline = time.monotonic() + timeout
    shown: list[str] = []
    while True:
        r: Any = (await admin.preview(mirror, names, patterns=patterns)).response
        if r.error_code:
            out.write(f"Error: {r.error_message} (error code {r.error_code})\n")
            return EXIT_ERROR
        refused = [t for t in r.topics if t.error_code]
        if refused:
            for t in refused:
                out.write(f"Topic {t.name}: {t.error_message} (error code {t.error_code})\n")
            return EXIT_ERROR
        if not r.source_available:
            out.write(f"Refusing to promote mirror {mirror}: the source does not answer, so nothing can be "
                      "checked; nothing was changed. To fail over without it, use --stop (--stop --dry-run "
                      "shows what it would cost).\n")  # fmt: skip
            return EXIT_ERROR
        reasons = waiting_for(r, abort_open)
        if not reasons:
            break
        if time.monotonic() >= deadline:
            out.write(f"Timed out after {timeout:g} s; nothing was changed. Still waiting for: {'; '.join(reasons)}\n")
            return EXIT_ERROR
        kinds = [r.split(" (")[0] for r in reasons]  # a line when what it waits for changes, not each count
        if kinds != shown:
            err.write(f"Waiting for: {'; '.join(reasons)}\n")
            shown = kinds
        await asyncio.sleep(POLL_S)
    stop: Any = (await admin.stop(mirror, names, patterns=patterns)).response
    failed = [t for t in stop.topics if t.error_code]
    if stop.error_code or failed:
        out.write(f"Error: the stop was refused: {stop.error_message or failed[0].error_message}\n")
        return EXIT_ERROR
    accepted = {t.name for t in stop.topics}
    left = max(1.0, deadline - time.monotonic())
    if not await wait_for_states(admin, mirror, accepted or None, MirrorState.STOPPED, left, err):
        out.write(f"Timed out waiting for every partition of {', '.join(sorted(accepted))} to be STOPPED\n")
        return EXIT_ERROR
    out.write(f"Promoted: stopped {', '.join(sorted(accepted))} of mirror {mirror}. At the cut:\n")
    return print_preview(out, mirror, r, title=f"Promote of mirror {mirror}")
