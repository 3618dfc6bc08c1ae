"""The runner's stores when it runs without the Faust worker: partition states in memory and the
log of desired states (the worker uses RocksDB tables and the metadata image instead)."""

from __future__ import annotations

import uuid

import msgspec

from coordinator.partition_state import (
    LastMirrorEpoch,
    MirrorPartitionKey,
    MirrorPartitionState,
    check_write,
    decode_state,
    encode_state,
)
from coordinator.image import TopicCut
from coordinator.states import DesiredState, MirrorState, is_legal_transition


class InMemoryStateStore:
    """Stand-in for ``__mirror_state``: encoded values per key, fenced writes, legal transitions only."""

    def __init__(self) -> None:
        self._values: dict[MirrorPartitionKey, bytes] = {}
        self.last_mirror_epochs: dict[MirrorPartitionKey, LastMirrorEpoch] = {}
        self.impacts: dict[MirrorPartitionKey, msgspec.Struct] = {}  # MirrorFailoverImpactValues
        self.history: list[tuple[MirrorPartitionKey, MirrorState, MirrorState]] = []

    def get(self, key: MirrorPartitionKey) -> MirrorPartitionState | None:
        raw = self._values.get(key)
        return None if raw is None else decode_state(raw)

    def put(self, key: MirrorPartitionKey, state: MirrorPartitionState) -> None:
        stored = self.get(key)
        check_write(key, stored, state)
        before = stored.state if stored is not None else MirrorState.UNKNOWN
        if not is_legal_transition(before, state.state):
            raise AssertionError(f"{key}: illegal transition {before.name} -> {state.state.name}")
        self._values[key] = encode_state(state)
        if before != state.state:
            self.history.append((key, before, state.state))

    def put_lme(self, record: LastMirrorEpoch) -> None:
        self.last_mirror_epochs[record.key] = record

    def put_impact(self, key: MirrorPartitionKey, value: msgspec.Struct) -> None:
        self.impacts[key] = value

    def get_impact(self, key: MirrorPartitionKey) -> msgspec.Struct | None:
        return self.impacts.get(key)

    def keys(self, mirror_name: str) -> list[MirrorPartitionKey]:
        return sorted(k for k in self._values if k.mirror_name == mirror_name)

    def may_run(self, key: MirrorPartitionKey, current: MirrorPartitionState, proposed: MirrorPartitionState | None) -> bool:
        return True  # every write is durable at once

    def step_view(self, key: MirrorPartitionKey) -> tuple[MirrorPartitionState | None, bool]:
        """``get`` and ``may_run(key, state, None)`` in one."""
        return self.get(key), True


class DesiredStateLog:
    """Stand-in for the metadata log's MirrorTopicStateChangeRecords: offsets only grow."""

    def __init__(self) -> None:
        self.records: list[tuple[int, str, uuid.UUID, DesiredState]] = []
        self.cuts: dict[int, TopicCut] = {}  # offset -> the cut a STOP record carries

    def append(self, mirror_name: str, topic_id: uuid.UUID, desired: DesiredState, cut: TopicCut | None = None) -> int:
        offset = len(self.records)
        self.records.append((offset, mirror_name, topic_id, desired))
        if cut is not None:
            self.cuts[offset] = cut
        return offset

    def cut(self, mirror_name: str, topic_id: uuid.UUID) -> TopicCut | None:
        """The cut of the topic's latest desired state (a ``--consistent-cut`` stop), if any."""
        got = self.latest(mirror_name).get(topic_id)
        return None if got is None else self.cuts.get(got[1])

    def latest(self, mirror_name: str) -> dict[uuid.UUID, tuple[DesiredState, int]]:
        out: dict[uuid.UUID, tuple[DesiredState, int]] = {}
        for offset, name, topic_id, desired in self.records:
            if name == mirror_name:
                out[topic_id] = (desired, offset)
        return out
