"""``Executor.run_many``: each key's commands in order, one port call per key per wave; a key
whose call fails runs nothing after it; the owner check before each wave, and once it fails
every key still queued (not one already done) fails with the fencing."""

from __future__ import annotations

import uuid
from typing import Any

from coordinator.fencing import OwnerFence
from coordinator.ports import ControlType, FencedOwnerEpoch, NotLeader, PortError, TopicPartition
from coordinator.workflows import commands as c
from streams.runner.executor import Executor

A, B, C = (TopicPartition(uuid.UUID(int=i + 1), 0) for i in range(3))


class WavePort:
    """A destination that records each wave (one ``call_many``) and fails the calls it is told to."""

    def __init__(self, fail: dict[tuple[str, TopicPartition], PortError] | None = None) -> None:
        self.waves: list[list[tuple[str, Any, Any]]] = []
        self.fail = fail or {}

    def call_many(self, calls: list[tuple[str, tuple[Any, ...], Any]]) -> list[Any]:
        self.waves.append([(method, args[0], (kwargs or {}).get("fence")) for method, args, kwargs in calls])
        return [self.fail.get((method, args[0])) for method, args, _ in calls]

    def __getattr__(self, method: str) -> Any:  # a wave of one call goes out on its own
        def call(*args: Any, **kwargs: Any) -> Any:
            self.waves.append([(method, args[0], kwargs.get("fence"))])
            error = self.fail.get((method, args[0]))
            if error is not None:
                raise error
            return None

        return call


def _stop(tp: TopicPartition) -> list[c.Command]:
    return [c.RemoveFetcher(tp), c.BumpLeaderEpoch(tp, 5), c.AppendControl(tp, ControlType.MIRROR_PID_RESET)]


def test_waves_keep_each_keys_order_and_carry_the_fence():
    port = WavePort()
    ex = Executor(port, [{A, B}], 1)  # type: ignore[arg-type]
    ex.fence = OwnerFence("workers", 3)
    failed = ex.run_many({A: _stop(A), B: [c.BumpLeaderEpoch(B, 2)], C: [c.RemoveFetcher(C)]})
    assert failed == {}
    fence = OwnerFence("workers", 3)
    assert port.waves == [[("bump_leader_epoch", A, fence), ("bump_leader_epoch", B, fence)],
                          [("append_control_batch", A, fence)]]  # fmt: skip
    assert ex.sessions == [{B}]  # A's RemoveFetcher applied in its order, with no call


def test_a_failed_call_stops_its_key_only():
    error = NotLeader(A, 6, 1)
    port = WavePort({("bump_leader_epoch", A): error})
    ex = Executor(port, [set()], 1)  # type: ignore[arg-type]
    failed = ex.run_many({A: _stop(A), B: _stop(B)})
    assert failed == {A: error}
    assert port.waves == [[("bump_leader_epoch", A, None), ("bump_leader_epoch", B, None)],
                          [("append_control_batch", B, None)]]  # fmt: skip


def test_the_owner_check_before_each_wave_fails_the_keys_still_queued():
    checks = iter([True, False])
    port = WavePort()
    ex = Executor(port, [set()], 1)  # type: ignore[arg-type]
    ex.fence = OwnerFence("workers", 3)
    ex.owner_check = lambda: next(checks)
    failed = ex.run_many({A: _stop(A), B: [c.BumpLeaderEpoch(B, 2)]})
    assert len(port.waves) == 1  # nothing after the check that failed
    assert set(failed) == {A}  # B's only call went out in the first wave: done, not fenced
    assert isinstance(failed[A], FencedOwnerEpoch)
    assert ex.run_many({C: [c.BumpLeaderEpoch(C, 2)]}) == {C: failed[A]}  # fenced once, fenced for good
    assert len(port.waves) == 1
