"""``write_durably`` files a table partition's writes in that partition's RocksDB as one write
batch (as Faust's changelog recovery does), whatever event is being processed; Faust's
``table[key] = value`` put them one at a time under the current event's partition. A real Faust
table on RocksDB, no broker: the producer stands in for the changelog's acknowledgements."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from streams.config import WorkerConfig
from streams.state import mirror_state as mss
from streams.state import mirror_state_codec as msc

PARTITIONS = 4


class Batch:
    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def append(self, key: bytes, value: bytes | None, timestamp: Any) -> int:
        self.records.append((key, value))
        return len(self.records)


class Producer:
    """Acknowledges every batch at once, at offset 40 + its position."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, list[tuple[bytes, bytes | None]]]] = []

    def create_batch(self) -> Batch:
        return Batch()

    async def send_batch(self, batch: Batch, topic: str, partition: int) -> Any:
        self.sent.append((partition, batch.records))
        ack = asyncio.get_running_loop().create_future()
        ack.set_result(SimpleNamespace(offset=40 + len(self.sent)))
        return ack


def get_in(table: Any, partition: int, key: bytes) -> bytes | None:
    """``key`` in table partition ``partition``'s RocksDB only."""
    return table.data._db_for_partition(partition).get(key)  # type: ignore[no-any-return]


@pytest.fixture
def table(tmp_path: Path) -> Any:
    cfg = WorkerConfig(bootstrap_servers="127.0.0.1:1", cluster_name="t", state_partitions=PARTITIONS,
                       data_dir=str(tmp_path))  # fmt: skip
    return mss.make_mirror_state_table(mss.make_app(cfg), cfg)


def test_writes_land_in_their_partitions_store_outside_its_events(table: Any) -> None:
    codec = msc.default_codec()
    by_partition: dict[int, bytes] = {}
    while len(by_partition) < PARTITIONS:
        key = codec.state_key("m", uuid.uuid4(), 0)
        by_partition.setdefault(msc.partition_for_key(key, PARTITIONS), key)
    producer = Producer()

    async def all_at_once() -> None:  # no event is current: each write names its partition
        await asyncio.gather(*(table.write_durably(p, [(k, b"state-%d" % p)], producer, keys_checked=True)
                               for p, k in by_partition.items()))  # fmt: skip

    asyncio.run(all_at_once())
    for p, key in by_partition.items():
        assert [get_in(table, q, key) for q in range(PARTITIONS)] == [b"state-%d" % p if q == p else None
                                                                   for q in range(PARTITIONS)]  # fmt: skip
    assert sorted(p for p, _ in producer.sent) == list(range(PARTITIONS))
    topic = table.changelog_topic.get_topic_name()
    assert {table.data.persisted_offset(mss.TP(topic, p)) for p in range(PARTITIONS)} == set(range(41, 45))

    key = by_partition[2]
    asyncio.run(table.write_durably(2, [(key, None)], producer))  # a tombstone deletes it there
    assert get_in(table, 2, key) is None and producer.sent[-1] == (2, [(key, None)])
    with pytest.raises(msc.MirrorStateError):  # unchecked keys are checked against the partition
        asyncio.run(table.write_durably(3, [(by_partition[1], b"x")], producer))
    assert get_in(table, 3, by_partition[1]) is None


def test_a_table_partitions_memtables_stay_small_under_a_mass_of_writes(table: Any) -> None:
    """A mass failover writes ~9 records per mirror partition: the table partition's RocksDB
    flushes its memtables as they fill instead of holding every write in memory."""
    codec = msc.default_codec()
    keys = []
    while len(keys) < 6000:
        key = codec.state_key("m", uuid.uuid4(), 0)
        if msc.partition_for_key(key, PARTITIONS) == 1:
            keys.append(key)
    producer, value = Producer(), bytes(range(120))
    for _ in range(9):  # 6,000 x 9 writes of ~190 bytes: ~10 MB, more than two memtables hold
        asyncio.run(table.write_durably(1, [(k, value) for k in keys], producer, keys_checked=True))
    db = table.data._db_for_partition(1)
    assert int(db.property_value("rocksdb.cur-size-all-mem-tables")) <= 2 * mss.ROCKSDB_OPTIONS["write_buffer_size"]
    assert db.get(keys[-1]) == value
