"""The destination's position is kept from the runner's own appends (issue #25, the trickle).

A copy asked the destination for its LEO and latest epoch before every fetch: a third of a
copied record's round trips. The runner now fetches from where its last append ended, while
the partition's state is the one it appended under; anything else that may have moved the
destination (another command, an error, a state write, a sync period) asks again, and an
answer whose decision reads more than the fetch offset (fencing, a bump, a divergence) is
decided on a fresh position. The copies stay byte for byte.
"""

from __future__ import annotations

from typing import Any

from workflow_harness import World, all_in, batches, dle, run_until, shape

from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.config import MirrorConfig

CFG = MirrorConfig(metadata_refresh_interval_ms=10**9, fetch_backoff_ms=0)


class Counting:
    """The destination port, counting the position reads per partition."""

    def __init__(self, port: Any) -> None:
        self._port = port
        self.asked: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._port, name)
        if name != "list_offsets":
            return attr

        def call(tp: Any) -> Any:
            self.asked.append(tp)
            return attr(tp)

        return call


def _mirroring(config: MirrorConfig = CFG) -> tuple[World, Any, Counting, Any]:
    w = World("a", "b")
    topic = w["a"].add_topic("e", partitions=1)
    m = w.mirror("a", "b", config)
    dest = Counting(w["b"])
    m.runner = m.build(dest)
    m.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING))
    return w, m, dest, w["a"].tp("e", 0)


def test_a_trickle_fetches_from_where_its_last_append_ended() -> None:
    w, m, dest, tp = _mirroring()
    w["a"].produce("e", 0, [(b"k", b"0")])
    w.step()
    dest.asked.clear()
    for i in range(1, 6):
        w["a"].produce("e", 0, [(b"k", b"%d" % i)])
        w.step()
    assert dest.asked == []  # five copies, no position read
    assert shape(batches(w["b"], tp)) == shape(batches(w["a"], tp))  # byte for byte
    assert len(batches(w["b"], tp)) == 6


def test_a_sync_period_reads_the_position_again() -> None:
    w, m, dest, tp = _mirroring(MirrorConfig(metadata_refresh_interval_ms=1000, fetch_backoff_ms=0))
    w["a"].produce("e", 0, [(b"k", b"v")])
    w.step()
    w.step()
    dest.asked.clear()
    w.step(1000)  # the sync, after this round's fetch
    w.step()
    assert tp in dest.asked


def test_an_epoch_raised_on_b_outside_the_mirror_is_read_before_deciding() -> None:
    # The kept DLE is stale: a batch above it but not above B's real DLE is appended, as with a
    # fresh position (no EPOCH_FENCING), and a batch above the real one is still fenced.
    w, m, dest, tp = _mirroring()
    w["a"].produce("e", 0, [(b"k", b"0")])
    w.step()
    kept = dle(w["b"], tp)
    w["b"].bump_leader_epoch(tp, kept + 2 * CFG.epoch_bump_threshold + 10)
    while dle(w["a"], tp) <= kept:
        w["a"].elect_leader("e", 0)
    w["a"].produce("e", 0, [(b"k", b"1")])
    w.step()
    assert (MirrorState.MIRRORING, MirrorState.EPOCH_FENCING) not in [(x, y) for _, x, y in m.history]
    assert shape(batches(w["b"], tp)) == shape(batches(w["a"], tp))
    while dle(w["a"], tp) <= dle(w["b"], tp):
        w["a"].elect_leader("e", 0)
    w["a"].produce("e", 0, [(b"k", b"2")])
    w.step()
    assert (MirrorState.MIRRORING, MirrorState.EPOCH_FENCING) in [(x, y) for _, x, y in m.history]
    assert all(b.leader_epoch <= dle(w["b"], tp) for b in batches(w["b"], tp))
    run_until(w, lambda: shape(batches(w["b"], tp)) == shape(batches(w["a"], tp)))


def test_a_failed_append_forgets_the_kept_position() -> None:
    w, m, dest, tp = _mirroring()
    w["a"].produce("e", 0, [(b"k", b"0")])
    w.step()
    # Another writer appended on B (a stale owner, say): our append below its LEO is refused.
    w["b"].append_mirror_batches(tp, [b.__class__(**{**_fields(b), "base_offset": 1, "last_offset": 1})
                                      for b in batches(w["a"], tp)[:1]])
    w["a"].produce("e", 0, [(b"k", b"1")])
    dest.asked.clear()
    w.step()
    w.step()
    assert tp in dest.asked  # asked again after the refusal


def test_a_log_cut_on_b_behind_the_runner_leaves_no_gap() -> None:
    # A new leader of B cut the log (an unclean election): the kept position is above B's LEO.
    # The append says which LEO it was fetched for, B refuses it, and the copy starts again
    # from B's real end: no gap.
    w, m, dest, tp = _mirroring()
    for i in range(3):
        w["a"].produce("e", 0, [(b"k", b"%d" % i)])
        w.step()
    assert len(batches(w["b"], tp)) == 3
    w["b"].truncate_to(tp, 1)
    w["a"].produce("e", 0, [(b"k", b"3")])
    run_until(w, lambda: shape(batches(w["b"], tp)) == shape(batches(w["a"], tp)))


def _fields(b: Any) -> dict[str, Any]:
    return {f: getattr(b, f) for f in b.__struct_fields__}
