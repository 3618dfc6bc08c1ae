"""The pure core: transitions, KIP errors, state epochs, fencing, FAILED backoff and retries."""

from __future__ import annotations

import itertools
import uuid

import pytest

from coordinator.partition_state import (
    NON_RETRYABLE,
    UNKNOWN_STATE,
    IllegalTransition,
    MirrorPartitionKey,
    MirrorPartitionState,
    Step,
    StateWriteFenced,
    check_write,
    decode_state,
    encode_state,
    transition,
)
from coordinator.retry import backoff_ms, decide_failed, fail, retry_target
from coordinator.states import DesiredState, ErrorCode, MirrorState, is_legal_transition
from coordinator.workflows.config import DEFAULT_TOPIC_PROPERTIES_EXCLUDE, MirrorConfig
from records.registry import default_schemas
from streams.runner.stores import InMemoryStateStore

KEY = MirrorPartitionKey("a-to-b", uuid.UUID(int=7), 0)
CFG = MirrorConfig()


def _in(state: MirrorState):
    return UNKNOWN_STATE.with_(state=state, state_epoch=3)


@pytest.mark.parametrize("current,target", list(itertools.product(MirrorState, MirrorState)))
def test_transition_follows_the_table(current, target):
    s = _in(current)
    if is_legal_transition(current, target):
        nxt = transition(s, target, now_ms=5)
        assert nxt.state is target and nxt.state_epoch == 4 and nxt.entered_at_ms == 5
        assert nxt.previous_state is (s.previous_state if current == target else current)
    else:
        with pytest.raises(IllegalTransition) as e:
            transition(s, target, now_ms=5)
        assert e.value.error_code is not ErrorCode.NONE


@pytest.mark.parametrize("current,target,code", [
    (MirrorState.MIRRORING, MirrorState.PREPARING, ErrorCode.MIRROR_TOPIC_NOT_STOPPED),
    (MirrorState.STOPPING, MirrorState.MIRRORING, ErrorCode.MIRROR_TOPIC_BEING_STOPPED),
    (MirrorState.PAUSED, MirrorState.PAUSING, ErrorCode.MIRROR_TOPIC_ALREADY_PAUSED),
    (MirrorState.STOPPED, MirrorState.MIRRORING, ErrorCode.MIRROR_TOPIC_NOT_PAUSED),
    (MirrorState.MIRRORING, MirrorState.STOPPED, ErrorCode.INVALID_CLUSTER_MIRROR_STATES),
])
def test_illegal_transitions_carry_the_kip_error(current, target, code):
    with pytest.raises(IllegalTransition) as e:
        transition(_in(current), target, 0)
    assert e.value.error_code is code


def test_fencing_rejects_stale_state_or_leader_epoch():
    stored = _in(MirrorState.MIRRORING).with_(leader_epoch=12)
    check_write(KEY, None, stored)
    check_write(KEY, stored, stored.with_(state_epoch=4))
    with pytest.raises(StateWriteFenced) as e:
        check_write(KEY, stored, stored)  # a second writer that read the same state epoch
    assert e.value.error_code is ErrorCode.FENCED_STATE_EPOCH
    with pytest.raises(StateWriteFenced) as e:
        check_write(KEY, stored, stored.with_(state_epoch=4, leader_epoch=11))
    assert e.value.error_code is ErrorCode.FENCED_LEADER_EPOCH


def test_store_refuses_stale_writes_and_illegal_transitions():
    store = InMemoryStateStore()
    first = transition(UNKNOWN_STATE, MirrorState.PREPARING, 0)
    store.put(KEY, first)
    with pytest.raises(StateWriteFenced):
        store.put(KEY, first)  # a zombie writer replaying the same write
    with pytest.raises(AssertionError):
        store.put(KEY, first.with_(state=MirrorState.STOPPED, state_epoch=first.state_epoch + 1))
    assert store.get(KEY) == first and store.history == [(KEY, MirrorState.UNKNOWN, MirrorState.PREPARING)]


def test_backoff_doubles_and_caps():
    assert [backoff_ms(n, CFG) for n in range(10)] == [1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000, 300000]
    assert backoff_ms(40, CFG) == 300000
    assert backoff_ms(0, CFG, jitter=0.25) == 250
    assert (CFG.failed_retry_initial_backoff_ms, CFG.failed_retry_max_backoff_ms, CFG.failed_retry_max_attempts) == (1000, 300000, 100)


def test_failed_retries_back_to_previous_state_then_exhausts():
    cfg = MirrorConfig(failed_retry_max_attempts=3)
    s = fail(_in(MirrorState.PREPARING), ErrorCode.UNKNOWN_SERVER_ERROR, "boom", 0, cfg)
    assert (s.state, s.previous_state, s.retry_attempt, s.retry_at_ms) == (MirrorState.FAILED, MirrorState.PREPARING, 0, 1000)
    assert decide_failed(s, DesiredState.START, -1, 999, cfg) is s
    now = 0
    for attempt in range(1, 4):
        now = s.retry_at_ms
        back = decide_failed(s, DesiredState.START, -1, now, cfg)
        assert back.state is MirrorState.PREPARING and back.step is Step.PREPARE_CHECK and back.retry_attempt == attempt
        s = fail(back, ErrorCode.UNKNOWN_SERVER_ERROR, "boom", now, cfg)
        assert s.retry_at_ms == now + backoff_ms(attempt, cfg)
    done = decide_failed(s, DesiredState.START, -1, s.retry_at_ms, cfg)
    assert done.state is MirrorState.FAILED and done.retry_attempt == NON_RETRYABLE
    assert "retries exhausted" in (done.error_message or "")
    rearmed = decide_failed(done, DesiredState.START, 5, now + 10**9, cfg)  # a new operator START
    assert rearmed.state is MirrorState.PREPARING and rearmed.retry_attempt == 0 and rearmed.applied_offset == 5


