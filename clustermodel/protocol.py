"""The local server's wire protocol: length-prefixed msgpack frames over a TCP stream.

Request frame:  [request id, cluster name, method, [positional args...]]
Response frame: [request id, ok, result]   ok=False: result is [error class, message, fields]
A frame is a 4-byte big-endian length and that many bytes. Arguments are decoded and
validated against the ClusterModel method's type hints (a per-method array-like Struct), so a
malformed request gets an InvalidRequest reply instead of reaching the model.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping
from typing import Any

import msgspec

from coordinator.ports import (
    DESTINATION_METHODS,
    PORT_ERRORS,
    InvalidRequest,
    PortError,
)

from .cluster import ClusterModel
from .errors import MODEL_ERRORS

MAX_FRAME_BYTES = 64 * 1024 * 1024
HEADER = 4

# Model control operations reachable over the server, beside the ports.
CONTROL_METHODS: tuple[str, ...] = (
    "now",
    "tp",
    "add_topic",
    "delete_topic",
    "set_topic_config",
    "produce",
    "tick",
    "run_replication",
    "run_retention",
    "delete_records",
    "compact",
    "elect_leader",
    "crash_broker",
    "restart_broker",
    "set_follower_stalled",
    "init_producer_id",
    "begin_transaction",
    "produce_transactional",
    "produce_idempotent",
    "commit_transaction",
    "abort_transaction",
    "open_transactional_ids",
    "join_group",
    "leave_group",
    "commit_offset",
    "add_acl",
    "set_unreachable",
    "set_slow",
    "set_flapping",
    "set_failure_rate",
    "change_leader_on_next_fetch",
    "clear_faults",
    "format_repro",
    "claim_owner_epoch",
    "owner_epoch",
)
METHOD_NAMES: tuple[str, ...] = DESTINATION_METHODS + CONTROL_METHODS


class Request(msgspec.Struct, array_like=True):
    id: int
    cluster: str
    method: str
    args: msgspec.Raw
    # A mutating call's owner fence (coordinator.fencing.OwnerFence: group, epoch), checked by the
    # cluster before the call runs; absent from the frame when the caller is not fenced.
    fence: tuple[str, int] | None = None


class Response(msgspec.Struct, array_like=True):
    id: int
    ok: bool
    result: msgspec.Raw


class ErrorBody(msgspec.Struct, array_like=True):
    kind: str
    message: str
    fields: dict[str, Any] = {}


_REQUIRED = object()  # a parameter without a default


class MethodSpec:
    """How to decode one method's arguments (server) and its result (client)."""

    __slots__ = ("_defaults", "_index", "args_decoder", "arity", "batch_decoder", "name", "result_decoder", "signature")

    def __init__(self, name: str) -> None:
        fn = getattr(ClusterModel, name)
        self.name = name
        self.signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
        fields: list[Any] = []
        for pname, param in list(self.signature.parameters.items())[1:]:
            if param.default is inspect.Parameter.empty:
                fields.append((pname, hints[pname]))
            else:
                fields.append((pname, hints[pname], param.default))
        self.arity = len(fields)
        self._index = {f[0]: i for i, f in enumerate(fields)}
        self._defaults = [f[2] if len(f) == 3 else _REQUIRED for f in fields]
        args_type = msgspec.defstruct(f"{name}_args", fields, array_like=True)
        self.args_decoder = msgspec.msgpack.Decoder(args_type)
        self.batch_decoder = msgspec.msgpack.Decoder(list[args_type])  # a batch's calls in one decode
        self.result_decoder = msgspec.msgpack.Decoder(hints.get("return", Any))

    def positional(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
        """Bind a call's arguments into the positional list the wire carries."""
        if not kwargs and len(args) == self.arity:
            return list(args)  # the common case, without inspect's binding
        index = self._index
        if len(args) <= self.arity and all(k in index and index[k] >= len(args) for k in kwargs):
            out = list(args) + self._defaults[len(args):]  # keyword arguments into their places
            for k, v in kwargs.items():
                out[index[k]] = v
            if _REQUIRED not in out:
                return out
        bound = self.signature.bind(None, *args, **kwargs)
        bound.apply_defaults()
        return list(bound.arguments.values())[1:]


METHODS: dict[str, MethodSpec] = {name: MethodSpec(name) for name in METHOD_NAMES}

encoder = msgspec.msgpack.Encoder()
request_decoder = msgspec.msgpack.Decoder(Request)
response_decoder = msgspec.msgpack.Decoder(Response)
error_decoder = msgspec.msgpack.Decoder(ErrorBody)


class RemoteError(Exception):
    """An unexpected server-side error that is neither a port error nor a model error."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(HEADER, "big") + payload


def encode_frame_into(out: bytearray, message: Any) -> None:
    """Appends ``message`` to ``out`` as one frame, encoded in place: a mirrored batch's payload
    is copied once, not once per layer (encode, frame, pipeline buffer)."""
    start = len(out)
    out += bytes(HEADER)
    encoder.encode_into(message, out, start + HEADER)
    out[start : start + HEADER] = (len(out) - start - HEADER).to_bytes(HEADER, "big")


def encode_request_into(out: bytearray, request_id: int, cluster: str, method: str, args: list[Any],
                        fence: tuple[str, int] | None = None) -> None:  # fmt: skip
    if fence is None:
        encode_frame_into(out, (request_id, cluster, method, args))
    else:
        encode_frame_into(out, (request_id, cluster, method, args, fence))


def encode_request(request_id: int, cluster: str, method: str, args: list[Any],
                   fence: tuple[str, int] | None = None) -> bytearray:  # fmt: skip
    out = bytearray()
    encode_request_into(out, request_id, cluster, method, args, fence)
    return out


def encode_ok(request_id: int, result: Any) -> bytes:
    return frame(encoder.encode((request_id, True, result)))


def encode_error(request_id: int, exc: BaseException) -> bytes:
    return frame(encoder.encode((request_id, False, error_body(exc))))


# A batch: one request carrying many calls of one method on one cluster, as a Kafka request
# carries many partitions. Request args: (method, [positional args of each call]); reply: one
# (ok, result or error body) per call, in order.
BATCH = "batch"
batch_head_decoder = msgspec.msgpack.Decoder(tuple[str, msgspec.Raw])  # the method, then its calls at once
batch_calls_decoder = msgspec.msgpack.Decoder(list[msgspec.Raw])
batch_reply_decoder = msgspec.msgpack.Decoder(list[tuple[bool, msgspec.Raw]])


def error_body(exc: BaseException) -> tuple[str, str, dict[str, Any]]:
    fields = exc.to_fields() if isinstance(exc, PortError) else {}
    body = (type(exc).__name__, str(exc), fields)
    try:
        encoder.encode(fields)
    except (TypeError, msgspec.EncodeError):
        body = (type(exc).__name__, str(exc), {})
    return body


def decode_batch_reply(method: str, raw: msgspec.Raw) -> list[Any]:
    """Each call's result, or its typed exception as a value."""
    decoder = METHODS[method].result_decoder
    return [decoder.decode(r) if ok else decode_error(r) for ok, r in batch_reply_decoder.decode(raw)]


def decode_error(raw: msgspec.Raw) -> Exception:
    """The typed exception for an error reply: port errors and model errors keep their class."""
    body = error_decoder.decode(raw)
    port_cls = PORT_ERRORS.get(body.kind)
    if port_cls is not None:
        try:
            return port_cls.from_fields(body.fields)
        except (TypeError, KeyError, msgspec.ValidationError):
            return InvalidRequest(body.message) if port_cls is InvalidRequest else PortError(body.message)
    model_cls = MODEL_ERRORS.get(body.kind)
    if model_cls is not None:
        return model_cls(body.message)
    if body.kind in ("ValueError", "TypeError"):
        return ValueError(body.message)
    return RemoteError(body.kind, body.message)
