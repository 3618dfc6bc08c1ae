"""The cluster mirror controller: validates and authorizes admin commands, and alone appends
their records to the metadata log (as KRaft's active controller).

One request at a time, like KRaft's single-threaded controller: validate against the current
image -> append the records atomically -> wait until the log has been replayed past them ->
answer. Reads (list, describe) see only committed state. Validation is a pluggable callable
``(request, image, states) -> (records, response)``; the default wires ``coordinator.admin``.

The per-partition states come from a ``StatusSource``; the default follows ``__mirror_state``
(the Faust table's changelog) with a plain consumer, so describe shows what the workers
persisted: state, retry attempt and error. Source HW and destination LEO come from an
optional batched offsets lookup (the cluster ports), -1 until one is given; only describe asks
for them, looked up for the request unless it allows older ones (``OffsetsMaxAgeMs``), and
each partition's answer says how old its offsets are.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import msgspec

from coordinator import admin
from coordinator.delta import ProblemKind, Replayer
from coordinator.readiness import SyncReport
from coordinator.state_counts import StateTally
from coordinator.image import AclOperation, AclPermissionType, AclResourceType, MetadataImage, PatternType
from coordinator.states import ErrorCode
from records.framing import ApiMessageAndVersion
from records.registry import SchemaSet, default_schemas
from streams.admin.client import (
    API_NAMES,
    ProtocolError,
    RequestHeader,
    decode_request_header,
    encode_response,
    read_frame,
    scrub,
    secret_values,
)
from streams import tls
from streams.config import WorkerConfig
from streams.state.dead_letters import DeadLetterQueue
from streams.state.metadata_log import MetadataLogLoader, MetadataLogReader, MetadataLogWriter
from streams.state.snapshots import SnapshotPolicy, SnapshotStore
from streams.config import dlq_topic_spec, ensure_topics, metadata_topic_spec
from streams.state.mirror_state import mirror_state_topic_spec
from streams.state.stop_reports import StopReportsView, stop_reports_topic_spec
from streams.state.sync_status import SyncStatusView, sync_status_topic_spec
from streams.state.changelog_view import MirrorStateChangelogView, PartitionStatus, StateKey
from streams.admin.members import DeadMemberRemover
from streams.admin.progress import ProgressCounts
from streams.admin.cut import attach_cuts, plan_stop_cut
from streams.admin.preview import PreviewPorts, Refused, predict_stop, serve_preview, with_impact_record
from streams.admin.responses import alter_configs_response, describe_config, describe_response, error_response, list_response, names, topic_response

log = logging.getLogger(__name__)
ANONYMOUS = "User:ANONYMOUS"
BUSY_AFTER_REQUEST_S = 2.0  # a snapshot due waits while requests came this recently (``_serving``)


class AdminRequest(NamedTuple):
    header: RequestHeader
    api: str  # e.g. "StopMirrorTopics"
    body: msgspec.Struct
    principal: admin.Principal
    # Describe only: the workers' sync reports per mirror (None: not known to this controller).
    syncs: Mapping[str, Sequence[SyncReport]] | None = None
    # A StateCountsOnly describe: the counts per state kept as the changelog is read (None: walk the states).
    tally: StateTally | None = None
    # List only: the cluster ID each mirror's source last answered, by mirror.
    source_cluster_ids: Mapping[str, str] | None = None


Validator = Callable[[AdminRequest, MetadataImage, Mapping[StateKey, PartitionStatus]],
                     tuple[Sequence[ApiMessageAndVersion], msgspec.Struct]]  # fmt: skip


class StatusSource(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...

    async def statuses(self, offsets: bool = True, mirrors: Collection[str] | None = None,
                       max_age: float = 0.0) -> Mapping[StateKey, PartitionStatus]:  # fmt: skip
        """Every partition's status; source HW / destination LEO only with ``offsets``, and then
        only for ``mirrors`` (None: all) -- the others keep -1. Offsets are looked up for this
        call unless ones at most ``max_age`` seconds old are at hand."""
        ...


# -------------------------------------------------------------------- the default validator


def coordinator_validator(schemas: SchemaSet | None = None, ready_max_lag: int = 1000) -> Validator:
    """``coordinator.admin`` behind the controller's validator interface; ``ready_max_lag`` is
    the lag a describe still calls ready for a failover (``metrics.failover.ready.max.lag``)."""
    s = schemas or default_schemas()

    def validate(req: AdminRequest, image: MetadataImage, statuses: Mapping[StateKey, PartitionStatus]):  # noqa: ANN202
        b: Any = req.body
        states = {k: v.state for k, v in statuses.items()}
        who = req.principal
        svo = getattr(b, "state_validation_offset", -1)
        api = req.api
        if api == "CreateClusterMirror":
            config = {c.name: c.value for c in b.config}
            r = admin.create_cluster_mirror(image, b.mirror_name, config, principal=who, schemas=s)
            return r.records, topic_response(s, api, r.response, secret_values(config))
        if api == "DeleteClusterMirror":
            r = admin.delete_cluster_mirror(image, b.mirror_name, states=states, state_validation_offset=svo, principal=who, schemas=s)
        elif api == "StartMirrorTopics":
            r = admin.start_mirror_topics(image, b.mirror_name, names(b), include_patterns=b.include_patterns,
                                          exclude_patterns=b.exclude_patterns, states=states,
                                          state_validation_offset=svo, principal=who, schemas=s)  # fmt: skip
        elif api == "StopMirrorTopics":
            r = admin.stop_mirror_topics(image, b.mirror_name, names(b), patterns=b.patterns, states=states,
                                         state_validation_offset=svo, principal=who, schemas=s)  # fmt: skip
        elif api == "PauseMirrorTopics":
            r = admin.pause_mirror_topics(image, b.mirror_name, names(b), states=states, state_validation_offset=svo, principal=who, schemas=s)
        elif api == "ResumeMirrorTopics":
            r = admin.resume_mirror_topics(image, b.mirror_name, names(b), states=states, state_validation_offset=svo, principal=who, schemas=s)
        elif api == "AlterClusterMirrorConfigs":
            changes = [(c.name, admin.ConfigOp(c.config_operation) if c.config_operation in (0, 1) else c.config_operation,
                        c.value) for c in b.configs]  # fmt: skip
            r = admin.alter_cluster_mirror_configs(image, b.mirror_name, changes, validate_only=b.validate_only,
                                                   principal=who, schemas=s)  # fmt: skip
            return r.records, alter_configs_response(s, r.response, secret_values({c.name: c.value for c in b.configs}))
        elif api == "DescribeClusterMirrorConfigs":
            code, message, configs = admin.describe_cluster_mirror_configs(image, b.mirror_name, principal=who)
            ccls = s.nested(f"{api}Response", "DescribeConfigsResourceResult")
            return (), s.struct(f"{api}Response")(throttle_time_ms=0, error_code=int(code), error_message=message,
                                                  configs=[ccls(name=c.name, value=c.value, is_sensitive=c.sensitive)
                                                           for c in configs])  # fmt: skip
        elif api == "ListClusterMirrors":
            return (), list_response(s, admin.list_cluster_mirrors(image, b.include_topic_names, principal=who,
                                                                   source_cluster_ids=req.source_cluster_ids))  # fmt: skip
        elif api == "DescribeClusterMirrors":
            counts_only = getattr(b, "state_counts_only", False)
            tally = req.tally if counts_only else None
            described = admin.describe_cluster_mirrors(image, list(b.mirror_names or ()), states=states, principal=who,
                                                       tally=tally)  # fmt: skip
            return (), describe_response(s, described, statuses, ready_max_lag, req.syncs, counts_only=counts_only)
        else:
            return (), error_response(s, api, ErrorCode.INVALID_REQUEST, f"unsupported API {api}")
        return r.records, topic_response(s, api, r.response, ())

    return validate


# ---------------------------------------------------------------- states from __mirror_state


# ------------------------------------------------------------------------------ controller


class ClusterMirrorController:
    def __init__(self, config: WorkerConfig, *, validator: Validator | None = None, status: StatusSource | None = None,
                 super_users: frozenset[str] = frozenset(), snapshot_policy: SnapshotPolicy | None = None,
                 schemas: SchemaSet | None = None) -> None:  # fmt: skip
        self.config = config
        self.schemas = schemas or default_schemas()
        self.validator = validator or coordinator_validator(self.schemas, config.failover_ready_max_lag)
        self.status = status or MirrorStateChangelogView(
            config.bootstrap_servers, config.mirror_state_topic_name, config.state_partitions)
        self.sync_view = SyncStatusView(config.bootstrap_servers, config.sync_status_topic_name)
        self.stop_reports = StopReportsView(config.bootstrap_servers, config.stop_reports_topic_name, config.state_partitions)
        self.progress = ProgressCounts(self.status, self.stop_reports, config.state_partitions)
        # The workers' group: dead members a broker does not expire are removed (see its module).
        self.members = DeadMemberRemover(config, self.sync_view)
        self.super_users = super_users
        # The admin listener's TLS, checked before anything starts: a bad key store or a
        # non-loopback bind without TLS stops the controller here, with the reason.
        self.listener_ssl = tls.server_context(tls.admin_listener_ssl(config.extra))
        tls.check_bind(config.controller_address[0], self.listener_ssl is not None)
        topic = config.metadata_topic_name
        self.writer = MetadataLogWriter(config.bootstrap_servers, topic)
        self.dlq = DeadLetterQueue(config.bootstrap_servers, topic)
        self.reader = MetadataLogReader(config.bootstrap_servers, topic, dlq=self.dlq, client_id="kip1279-controller")
        self.replayer = Replayer(schemas=self.schemas)
        policy = snapshot_policy or SnapshotPolicy(config.snapshot_max_records, config.snapshot_max_interval_ms)
        self.loader = MetadataLogLoader(
            self.reader, SnapshotStore(config.snapshot_dir / "controller"), policy=policy,
            replay=self._replay,
            to_records=lambda: None if self.replayer.in_transaction else self.image.to_records(self.schemas),
            on_poison=self._on_poison, busy=self._serving,
        )  # fmt: skip
        self._last_request = -BUSY_AFTER_REQUEST_S  # monotonic time of the last admin request
        self._applied = asyncio.Condition()
        self._lock = asyncio.Lock()  # one command at a time
        self._follow: asyncio.Task[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._members: asyncio.Task[None] | None = None
        self._server: asyncio.base_events.Server | None = None
        self.address: tuple[str, int] | None = None
        self._image: MetadataImage | None = None
        self._image_stale = True
        # The cluster ID each mirror's source last answered (kept by whoever talks to the sources:
        # the topic registration of ``streams.worker.main``); --list shows it.
        self.source_cluster_ids: dict[str, str] = {}
        # Told of the records each request appended (``streams.worker.metrics`` times stop requests).
        self.on_command: Callable[[str, Sequence[ApiMessageAndVersion]], None] = lambda api, records: None
        # The mirror's (source, destination) ports for PreviewMirrorTopics; None: no preview here.
        self.preview_ports: PreviewPorts | None = None

    def _replay(self, offset: int, epoch: int, record: ApiMessageAndVersion) -> None:
        problem = self.replayer.replay(record, offset, epoch)
        if problem is not None:
            log.error("metadata record at offset %d not applied: %s", offset, problem.message)
        self._image_stale = True

    def _on_poison(self, entry: Any) -> None:
        self.replayer.delta.report(entry.offset, entry.leader_epoch, ProblemKind.UNDECODABLE, entry.record.error)
        self._image_stale = True

    @property
    def image(self) -> MetadataImage:
        """The committed image; rebuilt only when records were applied since the last call."""
        if self._image is None or self._image_stale:
            _, self._image = self.replayer.publish()  # start a fresh delta: unchanged parts stay shared
            self._image_stale = False
        return self._image

    @property
    def metadata_offset(self) -> int:
        return self.image.offset

    async def start(self, listen: bool = True) -> None:
        c = self.config
        await ensure_topics(c.bootstrap_servers, [metadata_topic_spec(c.metadata_topic_name, c.replication_factor),
                                                  dlq_topic_spec(c.metadata_topic_name, c.replication_factor),
                                                  mirror_state_topic_spec(c), sync_status_topic_spec(c),
                                                  stop_reports_topic_spec(c)])  # fmt: skip
        await self.writer.start()
        await self.dlq.start()
        await self.reader.start()
        await self.status.start()
        await self.sync_view.start()
        await self.loader.catch_up()
        self._follow = asyncio.create_task(self._run_follow(), name="kip1279-controller-follow")
        self._timer = asyncio.create_task(self._snapshot_timer(), name="kip1279-controller-snapshots")
        self._members = asyncio.create_task(self.members.run(), name="kip1279-controller-members")
        if listen:
            host, port = c.controller_address
            self._server = await asyncio.start_server(self._serve, host, port, ssl=self.listener_ssl)
            sock = self._server.sockets[0].getsockname()
            self.address = (sock[0], sock[1])
            if self.listener_ssl is not None:
                log.info("controller for %s listening on %s:%d (SSL, client certificates required: the "
                         "principal is the certificate's subject)", c.metadata_topic_name, *self.address)  # fmt: skip
            else:
                log.warning("controller for %s listening on %s:%d (PLAINTEXT, local mode: loopback only, the "
                            "principal is the one the client claims; set admin.listener.ssl.* for TLS)",
                            c.metadata_topic_name, *self.address)  # fmt: skip

    def _serving(self) -> bool:
        """Served an admin request in the last ``BUSY_AFTER_REQUEST_S``: a snapshot due waits
        (``MetadataLogLoader.busy``), as a stop and its --wait polls come one after the other."""
        return time.monotonic() - self._last_request < BUSY_AFTER_REQUEST_S

    @property
    def following(self) -> bool:
        """False once the metadata log follower has stopped (appends then time out)."""
        return self._follow is None or not self._follow.done()

    async def _run_follow(self) -> None:
        try:
            async for entry in self.reader.read(self.loader.next_offset, follow=True):
                self.loader.apply(entry)
                async with self._applied:
                    self._applied.notify_all()
                await self.loader.maybe_snapshot()
        except asyncio.CancelledError:
            raise
        except Exception:
            # Appends now time out and answer an error instead of hanging; the log says why.
            log.exception("the controller stopped following %s", self.config.metadata_topic_name)
            raise

    async def _snapshot_timer(self) -> None:
        # A quiet log still gets its time-based snapshot (records alone only trigger the count),
        # and one deferred while requests came (``_serving``) is written once they stop.
        period = max(1.0, min(self.loader.policy.max_interval_ms / 1000, BUSY_AFTER_REQUEST_S))
        while True:
            await asyncio.sleep(period)
            try:
                await self.loader.maybe_snapshot()
            except Exception as e:  # noqa: BLE001 - a failed snapshot only lengthens the next replay
                log.error("metadata snapshot failed: %s", e)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for task in (self._follow, self._timer, self._members):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._follow = self._timer = self._members = None
        for part in (self.status, self.sync_view, self.stop_reports, self.reader, self.dlq, self.writer):
            with contextlib.suppress(Exception):
                await part.stop()

    async def append(self, records: Sequence[ApiMessageAndVersion], timeout: float = 30.0) -> list[int]:
        """Appends records and returns once the image includes them (read-your-writes)."""
        offsets = await self.writer.append(records)
        if offsets:
            last = offsets[-1]
            async with self._applied:
                await asyncio.wait_for(self._applied.wait_for(lambda: self.loader.next_offset > last), timeout)
        return offsets

    async def discover(self, mirror_name: str, source_topics: Mapping[str, uuid.UUID]) -> tuple[str, ...]:
        """Starts the source topics a started pattern of the mirror selects and no mirror holds
        (``admin.discover_mirror_topics``), in turn with the admin commands. Returns their names."""
        async with self._lock:
            found = admin.discover_mirror_topics(self.image, mirror_name, source_topics, schemas=self.schemas)
            if not found.records:
                return ()
            # Partition states only now: a start must not race a stop still under way.
            statuses = await self.status.statuses(offsets=False)
            found = admin.discover_mirror_topics(self.image, mirror_name, source_topics, schemas=self.schemas,
                                                 states={k: v.state for k, v in statuses.items()})  # fmt: skip
            if found.records:
                await self.append(list(found.records))
        names = tuple(t.name for t in found.response.topics)
        if names:
            log.info("mirror %s: discovered and started %d topic(s): %s", mirror_name, len(names), ", ".join(names))
        return names

    async def create_acls(self, principal: str, operations: Sequence[AclOperation], mirror: str = "*",
                          pattern: PatternType = PatternType.LITERAL, deny: bool = False, host: str = "*") -> list[int]:  # fmt: skip
        """Bootstrap ClusterMirror ACLs (there is no CreateAcls RPC in this project yet)."""
        cls = self.schemas.struct("AccessControlEntryRecord")
        key = self.schemas.spec("AccessControlEntryRecord").api_key
        perm = AclPermissionType.DENY if deny else AclPermissionType.ALLOW
        records = [ApiMessageAndVersion(cls(id=uuid.uuid4(), resource_type=int(AclResourceType.CLUSTER_MIRROR),
                                            resource_name=mirror, pattern_type=int(pattern), principal=principal,
                                            host=host, operation=int(op), permission_type=int(perm)), 0, key)
                   for op in operations]  # type: ignore[arg-type]  # fmt: skip
        return await self.append(records)

    async def handle(self, header: RequestHeader, body: msgspec.Struct, peer_host: str = "127.0.0.1", *,
                     authenticated: str | None = None) -> tuple[msgspec.Struct, int]:  # fmt: skip
        """Validates, appends, answers. Returns the response and the metadata offset it reflects.

        ``authenticated``: the principal of the connection's client certificate; with it, the
        principal the request claims is ignored."""
        api = API_NAMES[header.api_key]
        self._last_request = time.monotonic()
        who = admin.Principal(authenticated or header.principal or ANONYMOUS, peer_host, self.super_users)
        req = AdminRequest(header, api, body, who)
        if api == "ListClusterMirrors":
            req = req._replace(source_cluster_ids=dict(self.source_cluster_ids))
        if api == "PreviewMirrorTopics":  # reads only: nothing to append, no need for the lock
            statuses = await self.status.statuses(offsets=False, mirrors={body.mirror_name})  # type: ignore[attr-defined]
            states = {k: v.state for k, v in statuses.items()}
            return await serve_preview(self.image, body, who, states, self.preview_ports, self.schemas), self.metadata_offset
        describe = api == "DescribeClusterMirrors"
        async with self._lock:
            # Only describe shows offsets; the commands validate against states alone.
            mirrors = (set(getattr(body, "mirror_names", None) or ()) or None) if describe else None
            counts_only = describe and getattr(body, "state_counts_only", False)
            with_offsets = describe and getattr(body, "include_offsets", True) and not counts_only
            state_counts = getattr(self.status, "state_counts", None) if counts_only else None
            if state_counts is not None:
                # A progress poll: counts kept as the changelog is read, no walk over every state.
                statuses = {}
                req = req._replace(tally=await self.progress.counts(self.image, mirrors))
            elif with_offsets:
                max_age = max(0, getattr(body, "offsets_max_age_ms", 0)) / 1000
                statuses = await self.status.statuses(offsets=True, mirrors=mirrors, max_age=max_age)
            else:
                statuses = await self.status.statuses(offsets=False, mirrors=mirrors)
            image = self.image  # built on the loop; once built it is immutable
            if describe:
                req = req._replace(syncs=await self.sync_view.reports())
                # A describe of 50k partitions is ~0.2 s of CPU; on a thread the loop keeps serving.
                # The response codec is made here first: made on two threads at once, it could
                # differ from the one encode_response looks up.
                self.schemas.codec(f"{api}Response")
                if req.tally is not None:  # a few counts per topic: on the loop, where the tally changes
                    records, response = self.validator(req, image, statuses)
                else:
                    records, response = await asyncio.to_thread(self.validator, req, image, statuses)
            else:
                prediction, cuts = None, None
                states = {k: v.state for k, v in statuses.items()} if api == "StopMirrorTopics" else {}
                if api == "StopMirrorTopics" and getattr(body, "consistent_cut", False):  # planned, or refused
                    planned = await plan_stop_cut(image, body, who, states, self.preview_ports, self.schemas)
                    if isinstance(planned, Refused):
                        return error_response(self.schemas, api, planned.code, planned.message), self.metadata_offset
                    cuts, prediction = planned
                elif api == "StopMirrorTopics":  # the stop's impact, predicted as at the cut (issue #26)
                    prediction = await predict_stop(image, body, who, states, self.preview_ports, self.schemas)
                records, response = self.validator(req, image, statuses)
                if cuts is not None:
                    records = attach_cuts(records, cuts, self.schemas)
                if prediction is not None and records:  # it travels with the stop, in the same append
                    records = with_impact_record(self.schemas, body.mirror_name, prediction, records)  # type: ignore[attr-defined]
            secrets = secret_values({c.name: c.value for c in getattr(body, "config", None) or getattr(body, "configs", [])})
            code = getattr(response, "error_code", 0)
            log.info("%s %s by %s from %s: error %d, %d record(s)%s", api, getattr(body, "mirror_name", ""),
                     who.name, peer_host, code, len(records), describe_config(body))  # fmt: skip
            if records:
                try:
                    await self.append(list(records))
                except Exception as e:  # noqa: BLE001 - the client gets an error, the controller stays up
                    log.error("%s: append to the metadata log failed: %s", api, scrub(str(e), secrets))
                    return error_response(self.schemas, api, ErrorCode.UNKNOWN_SERVER_ERROR, "metadata log append failed"), self.metadata_offset
                self.on_command(api, records)
            return response, self.metadata_offset

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        authenticated = None
        try:
            ssl_object = writer.get_extra_info("ssl_object")
            if ssl_object is not None:  # the handshake required a certificate our trust store vouches for
                authenticated = tls.principal_of(ssl_object.getpeercert(binary_form=True))
                log.debug("admin connection from %s authenticated as %s", peer[0], authenticated)
            while True:
                frame = await read_frame(reader)
                if frame is None:
                    break
                header, pos = decode_request_header(frame)
                api = API_NAMES.get(header.api_key)
                if api is None or header.api_version != 0:
                    log.warning("unsupported api key %d v%d from %s; closing", header.api_key, header.api_version, peer[0])
                    break
                try:
                    body = self.schemas.decode(f"{api}Request", frame[pos:], header.api_version)
                except Exception as e:  # noqa: BLE001 - a malformed request gets INVALID_REQUEST
                    response, offset = error_response(self.schemas, api, ErrorCode.INVALID_REQUEST, f"malformed {api} request: {e}"), self.metadata_offset
                else:
                    try:
                        response, offset = await self.handle(header, body, peer[0], authenticated=authenticated)
                    except Exception:  # noqa: BLE001 - a validator bug answers an error, never kills the controller
                        log.exception("%s failed", api)
                        response = error_response(self.schemas, api, ErrorCode.UNKNOWN_SERVER_ERROR, f"{api} failed on the controller")
                        offset = self.metadata_offset
                args = (header.correlation_id, offset, response, header.api_version, self.schemas)
                if api == "DescribeClusterMirrors":  # megabytes at 50k partitions: encoded off the loop
                    writer.write(await asyncio.to_thread(encode_response, *args))
                else:
                    writer.write(encode_response(*args))
                await writer.drain()
        except (ProtocolError, asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, ValueError) as e:
            log.warning("admin connection from %s dropped: %s", peer[0], e)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def run_controller(config: WorkerConfig, super_users: frozenset[str] = frozenset()) -> None:
    """Run a controller until cancelled (``kafka-cluster-mirrors --run-controller``)."""
    controller = ClusterMirrorController(config, super_users=super_users)
    await controller.start()
    try:
        await asyncio.Event().wait()
    finally:
        await controller.stop()