def test_stop_wins_over_backoff_and_keeps_stopping_progress():
    stopping = transition(_in(MirrorState.MIRRORING), MirrorState.STOPPING, 0, step=Step.STOP_PID_RESET,
                          last_mirrored_epoch=4, stop_offset=40, epoch_target=15)
    s = fail(stopping, ErrorCode.UNKNOWN_SERVER_ERROR, "boom", 0, CFG)
    back = decide_failed(s, DesiredState.STOP, -1, 1, CFG)
    assert back.state is MirrorState.STOPPING
    assert (back.step, back.last_mirrored_epoch, back.stop_offset, back.epoch_target) == (Step.STOP_PID_RESET, 4, 40, 15)


def test_inconsistent_topic_id_never_stops():
    s = fail(_in(MirrorState.UNKNOWN), ErrorCode.INCONSISTENT_TOPIC_ID, "foreign", 0, CFG, retryable=False)
    assert decide_failed(s, DesiredState.STOP, 3, 10**9, CFG) is s


@pytest.mark.parametrize("previous,target", [
    (MirrorState.EPOCH_FENCING, MirrorState.MIRRORING), (MirrorState.PAUSING, MirrorState.MIRRORING),
    (MirrorState.PAUSED, MirrorState.MIRRORING), (MirrorState.UNKNOWN, MirrorState.PREPARING),
    (MirrorState.PREPARING, MirrorState.PREPARING), (MirrorState.MIRRORING, MirrorState.MIRRORING),
    (MirrorState.STOPPING, MirrorState.STOPPING),
])
def test_retry_target_is_always_enterable_from_failed(previous, target):
    assert retry_target(previous, DesiredState.START) is target
    assert is_legal_transition(MirrorState.FAILED, target)


def test_state_round_trips_and_maps_onto_the_schema():
    s = transition(_in(MirrorState.MIRRORING), MirrorState.STOPPING, 9, step=Step.STOP_BUMP_EPOCH,
                   last_mirrored_epoch=3, stop_offset=77, epoch_target=14).with_(leader_epoch=13, applied_offset=4)
    assert decode_state(encode_state(s)) == s
    schemas = default_schemas()
    value = schemas.struct("MirrorPartitionStateValue")(**s.to_schema_fields())
    back = schemas.decode("MirrorPartitionStateValue", schemas.encode(value, 0), 0)
    assert {f: getattr(back, f) for f in s.to_schema_fields()} == s.to_schema_fields()
    assert MirrorPartitionState.from_schema_fields(back) == s


def test_config_properties_and_prototype_exclude_list():
    cfg = MirrorConfig.from_properties({"mirror.groups.include": "app-.*, ops", "acl.include": "TOPIC;x",
                                        "failed.retry.max.attempts": "5", "support.unclean.leader.election": "true"})
    assert cfg.groups_include == ("app-.*", "ops") and cfg.acls_include == ("TOPIC;x",)
    assert cfg.failed_retry_max_attempts == 5 and cfg.support_unclean_leader_election
    assert {"unclean.leader.election.enable", "min.insync.replicas", "leader.replication.throttled.replicas",
            "follower.replication.throttled.replicas"} <= set(DEFAULT_TOPIC_PROPERTIES_EXCLUDE)


def test_steps_may_run_before_durable_except_a_second_state_change_and_after_the_lme():
    from coordinator.workflows.drive import may_step_before_durable

    mirroring = _in(MirrorState.MIRRORING)
    stopping = transition(mirroring, MirrorState.STOPPING, 1, step=Step.STOP_REMOVE_FETCHER)
    record_lme = stopping.with_(step=Step.STOP_RECORD_LME)
    bump = stopping.with_(step=Step.STOP_BUMP_EPOCH)
    wait_isr = stopping.with_(step=Step.STOP_WAIT_ISR)
    stopped = transition(wait_isr, MirrorState.STOPPED, 2)
    # one state change, then steps inside it: collapsed into one write
    assert may_step_before_durable(stopping, mirroring, record_lme)
    assert may_step_before_durable(record_lme, mirroring, bump)
    # the LME, stop offset and bump target must be durable before the bump and the markers
    assert not may_step_before_durable(bump, mirroring, wait_isr)
    assert not may_step_before_durable(bump, mirroring)
    assert not may_step_before_durable(bump, bump.with_(step=Step.STOP_RECORD_LME), wait_isr)
    # a second change of state waits: the changelog keeps every state a partition was in
    assert not may_step_before_durable(wait_isr, mirroring, stopped)
    assert may_step_before_durable(wait_isr, bump, stopped)  # STOPPING durable: STOPPED may follow
    assert may_step_before_durable(wait_isr, mirroring)  # deciding alone is allowed
    preparing = transition(UNKNOWN_STATE, MirrorState.PREPARING, 0, step=Step.PREPARE_CHECK)
    assert may_step_before_durable(preparing, None, preparing.with_(step=Step.PREPARE_WAIT_ISR))
    assert not may_step_before_durable(preparing, None, transition(preparing, MirrorState.MIRRORING, 1))
