"""STOPPING's steps as ``decide_stop`` takes them: entering removes the fetcher; STOP_BUMP_EPOCH
bumps, aborts and resets in one decision while the log still ends at the stop offset, and leaves
the reset to STOP_PID_RESET (which reads the tail) once the coordinator has written past it.
(``test_workflows_crash_resume`` kills a stop at every one of these writes and resumes it.)"""

from __future__ import annotations

import uuid

from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState, Step, advance
from coordinator.ports import ControlType, OpenTransaction, PartitionOffsets
from coordinator.states import MirrorState
from coordinator.workflows.commands import AppendControl, BumpLeaderEpoch, RemoveFetcher
from coordinator.workflows.stop import StopObservation, begin_stop, decide_stop

KEY = MirrorPartitionKey("m", uuid.UUID(int=7), 2)
TP = KEY.topic_partition
OPEN = (OpenTransaction(producer_id=11, producer_epoch=3, first_offset=5), OpenTransaction(12, 0, 7))


def at_bump(stop_offset: int = 9, target: int = 5) -> MirrorPartitionState:
    entered = begin_stop(MirrorPartitionState(state=MirrorState.MIRRORING), TP, now_ms=1_000)
    assert entered.commands == (RemoveFetcher(TP),) and entered.state.step is Step.STOP_RECORD_LME
    return advance(entered.state, step=Step.STOP_BUMP_EPOCH, stop_offset=stop_offset, epoch_target=target)


def test_the_bump_step_bumps_aborts_and_resets_in_order_while_the_log_ends_at_the_stop_offset() -> None:
    dest = PartitionOffsets(log_start=0, lso=5, hw=9, leo=9, leader_epoch=4)
    got = decide_stop(at_bump(), KEY, StopObservation(dest=dest, open_transactions=OPEN, source_cluster_id="src"), 2_000)
    assert got.state.state is MirrorState.STOPPING and got.state.step is Step.STOP_WAIT_ISR
    assert got.state.leader_epoch == 5
    assert got.commands == (BumpLeaderEpoch(TP, 5),
                            AppendControl(TP, ControlType.ABORT, 11, 3), AppendControl(TP, ControlType.ABORT, 12, 0),
                            AppendControl(TP, ControlType.MIRROR_PID_RESET, source_cluster_id="src"))  # fmt: skip
    # Already bumped (a resume after the bump alone): no second bump, the rest as before.
    bumped = PartitionOffsets(log_start=0, lso=9, hw=9, leo=9, leader_epoch=5)
    again = decide_stop(at_bump(), KEY, StopObservation(dest=bumped, source_cluster_id="src"), 2_000)
    assert again.commands == (AppendControl(TP, ControlType.MIRROR_PID_RESET, source_cluster_id="src"),)


def test_once_the_log_grew_past_the_stop_offset_the_reset_waits_for_its_own_step() -> None:
    # A crash after the first ABORT: the log holds our marker, one transaction is still open.
    dest = PartitionOffsets(log_start=0, lso=7, hw=10, leo=10, leader_epoch=5)
    got = decide_stop(at_bump(), KEY, StopObservation(dest=dest, open_transactions=OPEN[1:], source_cluster_id="src"), 2_000)
    assert got.state.step is Step.STOP_PID_RESET
    assert got.commands == (AppendControl(TP, ControlType.ABORT, 12, 0),), "no reset before the tail is read"
