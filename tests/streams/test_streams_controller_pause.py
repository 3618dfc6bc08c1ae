"""The active controller paused (SIGSTOP, as a long GC pause or a frozen VM) past its session
timeout, among three ``kip1279-controller`` processes, while a ``--stop`` is in flight; a standby
takes over; the paused one is resumed (SIGCONT). The woken controller changes nothing: the stop
is applied once, a write sent to the woken one alone is refused with NOT_CONTROLLER and never
reaches the log, and the log's terms only go up. It is fenced by the log's writer (the successor
took its transactional id over), not by its own memory, which still says it is active when it
wakes. KIP1279_SEED picks the pause's delay."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
import uuid
from pathlib import Path

import pytest

from controller_rig import ADMIN, MIRROR, NOT_CONTROLLER, TOPICS, ControllerRig
from streams.admin.client import ClusterMirrorAdmin

pytestmark = pytest.mark.brokers("noida-db", "apache-kafka")

SESSION_S = 2.0  # controller.session.timeout.ms's default


async def _stop(endpoints: str, topic: str, retry_timeout: float) -> tuple[int, list[int]]:
    async with ClusterMirrorAdmin(endpoints, principal=ADMIN, timeout=5, retry_timeout=retry_timeout) as a:
        r = (await a.stop(MIRROR, [topic])).response
        return r.error_code, [t.error_code for t in r.topics]  # type: ignore[attr-defined]


async def _stop_at_only(endpoint: str, topic: str) -> int:
    """A --stop sent to one controller, not following its NOT_CONTROLLER answer elsewhere."""
    async with ClusterMirrorAdmin(endpoint, principal=ADMIN, timeout=5, retry_timeout=0) as a:
        body = a._req("StopMirrorTopics", mirror_name=MIRROR, topics=a._topics("StopMirrorTopics", [topic]),
                      patterns=[], state_validation_offset=-1, consistent_cut=False)  # fmt: skip
        reply = await a._call_once("StopMirrorTopics", body, 0, uuid.uuid4())
        return reply.response.error_code  # type: ignore[attr-defined,no-any-return]


def _stops(messages: list[object]) -> list[object]:
    return [m.topic_id for m in messages  # type: ignore[attr-defined]
            if type(m).__name__ == "MirrorTopicStateChangeRecord" and m.desired_state == 1]  # type: ignore[attr-defined]


async def test_a_paused_active_controller_woken_after_a_takeover_changes_nothing(kafka_broker: object,
                                                                                 tmp_path: Path) -> None:  # fmt: skip
    rng = random.Random(int(os.environ.get("KIP1279_SEED", "36")))
    rig = ControllerRig.create(kafka_broker.bootstrap, tmp_path)  # type: ignore[attr-defined]
    try:
        await rig.seed()
        for m in rig.members:
            rig.spawn(m)
        for m in rig.members:
            await rig.answers_reads(m)
        paused = await rig.active()
        assert paused.proc is not None

        # 1. The active one freezes while a --stop is in flight; the client retries elsewhere.
        stop = asyncio.create_task(_stop(rig.bootstrap, "t0", retry_timeout=60))
        await asyncio.sleep(rng.uniform(0.0, 0.08))
        paused.proc.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            successor = await rig.active(exclude=paused)
            took = time.monotonic() - frozen_at
            assert await stop == (0, [0])
            assert await _stop(successor.endpoint, "t1", retry_timeout=0) == (0, [0])
            assert took <= SESSION_S + 3.0, took
        finally:
            paused.proc.send_signal(signal.SIGCONT)

        # 2. Woken: at once, a write sent to it alone is refused, whatever it believed on waking.
        assert await _stop_at_only(paused.endpoint, "t2") == NOT_CONTROLLER
        await asyncio.sleep(SESSION_S)  # what it might still append on its own would be in by now
        assert await rig.active() is successor
        code, _ = await rig.write_probe(paused)
        assert code == NOT_CONTROLLER

        messages = await rig.log_messages()
        assert sorted(_stops(messages)) == sorted([TOPICS["t0"], TOPICS["t1"]])  # each once; t2 never
        epochs = [m.epoch for m in messages if type(m).__name__ == "ClusterMirrorControllerRecord"]  # type: ignore[attr-defined]
        assert len(epochs) >= 2 and epochs == sorted(set(epochs)), epochs
        assert paused.proc.poll() is None  # it stepped down and stays up as a standby
    finally:
        rig.close()
