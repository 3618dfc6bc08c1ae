"""Settled mirror partitions are not stepped again (``MirrorRunner._settled``) until their state
or desired state changes, or a MIRRORING one leaves its fetcher; the outcome is the same."""

from __future__ import annotations

from typing import Any

from workflow_harness import World, all_in, run_until

from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.fetcher import fetcher_of


def _stepped(m: Any) -> list[list[Any]]:
    """Records the keys each ``_drive_many`` call of ``m``'s runner is given."""
    seen: list[list[Any]] = []
    drive = m.runner._drive_many

    def spy(work: Any) -> None:
        seen.append([k for k, _, _ in work])
        drive(work)

    m.runner._drive_many = spy
    return seen


def test_settled_partitions_are_skipped_until_something_changes() -> None:
    w = World("a", "b", worker=True)
    topic = w["a"].add_topic("orders", partitions=3)
    m = w.mirror("a", "b")
    m.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING))
    w.step()  # the round after the last write: each partition found settled
    seen = _stepped(m)
    w.step(rounds=3)
    assert seen and all(keys == [] for keys in seen), "settled MIRRORING partitions are not stepped"

    # Out of its fetcher (as a lost session would leave it): stepped again, and put back.
    tp = w["a"].tp("orders", 1)
    m.runner.sessions[fetcher_of(tp, len(m.runner.sessions))].discard(tp)
    seen.clear()
    w.step()
    assert [k.topic_partition for keys in seen for k in keys] == [tp]
    assert tp in m.runner.sessions[fetcher_of(tp, len(m.runner.sessions))]

    # A new desired state: every partition is stepped to STOPPED, then left be again.
    m.set_desired(topic.topic_id, DesiredState.STOP)
    seen.clear()
    run_until(w, lambda: all_in(m, MirrorState.STOPPED) and not w["b"].topic("orders").read_only)
    assert {k.partition for keys in seen for k in keys} == {0, 1, 2}
    w.step()
    seen.clear()
    w.step(rounds=3)
    assert all(keys == [] for keys in seen)
    assert all(s is MirrorState.STOPPED for s in (m.runner.state(w["a"].tp("orders", p)).state for p in range(3)))

    # Started again: stepped back to MIRRORING.
    m.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING))
