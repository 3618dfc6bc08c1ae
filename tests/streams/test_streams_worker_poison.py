"""Poison and unknown records in the metadata log, written past the controller while the worker runs.

Two raw records go onto the metadata topic through a plain producer (as a buggy or foreign
writer would): an undecodable frame (frame version 0, a truncated body) and a well-framed record
whose apiKey no schema has. The worker must report each with its offset, quarantine both to the
DLQ topic, keep applying the records after them (a ``--stop`` issued afterwards still takes
effect), and after a SIGKILL and restart on the same data directory, replay past them again
without a crash loop (the process stays up, the state stays right, the history stays clean).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker
from streams.state.dead_letters import read_dlq
from worker_harness import Rig, history_problems

UNDECODABLE = b"\x00\x07\x01\xff"  # frame version 0: not a metadata record frame
UNKNOWN_API_KEY = bytes([1, 0xE8, 0x07, 0])  # frame v1, apiKey 1000 (uvarint), version 0, empty body


async def _append_raw(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", client_id="kip1279-test-poison")
    await producer.start()
    try:
        return [(await producer.send_and_wait(topic, value=v, partition=0)).offset for v in values]
    finally:
        await producer.stop()


@pytest.mark.slow
def test_poison_and_unknown_records_are_quarantined_and_later_records_applied(broker: LocalBroker, tmp_path: Path) -> None:
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 2, "audit": 1}, tick=0.1)
    try:
        rig.start(clusters=("B",))
        rig.spawn_worker("B")
        rig.produce("A", 0.5, 5)
        rig.create_mirror("B", "a-to-b", "A")
        rig.start_topics("B", "a-to-b")
        rig.wait("a-to-b MIRRORING", lambda: rig.all_in("B", "a-to-b", MirrorState.MIRRORING))

        topic = rig.config("B").metadata_topic_name
        offsets = asyncio.run(_append_raw(broker.bootstrap, topic, [UNDECODABLE, UNKNOWN_API_KEY]))
        rig.stop_topics("B", "a-to-b")  # appended by the controller after the two poison records
        rig.wait("a-to-b STOPPED after the poison records", lambda: rig.all_in("B", "a-to-b", MirrorState.STOPPED))
        rig.wait("B writable", lambda: not any(rig.read_only("B").values()), 30)

        # reported with their offsets, and quarantined
        text = rig.worker_log("worker-B")
        for o in offsets:
            assert f"offset {o} " in text and "quarantined" in text, text[-3000:]
        assert "unknown" in text.lower() and "apiKey 1000" in text, text[-3000:]
        dlq = asyncio.run(read_dlq(broker.bootstrap, topic))
        assert {q.offset for q in dlq} >= set(offsets)
        by_offset = {q.offset: q for q in dlq}
        assert by_offset[offsets[0]].raw == UNDECODABLE and by_offset[offsets[1]].raw == UNKNOWN_API_KEY
        assert "apiKey 1000" in by_offset[offsets[1]].error

        # SIGKILL and restart on the same data directory: it replays past them, no crash loop
        rig.kill_worker("worker-B")
        rig.spawn_worker("B")
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            assert rig.worker_alive("worker-B"), rig.worker_log("worker-B")[-3000:]
            time.sleep(0.5)
        assert "Traceback" not in rig.worker_log("worker-B"), rig.worker_log("worker-B")[-3000:]
        assert rig.all_in("B", "a-to-b", MirrorState.STOPPED)
        assert history_problems(rig.history("B")) == []
        assert rig.log_problems("A", "B", offsets=False) == []
    finally:
        rig.close()
