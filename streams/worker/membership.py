"""The worker's membership of its consumer group: who it is, whether it is still in, how it leaves.

**Static membership (KIP-345).** A worker joins with ``group.instance.id``: the
``worker.group.instance.id`` setting, or else an id made at its first start and kept in its data
directory (``identity_file``), so a worker restarted with the same arguments is the same
instance. The broker then hands the restarted worker the dead process's member and assignment at
once, whether or not it has expired the dead one: Kafka would only after
``worker.session.timeout.ms``, noida-db 0.2.3 never does. A worker restarted on an empty data
directory is a new instance; the dead one's member is then removed by the controller once it has
published nothing for its session timeout (``streams.admin.members``).

**Leaving.** A static member does not send LeaveGroup when it closes (aiokafka skips it, as
Kafka's client does), so the broker would keep its table partitions until the session expires.
A worker that stops cleanly (a scale-down) leaves explicitly instead (``leave_group``, with the
member id it held), so the others take its table partitions over at once.

**Liveness.** aiokafka runs the group protocol in one task per consumer. If that task ends
(an unexpected error, seen under load as an assignment it could not decode), the consumer stays
up outside the group with no partitions, and nothing restarts it. ``coordination_failure`` says
so; the worker then exits non-zero, for its supervisor to restart it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from streams.config import validate_instance_id

log = logging.getLogger(__name__)

IDENTITY_FILE = "worker.id"
def instance_id(data_dir: Path, cluster_name: str) -> str:
    """This worker's ``group.instance.id`` kept in ``data_dir`` (made on first use)."""
    path = data_dir / IDENTITY_FILE
    try:
        return validate_instance_id(path.read_text(encoding="utf-8").strip())
    except FileNotFoundError:
        pass
    made = f"{cluster_name or 'kip1279'}-worker-{uuid.uuid4().hex[:12]}"
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(made + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # a crash leaves either no identity or a whole one
    log.info("group.instance.id %s made and kept in %s", made, path)
    return made


def coordination_failure(consumer: Any) -> str | None:
    """Why ``consumer`` (an ``AIOKafkaConsumer``) is no longer taking part in its group, or None.

    Only a group coordination task that ended while the consumer is not closing counts: a
    rebalance, a lost coordinator or a failed heartbeat are retried by that task itself.
    """
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or coordinator._closing.done():
        return None
    task = coordinator._coordination_task
    if not task.done():
        return None
    if task.cancelled():
        return "its group coordination task was cancelled"
    return f"its group coordination task died: {task.exception()!r}"


def member_id(consumer: Any) -> str:
    """The member id ``consumer`` holds in its group ("" while it holds none)."""
    coordinator = getattr(consumer, "_coordinator", None)
    return coordinator.member_id if coordinator is not None else ""


async def leave_group(bootstrap: str, group: str, member: str, client_id: str, timeout: float = 5.0) -> int:
    """LeaveGroup for ``member`` of ``group``; returns Kafka's error code (0: it left; 25
    UNKNOWN_MEMBER_ID: it was no longer there, e.g. replaced by a newer join of its instance)."""
    from aiokafka.client import AIOKafkaClient, CoordinationType
    from aiokafka.protocol.group import LeaveGroupRequest

    client = AIOKafkaClient(bootstrap_servers=bootstrap, client_id=client_id, request_timeout_ms=int(timeout * 1000))
    try:
        async with asyncio.timeout(timeout):
            await client.bootstrap()
            node = await client.coordinator_lookup(CoordinationType.GROUP, group)
            response = await client.send(node, LeaveGroupRequest(group, member))
        return int(response.error_code)
    finally:
        await client.close()


def rejoin_when_left_out() -> bool:
    """Idempotent; patches aiokafka's group join for this process: a SyncGroup answer with an empty
    assignment (no bytes at all) is joined again, not decoded. A group coordinator fills in empty
    bytes for a member the leader's plan left out (one that joined as the round closed: noida-db
    does it); aiokafka failed to decode them and its group coordination task died, before table
    recovery, so the worker held nothing and never exited. An assignment of no partitions is never
    empty bytes: it carries its version and an empty list. False if aiokafka has another layout."""
    try:
        from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance
    except ImportError:  # pragma: no cover
        return False
    original = getattr(CoordinatorGroupRebalance, "perform_group_join", None)
    if original is None:
        log.warning("aiokafka's group join has another layout: an empty assignment is not joined again")
        return False
    if getattr(original, "_kip1279_rejoin", False):
        return True

    async def perform_group_join(self: Any) -> Any:
        got = await original(self)
        if got is not None and not got[1]:
            log.warning("group %s: the leader's assignment left this member out (no assignment bytes): joining again",
                        self.group_id)  # fmt: skip
            return None  # aiokafka backs off, then joins again
        return got

    perform_group_join._kip1279_rejoin = True  # type: ignore[attr-defined]
    CoordinatorGroupRebalance.perform_group_join = perform_group_join
    return True


_unconfirmed: set[tuple[str, int]] = set()


async def in_generation(bootstrap: str, group: str, generation: int, member: str, client_id: str,
                        timeout: float = 5.0) -> bool:  # fmt: skip
    """Whether the group coordinator holds ``member`` in ``generation`` now: a Heartbeat of our own,
    answered with no error. A worker refused as a stale owner asks
    this before it claims its epoch again (``coordinator.fencing``): a paused worker is not in
    the current generation, so it never passes."""
    from aiokafka.client import AIOKafkaClient, CoordinationType
    from aiokafka.protocol.group import HeartbeatRequest

    client = AIOKafkaClient(bootstrap_servers=bootstrap, client_id=client_id, request_timeout_ms=int(timeout * 1000))
    try:
        async with asyncio.timeout(timeout):
            await client.bootstrap()
            node = await client.coordinator_lookup(CoordinationType.GROUP, group)
            response = await client.send(node, HeartbeatRequest(group, generation, member))
        return int(response.error_code) == 0
    except Exception as e:  # noqa: BLE001 - unknown: not confirmed
        # Asked again at the next refused claim: said once per generation.
        level = logging.DEBUG if (group, generation) in _unconfirmed else logging.WARNING
        _unconfirmed.add((group, generation))
        log.log(level, "asking group %s whether generation %d is current failed: %r", group, generation, e)
        return False
    finally:
        await client.close()
