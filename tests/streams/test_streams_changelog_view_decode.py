"""The controller's ``__mirror_state`` view decodes a status once per distinct (state, previous
state, retry, no error) prefix, and hands on only statuses that changed; in-process, no broker."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from coordinator.states import MirrorState
from streams.state import changelog_view
from streams.state.changelog_view import MirrorStateChangelogView, PartitionStatus
from streams.state.mirror_state_codec import MirrorStateCodec

CODEC = MirrorStateCodec()
TOPIC = uuid.UUID(int=42)


def key(p: int) -> bytes:
    return CODEC.state_key("a-to-b", TOPIC, p)


def value(state: MirrorState, step: int = 0, epoch: int = 1, retry: int = 0, error: str | None = None) -> bytes:
    return CODEC.encode_value(CODEC.state_value(state=int(state), previous_state=int(MirrorState.MIRRORING),
                                                retry_attempt=retry, error_message=error, leader_epoch=epoch,
                                                state_epoch=epoch, applied_offset=100 + epoch, step=step))  # fmt: skip


def full_decode(raw: bytes) -> PartitionStatus:
    v: Any = CODEC.decode_value(changelog_view.RecordType.MIRROR_PARTITION_STATE, raw)
    return PartitionStatus(MirrorState(v.state), v.retry_attempt, v.error_message)


@pytest.fixture
def view(monkeypatch: pytest.MonkeyPatch) -> tuple[MirrorStateChangelogView, list[bytes]]:
    v = MirrorStateChangelogView("127.0.0.1:1", "unused", 1)
    decoded: list[bytes] = []
    real = v.codec.decode_value
    monkeypatch.setattr(v.codec, "decode_value", lambda rtype, raw: decoded.append(raw) or real(rtype, raw))
    return v, decoded


def apply(v: MirrorStateChangelogView, latest: dict[bytes, tuple[bytes | None, int]]) -> dict[Any, Any]:
    changed = v._decode_latest(latest)
    for skey, status in changed.items():
        if status is None:
            v._states.pop(skey, None)
        else:
            v._states[skey] = status
    return changed


def test_a_prefix_seen_once_is_not_decoded_again_and_gives_the_full_decode(view: Any) -> None:
    v, decoded = view
    values = {key(p): value(MirrorState.STOPPING, step=20 + p % 3, epoch=p) for p in range(50)}
    changed = apply(v, {k: (val, i) for i, (k, val) in enumerate(values.items())})
    assert len(decoded) == 1  # 50 values, one (State, PreviousState, RetryAttempt, no error) prefix
    assert changed == {("a-to-b", TOPIC, p): full_decode(values[key(p)]) for p in range(50)}
    # Another state, a retry count or an error message is another status: decoded, and right.
    others = {key(0): value(MirrorState.STOPPED), key(1): value(MirrorState.FAILED, retry=3, error="boom"),
              key(2): value(MirrorState.FAILED, retry=3, error="boom"), key(3): value(MirrorState.FAILED, retry=2)}  # fmt: skip
    changed = apply(v, {k: (val, 0) for k, val in others.items()})
    assert changed == {("a-to-b", TOPIC, int(p)): full_decode(others[key(p)]) for p in range(4)}
    assert changed[("a-to-b", TOPIC, 1)] == PartitionStatus(MirrorState.FAILED, 3, "boom")
    assert len(decoded) == 1 + 4  # errors are decoded each time (their text is not in the prefix)


def test_only_changed_statuses_are_handed_on(view: Any) -> None:
    v, _ = view
    apply(v, {key(p): (value(MirrorState.MIRRORING, epoch=1), p) for p in range(4)})
    # A new epoch or applied offset is a new value, not a new status: nothing to apply.
    changed = apply(v, {key(p): (value(MirrorState.MIRRORING, epoch=2), p) for p in range(4)}
                    | {key(9): (value(MirrorState.MIRRORING), 9)})  # fmt: skip
    assert changed == {("a-to-b", TOPIC, 9): PartitionStatus(MirrorState.MIRRORING)}
    changed = apply(v, {key(0): (None, 10), key(1): (value(MirrorState.STOPPING), 11)})
    assert changed == {("a-to-b", TOPIC, 0): None, ("a-to-b", TOPIC, 1): PartitionStatus(MirrorState.STOPPING)}


def test_an_undecodable_value_is_logged_and_skipped(view: Any, caplog: pytest.LogCaptureFixture) -> None:
    v, _ = view
    with caplog.at_level(logging.ERROR):
        changed = apply(v, {key(0): (b"\x00\x00\x02", 5), key(1): (value(MirrorState.PAUSED), 6)})
    assert changed == {("a-to-b", TOPIC, 1): PartitionStatus(MirrorState.PAUSED)}
    assert "undecodable unused record at offset 5" in caplog.text
