"""The cluster mirror admin client (Python API) and the controller's wire protocol.

Requests are the KIP-1279 RPCs encoded with the project's schemas, in an envelope shaped like
Kafka's request header v2, each frame preceded by its int32 size::

    request  = api_key int16 | api_version int16 | correlation_id int32 | client_id string (int16 length)
               | tagged fields (tag 0: principal, UTF-8; tag 1: request ID, 16 bytes) | request body
    response = correlation_id int32 | tagged fields (tag 0: metadata offset, int64; tag 1: the active
               controller's HOST:PORT, with NOT_CONTROLLER) | response body

The response's metadata offset is the offset of the controller's image when it answered; a
client passes it back as StateValidationOffset so that a request raced by another one is
refused (INVALID_CLUSTER_MIRROR_STATES) rather than applied to a state it did not see.

The transport is TLS with client certificates (``ssl``, see ``streams.tls``): the
controller takes the principal from the certificate and ignores a claimed one. Without TLS
(local mode, loopback only) the principal is whatever the client says it is
(``--command-config`` / ``KIP1279_PRINCIPAL``), so ACLs there guard against mistakes, not attackers.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import ssl
import struct
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import msgspec

from records.redact import REDACTED, is_sensitive
from records.registry import SchemaSet, default_schemas
from records.varint import read_uvarint, uvarint_bytes

API_KEYS: dict[str, int] = {
    "CreateClusterMirror": 94,
    "StartMirrorTopics": 95,
    "StopMirrorTopics": 96,
    "ListClusterMirrors": 98,
    "DescribeClusterMirrors": 99,
    "PauseMirrorTopics": 102,
    "ResumeMirrorTopics": 103,
    "DeleteClusterMirror": 104,
    # Ours (after Kafka's IncrementalAlterConfigs and DescribeConfigs): the KIP alters a mirror's
    # configs through kafka-configs --entity-type cluster-mirrors.
    "AlterClusterMirrorConfigs": 106,
    "DescribeClusterMirrorConfigs": 107,
    # Ours (issue #26): --stop/--start --dry-run, the impact preview.
    "PreviewMirrorTopics": 108,
}
API_NAMES = {v: k for k, v in API_KEYS.items()}
MAX_FRAME = 64 * 1024 * 1024
# The requests that change state: served by the active controller alone, once per request ID.
STATE_CHANGING = frozenset({"CreateClusterMirror", "DeleteClusterMirror", "StartMirrorTopics", "StopMirrorTopics",
                            "PauseMirrorTopics", "ResumeMirrorTopics", "AlterClusterMirrorConfigs"})  # fmt: skip
NOT_CONTROLLER = 41  # Kafka's NOT_CONTROLLER: sent to a standby, or to a controller fenced by a newer one
# A request whose connection broke, or that a standby refused, is tried again for this long (as a
# Kafka admin client retries within default.api.timeout.ms): a standby takes over within ~3 s, a
# restarted controller serves within ~5 s.
DEFAULT_RETRY_TIMEOUT_S = 15.0
RETRY_BACKOFF_S, RETRY_BACKOFF_MAX_S = 0.05, 0.5
_HEADER = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_PRINCIPAL_TAG = 0
_REQUEST_ID_TAG = 1
_OFFSET_TAG = 0
_ACTIVE_TAG = 1
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class ProtocolError(ValueError):
    pass


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    principal: str | None
    request_id: uuid.UUID | None = None  # state-changing requests: the same on every retry


class ResponseHeader(NamedTuple):
    correlation_id: int
    metadata_offset: int
    active_controller: str | None = None  # HOST:PORT, sent with NOT_CONTROLLER


def _tagged(fields: Mapping[int, bytes]) -> bytes:
    out = bytearray(uvarint_bytes(len(fields)))
    for tag in sorted(fields):
        out += uvarint_bytes(tag) + uvarint_bytes(len(fields[tag])) + fields[tag]
    return bytes(out)


def _read_tagged(data: bytes, pos: int) -> tuple[dict[int, bytes], int]:
    count, pos = read_uvarint(data, pos)
    fields: dict[int, bytes] = {}
    for _ in range(count):
        tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        if pos + size > len(data):
            raise ProtocolError(f"tagged field {tag} overruns the header at byte {pos}")
        fields[tag] = data[pos : pos + size]
        pos += size
    return fields, pos


def encode_request(header: RequestHeader, body: msgspec.Struct, schemas: SchemaSet | None = None) -> bytes:
    schemas = schemas or default_schemas()
    client = (header.client_id or "").encode()
    tagged = {_PRINCIPAL_TAG: header.principal.encode()} if header.principal else {}
    if header.request_id is not None:
        tagged[_REQUEST_ID_TAG] = header.request_id.bytes
    frame = (
        _HEADER.pack(header.api_key, header.api_version, header.correlation_id)
        + _INT16.pack(len(client)) + client
        + _tagged(tagged)
        + schemas.encode(body, header.api_version)
    )  # fmt: skip
    return _INT32.pack(len(frame)) + frame


def decode_request_header(frame: bytes) -> tuple[RequestHeader, int]:
    """The header and where the body starts; raises ProtocolError on a malformed header."""
    try:
        api_key, version, cid = _HEADER.unpack_from(frame)
        (n,) = _INT16.unpack_from(frame, 8)
        pos = 10
        client = None if n < 0 else frame[pos : pos + n].decode()
        pos += max(n, 0)
        tagged, pos = _read_tagged(frame, pos)
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"malformed request header: {e}") from None
    principal = tagged[_PRINCIPAL_TAG].decode("utf-8", "replace") if _PRINCIPAL_TAG in tagged else None
    rid = tagged.get(_REQUEST_ID_TAG)
    if rid is not None and len(rid) != 16:
        raise ProtocolError(f"request ID of {len(rid)} bytes, not 16")
    return RequestHeader(api_key, version, cid, client, principal, uuid.UUID(bytes=rid) if rid else None), pos


def encode_response(correlation_id: int, metadata_offset: int, body: msgspec.Struct | bytes, version: int,
                    schemas: SchemaSet | None = None, active_controller: str | None = None) -> bytes:  # fmt: skip
    """``body``: a response, or one already encoded (a retried request's first answer)."""
    schemas = schemas or default_schemas()
    tagged = {_OFFSET_TAG: _INT64.pack(metadata_offset)}
    if active_controller:
        tagged[_ACTIVE_TAG] = active_controller.encode()
    encoded = body if isinstance(body, bytes) else schemas.encode(body, version)
    frame = _INT32.pack(correlation_id) + _tagged(tagged) + encoded
    return _INT32.pack(len(frame)) + frame


def decode_response(frame: bytes, response_name: str, version: int,
                    schemas: SchemaSet | None = None) -> tuple[ResponseHeader, msgspec.Struct]:  # fmt: skip
    schemas = schemas or default_schemas()
    try:
        (cid,) = _INT32.unpack_from(frame)
        tagged, pos = _read_tagged(frame, 4)
    except (struct.error, ValueError) as e:
        raise ProtocolError(f"malformed response header: {e}") from None
    offset = _INT64.unpack(tagged[_OFFSET_TAG])[0] if _OFFSET_TAG in tagged else -1
    active = tagged[_ACTIVE_TAG].decode("utf-8", "replace") if _ACTIVE_TAG in tagged else None
    return ResponseHeader(cid, int(offset), active), schemas.decode(response_name, frame[pos:], version)


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """One size-prefixed frame, or None at a clean end of stream."""
    try:
        size_bytes = await reader.readexactly(4)
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise ProtocolError("connection closed inside a frame size") from None
    (size,) = _INT32.unpack(size_bytes)
    if size < 0 or size > MAX_FRAME:
        raise ProtocolError(f"frame size {size} is out of range")
    return await reader.readexactly(size)


# ------------------------------------------------------------------------------ redaction


def secret_values(config: Mapping[str, str | None]) -> list[str]:
    return [v for k, v in config.items() if v and is_sensitive(k)]


def scrub(text: str | None, secrets: Sequence[str]) -> str | None:
    """Removes secret values from free text (an error message may quote the config)."""
    if text is None:
        return None
    for s in sorted(secrets, key=len, reverse=True):
        text = text.replace(s, REDACTED)
    return text


# ------------------------------------------------------------------------------------ the client


class AdminError(Exception):
    """A request-level refusal or a transport failure."""

    def __init__(self, error_code: int, message: str | None) -> None:
        super().__init__(f"[{error_code}] {message}" if message else f"error code {error_code}")
        self.error_code = error_code
        self.message = message


class _Transport(AdminError):
    """The connection failed or broke: the request may be tried again (elsewhere)."""

    def __init__(self, message: str) -> None:
        super().__init__(-1, message)


class Reply(NamedTuple):
    """A decoded response and the controller's metadata offset when it answered."""

    response: msgspec.Struct
    metadata_offset: int
    active_controller: str | None = None  # with NOT_CONTROLLER: where the active one is


def _endpoint(text: str | None) -> tuple[str, int] | None:
    host, _, port = (text or "").rpartition(":")
    return (host, int(port)) if host and port.isdigit() else None


def _ssl_reason(e: ssl.SSLError) -> str:
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"the controller's certificate: {e.verify_message}"
    return str(e.reason or e).replace("_", " ").lower()


def looks_like_topic_list(value: str) -> bool:
    """``a,b,c`` of legal topic names is a list; anything else (``.*``, ``orders-\\d+``) is a regex."""
    items = [v.strip() for v in value.split(",")]
    return all(_TOPIC_NAME.match(v) for v in items) and bool(items)


class ClusterMirrorAdmin:
    """Python API of ``kafka-cluster-mirrors``: one connection to the controller."""

    def __init__(self, bootstrap: str, *, principal: str | None = None, client_id: str = "kafka-cluster-mirrors",
                 timeout: float = 30.0, schemas: SchemaSet | None = None,
                 ssl_context: ssl.SSLContext | None = None, retry_timeout: float = DEFAULT_RETRY_TIMEOUT_S) -> None:  # fmt: skip
        """``bootstrap``: the controllers' endpoints, ``HOST:PORT[,HOST:PORT...]``. A request is
        retried, on each of them in turn and where a NOT_CONTROLLER answer points, until
        ``retry_timeout`` seconds have passed (0: tried once)."""
        self.endpoints: list[tuple[str, int]] = []
        for item in bootstrap.split(","):
            host, _, port = item.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"--bootstrap-server {bootstrap!r} is not HOST:PORT[,HOST:PORT...]")
            self.endpoints.append((host, int(port)))
        self.host, self.port = self.endpoints[0]
        self.principal = principal
        self.ssl_context = ssl_context
        self.client_id = client_id
        self.timeout = timeout
        self.retry_timeout = retry_timeout
        self.schemas = schemas or default_schemas()
        self._ids = itertools.count(1)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._answered = False  # on this connection
        self.retries = 0  # attempts after the first, over this client's life
        self.last_request_id: uuid.UUID | None = None

    async def __aenter__(self) -> ClusterMirrorAdmin:
        await self._retrying(self.connect)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        self._answered = False
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self.ssl_context), self.timeout
            )
        except ssl.SSLError as e:
            raise AdminError(-1, f"SSL handshake with the controller at {self.host}:{self.port} failed: {_ssl_reason(e)}") from None
        except (TimeoutError, OSError) as e:
            raise _Transport(f"cannot reach the controller at {self.host}:{self.port}: {e}") from None

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass

    def _move_to(self, endpoint: tuple[str, int] | None) -> None:
        """The next endpoint: the one named (added when new), else the next of the list."""
        if endpoint is None:
            i = self.endpoints.index((self.host, self.port)) if (self.host, self.port) in self.endpoints else -1
            endpoint = self.endpoints[(i + 1) % len(self.endpoints)]
        elif endpoint not in self.endpoints:
            self.endpoints.append(endpoint)
        self.host, self.port = endpoint

    async def _retrying(self, attempt: Any) -> Any:
        """``attempt()`` until it answers something else than a broken connection or
        NOT_CONTROLLER, or ``retry_timeout`` has passed (then its last error)."""
        deadline = time.monotonic() + self.retry_timeout
        backoff = RETRY_BACKOFF_S
        while True:
            try:
                reply = await attempt()
            except _Transport as e:
                error: AdminError = e
                await self.close()
                self._move_to(None)
            else:
                if reply is None or getattr(reply.response, "error_code", 0) != NOT_CONTROLLER:
                    return reply
                error = AdminError(NOT_CONTROLLER, getattr(reply.response, "error_message", None))
                await self.close()
                active = _endpoint(reply.active_controller)
                moved = active is not None and active != (self.host, self.port)
                self._move_to(active)
                if moved:  # straight to the active controller, no backoff
                    self.retries += 1
                    continue
            if time.monotonic() + backoff > deadline:
                raise error
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
            self.retries += 1

    async def call(self, api: str, body: msgspec.Struct, version: int = 0, request_id: uuid.UUID | None = None) -> Reply:
        """One request, retried (see ``__init__``). A state-changing one carries a request ID,
        the same on every retry, so the controllers apply it once and answer a retry with the
        first answer (``request_id``: one given; else a new one)."""
        if api in STATE_CHANGING:
            request_id = request_id or uuid.uuid4()
            self.last_request_id = request_id
        try:
            return await self._retrying(lambda: self._call_once(api, body, version, request_id))
        except _Transport as e:
            if request_id is None:
                raise
            # Said plainly: no controller answered, so whether it was applied is not known here.
            raise AdminError(-1, f"{e.message}; no controller answered {api} request {request_id} within "
                                 f"{self.retry_timeout:.0f} s, so whether it was applied is unknown: "
                                 f"--describe shows the mirror's states") from None  # fmt: skip

    async def _call_once(self, api: str, body: msgspec.Struct, version: int, request_id: uuid.UUID | None) -> Reply:
        if self._writer is None or self._reader is None:
            await self.connect()
        assert self._writer is not None and self._reader is not None
        cid = next(self._ids)
        header = RequestHeader(API_KEYS[api], version, cid, self.client_id, self.principal, request_id)
        async with self._lock:
            try:
                self._writer.write(encode_request(header, body, self.schemas))
                await self._writer.drain()
                frame = await asyncio.wait_for(read_frame(self._reader), self.timeout)
            except ssl.SSLError as e:
                # TLS 1.3: the server refuses our certificate after our side of the handshake ended.
                raise AdminError(-1, f"SSL handshake failed: the controller refused this client: {_ssl_reason(e)}") from None
            except (ConnectionError, asyncio.IncompleteReadError) as e:
                raise self._closed(f": {e}") from None
            except TimeoutError:
                raise _Transport(f"no answer from the controller at {self.host}:{self.port} in {self.timeout:.0f} s") from None
        if frame is None:
            raise self._closed("")
        self._answered = True
        rh, response = decode_response(frame, f"{api}Response", version, self.schemas)
        if rh.correlation_id != cid:
            raise AdminError(-1, f"correlation id {rh.correlation_id} does not match the request's {cid}")
        return Reply(response, rh.metadata_offset, rh.active_controller)

    def _closed(self, why: str) -> AdminError:
        if self.ssl_context is not None and not self._answered:
            # TLS 1.3 ends the client's handshake before the server checks the client's
            # certificate: a refused one shows as a close before the first answer.
            return AdminError(-1, "SSL handshake failed: the controller closed the connection before answering "
                                  "(it takes only client certificates its trust store vouches for)")  # fmt: skip
        return _Transport(f"the controller at {self.host}:{self.port} closed the connection{why}")

    def _req(self, name: str, **fields: Any) -> msgspec.Struct:
        return self.schemas.struct(f"{name}Request")(**fields)

    def _topics(self, name: str, topics: Sequence[str]) -> list[msgspec.Struct]:
        cls = self.schemas.nested(f"{name}Request", "TopicMetadata")
        if name == "StartMirrorTopics":
            return [cls(topic_id=uuid.UUID(int=0), topic_name=t, num_partitions=-1) for t in topics]
        return [cls(topic_name=t) for t in topics]

    # -- the operations ------------------------------------------------------------------------

    async def create(self, mirror: str, config: Mapping[str, str]) -> Reply:
        cls = self.schemas.nested("CreateClusterMirrorRequest", "ClusterMirrorConfig")
        entries = [cls(name=k, value=v) for k, v in sorted(config.items())]
        return await self.call("CreateClusterMirror", self._req("CreateClusterMirror", mirror_name=mirror, config=entries))

    async def start(self, mirror: str, topics: Sequence[str] = (), *, include: Sequence[str] = (),
                    exclude: Sequence[str] = (), state_validation_offset: int = -1) -> Reply:  # fmt: skip
        body = self._req("StartMirrorTopics", mirror_name=mirror, topics=self._topics("StartMirrorTopics", topics),
                         include_patterns=list(include), exclude_patterns=list(exclude),
                         state_validation_offset=state_validation_offset)  # fmt: skip
        return await self.call("StartMirrorTopics", body)

    async def stop(self, mirror: str, topics: Sequence[str] = (), *, patterns: Sequence[str] = (),
                   state_validation_offset: int = -1, consistent_cut: bool = False) -> Reply:  # fmt: skip
        body = self._req("StopMirrorTopics", mirror_name=mirror, topics=self._topics("StopMirrorTopics", topics),
                         patterns=list(patterns), state_validation_offset=state_validation_offset,
                         consistent_cut=consistent_cut)  # fmt: skip
        return await self.call("StopMirrorTopics", body)

    async def pause(self, mirror: str, topics: Sequence[str], *, state_validation_offset: int = -1) -> Reply:
        body = self._req("PauseMirrorTopics", mirror_name=mirror, topics=self._topics("PauseMirrorTopics", topics),
                         state_validation_offset=state_validation_offset)  # fmt: skip
        return await self.call("PauseMirrorTopics", body)

    async def resume(self, mirror: str, topics: Sequence[str], *, state_validation_offset: int = -1) -> Reply:
        body = self._req("ResumeMirrorTopics", mirror_name=mirror, topics=self._topics("ResumeMirrorTopics", topics),
                         state_validation_offset=state_validation_offset)  # fmt: skip
        return await self.call("ResumeMirrorTopics", body)

    async def list(self, include_topic_names: bool = False) -> Reply:
        return await self.call("ListClusterMirrors", self._req("ListClusterMirrors", include_topic_names=include_topic_names))

    async def describe(self, mirrors: Sequence[str] = (), *, offsets: bool = True, max_age_ms: int = 0,
                       counts_only: bool = False) -> Reply:  # fmt: skip
        """``offsets=False``: states alone (no source HW / destination LEO lookups), for polling.
        ``max_age_ms``: offsets looked up that long before may be reused (0: looked up for this call).
        ``counts_only``: each topic's partition counts per state (``StateCounts``), no details."""
        body = self._req("DescribeClusterMirrors", mirror_names=list(mirrors), include_authorized_operations=False,
                         include_offsets=offsets and not counts_only, offsets_max_age_ms=max_age_ms,
                         state_counts_only=counts_only)  # fmt: skip
        return await self.call("DescribeClusterMirrors", body)

    async def delete(self, mirror: str, *, state_validation_offset: int = -1) -> Reply:
        body = self._req("DeleteClusterMirror", mirror_name=mirror, state_validation_offset=state_validation_offset)
        return await self.call("DeleteClusterMirror", body)

    async def alter_configs(self, mirror: str, set_configs: Mapping[str, str] | None = None,
                            delete_configs: Sequence[str] = (), *, validate_only: bool = False) -> Reply:  # fmt: skip
        """Incremental: SET each of ``set_configs``, DELETE each of ``delete_configs``; all or nothing."""
        cls = self.schemas.nested("AlterClusterMirrorConfigsRequest", "AlterableConfig")
        entries = [cls(name=k, config_operation=0, value=v) for k, v in (set_configs or {}).items()]
        entries += [cls(name=k, config_operation=1, value=None) for k in delete_configs]
        body = self._req("AlterClusterMirrorConfigs", mirror_name=mirror, configs=entries, validate_only=validate_only)
        return await self.call("AlterClusterMirrorConfigs", body)

    async def describe_configs(self, mirror: str) -> Reply:
        """The mirror's configs, secrets redacted by the controller."""
        return await self.call("DescribeClusterMirrorConfigs", self._req("DescribeClusterMirrorConfigs", mirror_name=mirror))

    async def preview(self, mirror: str, topics: Sequence[str] = (), *, patterns: Sequence[str] = (),
                      exclude: Sequence[str] = (), failback: bool = False, consistent_cut: bool = False) -> Reply:  # fmt: skip
        """What a stop (``failback``: a start) of these topics would cost; nothing changes."""
        body = self._req("PreviewMirrorTopics", mirror_name=mirror, topics=list(topics), patterns=list(patterns),
                         exclude_patterns=list(exclude), failback=failback, consistent_cut=consistent_cut)  # fmt: skip
        return await self.call("PreviewMirrorTopics", body)

    async def mirror_topics(self, mirror: str) -> list[str]:
        """The topic names of one mirror (to expand a regex client-side for pause/resume)."""
        reply = await self.list(include_topic_names=True)
        for m in reply.response.mirrors:  # type: ignore[attr-defined]
            if m.mirror_name == mirror:
                return list(m.topic_names)
        raise AdminError(137, f"Cluster mirror {mirror!r} does not exist")
