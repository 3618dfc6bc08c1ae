"""A worker takes a table partition on only once Faust has recovered it.

Faust's recovery replays a newly assigned table partition's changelog into RocksDB with the
stream flow already resumed (``Recovery._restart_recovery``: "Resuming flow..." before "Done
reading from changelog topics"), so a step of another table partition may run meanwhile. Its
``WorkerTable.sync_ownership`` saw the new assignment and loaded the partition's states from a
RocksDB still filling: none or some, and a partition once taken is never loaded again. The mirror
partitions missing were never stepped: CI saw a stop taken over from a worker that left never
reach STOPPED (the rebalance scenario, ``test_streams_worker_rebalance``).
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState, encode_state
from coordinator.states import MirrorState
from streams.state.mirror_state_codec import default_codec
from streams.worker.state_store import WorkerStateStore
from streams.worker.table import _VALUE_PREFIX, WorkerTable

PARTITIONS = 4


class RecoveringTable:
    """Faust's table as ``sync_ownership`` reads it: RocksDB's rows, and the app's rebalance flags."""

    def __init__(self) -> None:
        self.rows: dict[bytes, bytes] = {}
        self.app = SimpleNamespace(rebalancing=True, in_recovery=True)

    def items(self) -> Any:
        return list(self.rows.items())


def unfenced(wt: WorkerTable) -> WorkerTable:
    """No broker here: the fence and the changelog read of a takeover (``test_streams_fencing``) are left out."""

    async def nothing(partitions: set[int]) -> None:
        pass

    wt.fence_and_catch_up = nothing  # type: ignore[method-assign]
    return wt


def keys_in(partition: int, store: WorkerStateStore, n: int) -> list[MirrorPartitionKey]:
    out = []
    for i in range(1, 10_000):
        key = MirrorPartitionKey("m", uuid.UUID(int=i), 0)
        if store.partition_of(key) == partition:
            out.append(key)
            if len(out) == n:
                return out
    raise AssertionError("not enough keys")


def test_a_table_partition_assigned_mid_recovery_is_taken_once_recovered_with_every_state() -> None:
    store = WorkerStateStore(PARTITIONS)
    store.owned = {0}
    table = RecoveringTable()
    keys = keys_in(1, store, 3)
    image = SimpleNamespace(offset=10, mirrors=SimpleNamespace(topics={k.topic_id: SimpleNamespace(mirror_name="m")
                                                                        for k in keys}))  # fmt: skip
    wt = unfenced(WorkerTable(SimpleNamespace(state_partitions=PARTITIONS), table, store, lambda: image, lambda _: None))  # type: ignore[arg-type]
    codec = default_codec()

    def recover(key: MirrorPartitionKey) -> None:  # Faust's recovery writing one changelog record
        state = MirrorPartitionState(state=MirrorState.STOPPING, applied_offset=5)
        table.rows[codec.state_key(key.mirror_name, key.topic_id, key.partition)] = _VALUE_PREFIX + encode_state(state)

    recover(keys[0])  # one record of three replayed so far
    released, loaded = asyncio.run(wt.sync_ownership({0, 1}))
    assert (released, loaded) == ([], []) and store.owned == {0}, "took the partition on mid-recovery"
    for k in keys[1:]:
        recover(k)
    table.app.in_recovery = False
    assert asyncio.run(wt.sync_ownership({0, 1})) == ([], []) and store.owned == {0}  # the rebalance is not over yet
    table.app.rebalancing = False
    released, loaded = asyncio.run(wt.sync_ownership({0, 1}))
    assert released == [] and sorted(loaded) == sorted(keys) and store.owned == {0, 1}
    assert sorted(wt.keys_of(1)) == sorted(keys)


def test_losing_a_table_partition_mid_rebalance_lets_it_go_at_once() -> None:
    store = WorkerStateStore(PARTITIONS)
    store.owned = {0, 1}
    table = RecoveringTable()
    wt = unfenced(WorkerTable(SimpleNamespace(state_partitions=PARTITIONS), table, store,  # type: ignore[arg-type]
                              lambda: SimpleNamespace(offset=0, mirrors=SimpleNamespace(topics={})), lambda _: None))  # fmt: skip
    asyncio.run(wt.sync_ownership({0}))
    assert store.owned == {0}
