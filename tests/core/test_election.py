"""The controllers' takeover rule (``coordinator.election``)."""

from __future__ import annotations

from coordinator.election import Heartbeat, live, should_take_over

S = 2000


def hb(cid: str, active: bool = False, ts: int = 10_000, instance: str | None = None) -> Heartbeat:
    return Heartbeat(cid, instance or f"{cid}-i", f"127.0.0.1:{9000 + ord(cid[-1])}", active, 3, ts)


def test_a_live_active_keeps_every_standby_out() -> None:
    assert not should_take_over("a", "a-i", [hb("b", active=True, ts=9_000)], 10_000, S)


def test_an_active_silent_for_the_session_timeout_is_taken_over_by_the_lowest_live_standby() -> None:
    beats = [hb("a", active=True, ts=7_999), hb("b"), hb("c")]
    assert not should_take_over("c", "c-i", beats, 10_000, S)
    assert should_take_over("b", "b-i", beats, 10_000, S)
    assert should_take_over("c", "c-i", beats[:1] + [hb("b", ts=7_000), hb("c")], 10_000, S)  # b is dead too


def test_a_lone_controller_takes_over_at_once_and_its_own_dead_instance_does_not_count() -> None:
    assert should_take_over("a", "a-new", [], 10_000, S)
    assert should_take_over("a", "a-new", [hb("a", active=True, ts=7_000, instance="a-old")], 10_000, S)
    # Another live process under the same id (a misconfiguration) that is active: keep out.
    assert not should_take_over("a", "a-new", [hb("a", active=True, ts=9_500, instance="a-old")], 10_000, S)


def test_only_each_instances_latest_live_heartbeat_counts() -> None:
    beats = [hb("a", active=True, ts=9_000), hb("a", active=False, ts=9_500), hb("b", ts=1_000)]
    assert [h.active for h in live(beats, 10_000, S)] == [False]
    assert should_take_over("b", "b-i", beats, 10_000, S) is False  # a is a live standby with a lower id
    assert should_take_over("0", "0-i", beats, 10_000, S)


def test_an_instance_that_left_counts_as_gone_at_once() -> None:
    beats = [hb("a", active=True, ts=9_000), hb("a", ts=9_100)._replace(leaving=True)]
    assert live(beats, 10_000, S) == []
    assert should_take_over("b", "b-i", beats, 10_000, S)
