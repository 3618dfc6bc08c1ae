"""The controllers' control plane (issue #36): which of a destination cluster's controllers is the
active one, its term, and the state-changing requests the metadata log already answered.

Each controller publishes heartbeats (``streams.admin.election``); a standby takes over once the
active has been silent for ``controller.session.timeout.ms`` (``coordinator.election``), by
fencing the log's writer (its transactional id: the broker refuses the older writer's appends
from then on) and appending a ``ClusterMirrorControllerRecord`` that names it, as KRaft's new
leader appends a LeaderChangeMessage. A controller that reads a newer term, or whose append is
fenced, steps down and stays a standby; a standby answers a state-changing request with
NOT_CONTROLLER and the active's endpoint. A request's ID and answer go into the log with its
records (``ClusterMirrorRequestRecord``), so a retry is answered from the log by any controller.

``ClusterMirrorController`` (``streams.admin.controller``) serves requests and follows the log;
this class holds the rest, and reaches the controller only through ``Host``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

import msgspec

from coordinator.election import Heartbeat, should_take_over
from coordinator.image import ActiveController, MetadataImage
from coordinator.states import ErrorCode
from records.framing import ApiMessageAndVersion
from records.registry import SchemaSet
from streams.admin.client import RequestHeader
from streams.admin.election import HeartbeatChannel
from streams.admin.responses import error_response
from streams.config import WorkerConfig
from streams.state.metadata_log import MetadataLogWriter

log = logging.getLogger(__name__)
MAX_KEPT_RESPONSE_BYTES = 512 * 1024  # a request's answer kept in the log (ClusterMirrorRequestRecord)


class Host(Protocol):
    """What the control plane needs of its controller."""

    config: WorkerConfig
    schemas: SchemaSet
    _lock: asyncio.Lock  # one command at a time: a term's first record too

    @property
    def image(self) -> MetadataImage: ...
    @property
    def metadata_offset(self) -> int: ...
    @property
    def address(self) -> tuple[str, int] | None: ...

    async def append(self, records: Sequence[ApiMessageAndVersion], timeout: float = 30.0) -> list[int]: ...
    async def read_to(self, end: int) -> None: ...


class ControlPlane:
    """The election, the term and the requests the log answered, for one controller."""

    def __init__(self, host: Host, config: WorkerConfig, schemas: SchemaSet,
                 on_active: Callable[[], Coroutine[Any, Any, None]] | None = None,
                 on_standby: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:  # fmt: skip
        self.host, self.config, self.schemas = host, config, schemas
        self.writer: MetadataLogWriter | None = None  # while active
        self.active = False
        self.controller_id = config.controller_id  # set at start when empty
        self.instance = uuid.uuid4().hex
        self.term: ActiveController | None = None  # the ClusterMirrorControllerRecord of our term
        self.heartbeats = HeartbeatChannel(config.bootstrap_servers, config.controllers_topic_name)
        self.on_active = on_active  # run once a term started (the dead-member remover)
        self.on_standby = on_standby  # run on stepping down
        self._election: asyncio.Task[None] | None = None
        self._step_downs: set[asyncio.Task[None]] = set()

    # -- the term ----------------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        address = self.host.address
        return f"{address[0]}:{address[1]}" if address else ""

    @property
    def active_endpoint(self) -> str | None:
        """Where the active controller listens, as the log last said (None: no controller yet)."""
        if self.active:
            return self.endpoint or None
        c = self.host.image.control.controller
        return c.endpoint if c is not None and c.endpoint else None

    def replayed(self, record: ApiMessageAndVersion) -> None:
        """Told of each replayed record: a term other than ours means we were taken over."""
        m: Any = record.message
        if self.active and type(m).__name__ == "ClusterMirrorControllerRecord" and \
                ActiveController(m.controller_id, m.endpoint, m.epoch) != self.term:  # fmt: skip
            self._spawn_step_down(f"controller {m.controller_id} at {m.endpoint} took over in epoch {m.epoch}")

    async def start(self) -> None:
        """One election round now (a lone controller, or one whose active is gone, serves at
        once), then one every fifth of the session timeout."""
        if not self.controller_id:
            self.controller_id = self.endpoint or f"controller-{self.instance}"
        await self.heartbeats.start()
        await self._election_round()
        self._election = asyncio.create_task(self._run_election(), name="kip1279-controller-election")

    async def stop(self) -> None:
        """Stop electing; a last heartbeat that leaves: a standby takes over at its next round,
        not a session later."""
        for task in (self._election, *self._step_downs):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._election = None
        self.active = False
        with contextlib.suppress(Exception):
            await self.heartbeats.publish(self._heartbeat()._replace(leaving=True))
        writer, self.writer = self.writer, None
        for part in (self.heartbeats, writer):
            if part is not None:
                with contextlib.suppress(Exception):
                    await part.stop()

    def _heartbeat(self) -> Heartbeat:
        epoch = self.term.epoch if self.term is not None else -1
        return Heartbeat(self.controller_id, self.instance, self.endpoint, self.active, epoch, int(time.time() * 1000))

    async def _election_round(self) -> None:
        try:
            await self.heartbeats.publish(self._heartbeat())
            beats = await self.heartbeats.poll()
        except Exception as e:  # noqa: BLE001 - the next round tries again
            log.warning("controller heartbeats on %s failed: %s", self.config.controllers_topic_name, e)
            return
        if not self.active and should_take_over(self.controller_id, self.instance, beats, int(time.time() * 1000),
                                                self.config.controller_session_timeout_ms):  # fmt: skip
            await self.take_over()

    async def _run_election(self) -> None:
        period = self.config.controller_session_timeout_ms / 5000
        while True:
            await asyncio.sleep(period)
            await self._election_round()

    async def take_over(self) -> None:
        """Fence the log's writer, read the log to its end, append our term's record. Only the
        append holds the request lock: reads go on being served while Kafka answers the rest."""
        t0 = time.monotonic()
        writer = MetadataLogWriter(self.config.bootstrap_servers, self.config.metadata_topic_name)
        try:
            await writer.start()  # init_transactions: every older writer is fenced from here on
            await asyncio.wait_for(self.host.read_to(writer.start_end_offset), 30.0)
            async with self.host._lock:  # no request is served between the fencing and our term's record
                self.writer, self.active = writer, True
                self.term = ActiveController(self.controller_id, self.endpoint, writer.epoch)
                cls = self.schemas.struct("ClusterMirrorControllerRecord")
                key = self.schemas.spec("ClusterMirrorControllerRecord").api_key
                await self.host.append([ApiMessageAndVersion(cls(controller_id=self.term.controller_id, endpoint=self.term.endpoint,
                                                                 epoch=self.term.epoch), 0, key)])  # type: ignore[arg-type]  # fmt: skip
        except Exception as e:  # noqa: BLE001 - fenced by another in the meantime, or the log is down
            log.warning("controller %s did not take over: %r", self.controller_id, e)
            self.active, self.writer, self.term = False, None, None
            with contextlib.suppress(Exception):
                await writer.stop()
            return
        if self.on_active is not None:
            await self.on_active()
        log.warning("controller %s at %s is the active controller (epoch %d), taken over in %.2f s",
                    self.controller_id, self.endpoint, self.term.epoch, time.monotonic() - t0)  # fmt: skip
        with contextlib.suppress(Exception):
            await self.heartbeats.publish(self._heartbeat())

    def _spawn_step_down(self, why: str) -> None:
        task = asyncio.create_task(self.step_down(why))
        self._step_downs.add(task)
        task.add_done_callback(self._step_downs.discard)

    async def step_down(self, why: str) -> None:
        """Stop writing (a newer controller fenced this one) and stay on as a standby."""
        if not self.active:
            return
        self.active = False
        writer, self.writer, self.term = self.writer, None, None
        log.warning("controller %s steps down and is a standby now: %s", self.controller_id, why)
        if self.on_standby is not None:
            await self.on_standby()
        if writer is not None:
            with contextlib.suppress(Exception):
                await writer.stop()
        with contextlib.suppress(Exception):
            await self.heartbeats.publish(self._heartbeat())

    async def wait_active(self, timeout: float) -> None:
        """Until this controller is the active one (tests, and the main job's start)."""
        deadline = time.monotonic() + timeout
        while not self.active:
            if time.monotonic() > deadline:
                raise TimeoutError(f"controller {self.controller_id} is not active after {timeout} s")
            await asyncio.sleep(0.05)

    # -- NOT_CONTROLLER ------------------------------------------------------------------------

    def not_active_message(self) -> str:
        where = self.active_endpoint
        return f"controller {self.controller_id} is not the active controller" + (
            f"; the active controller is at {where}" if where else "; no active controller is known yet")

    def not_controller(self, api: str) -> msgspec.Struct:
        return error_response(self.schemas, api, ErrorCode.NOT_CONTROLLER, self.not_active_message())

    # -- request IDs ---------------------------------------------------------------------------

    def request_record(self, rid: uuid.UUID, header: RequestHeader, response: msgspec.Struct) -> ApiMessageAndVersion:
        """The record that keeps a request's answer in the log, with the request's own records."""
        encoded = self.schemas.encode(response, header.api_version)
        if len(encoded) > MAX_KEPT_RESPONSE_BYTES and getattr(response, "topics", None):
            # A record must stay under the log's max.message.bytes: a mass stop's answer keeps
            # its refused topics only (the accepted ones are in the log's own records).
            kept = [t for t in response.topics if t.error_code]  # type: ignore[attr-defined]
            encoded = self.schemas.encode(msgspec.structs.replace(response, topics=kept), header.api_version)
        cls = self.schemas.struct("ClusterMirrorRequestRecord")
        key = self.schemas.spec("ClusterMirrorRequestRecord").api_key
        return ApiMessageAndVersion(cls(request_id=rid, api_key=header.api_key, api_version=header.api_version,
                                        response=encoded), 0, key)  # type: ignore[arg-type]  # fmt: skip

    def answered(self, rid: uuid.UUID | None, api: str, version: int) -> tuple[msgspec.Struct, int] | None:
        """The answer a request with this ID got, if the log has it."""
        applied = self.host.image.control.requests.get(rid) if rid is not None else None
        if applied is None:
            return None
        log.info("%s request %s is a retry: answered as first applied", api, rid)
        return self.schemas.decode(f"{api}Response", applied.response, applied.api_version), self.host.metadata_offset
