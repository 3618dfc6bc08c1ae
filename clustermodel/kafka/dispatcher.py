"""Routes a request frame to the handler of its API and encodes the answer."""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any, Callable

from records.kafka_envelope import (
    MODEL_LISTENER_VERSIONS,
    ApiTable,
    MalformedRequest,
    Request,
    UnsupportedRequest,
    encode_response,
    error_response,
    parse_request,
    unsupported_response,
)

from . import handlers_admin, handlers_cluster, handlers_fetch, handlers_groups, handlers_produce, handlers_txn

if TYPE_CHECKING:
    from .context import ListenerContext

log = logging.getLogger(__name__)
UNKNOWN_SERVER_ERROR = -1

Handler = Callable[["ListenerContext", int, Request], Any]


def _handlers() -> dict[int, Handler]:
    table: dict[int, Handler] = {}
    for module in (handlers_cluster, handlers_produce, handlers_fetch, handlers_groups, handlers_txn, handlers_admin):
        for key, fn in module.HANDLERS.items():
            if key in table:
                raise ValueError(f"two handlers for API {key}")
            table[key] = fn
    return table


class Dispatcher:
    def __init__(self, versions: dict[int, tuple[int, int]] | None = None) -> None:
        self.handlers = _handlers()
        wanted = versions or MODEL_LISTENER_VERSIONS
        self.table = ApiTable({k: v for k, v in wanted.items() if k in self.handlers})

    async def handle(self, cluster: "ListenerContext", broker: int, frame: bytes) -> bytes | None:
        """The response frame, or None when the request has none (Produce with acks=0)."""
        try:
            req = parse_request(frame, self.table)
        except UnsupportedRequest as exc:
            out = unsupported_response(self.table, exc)
            if out is None:
                raise MalformedRequest(str(exc)) from None
            return out
        try:
            body = self.handlers[req.api_key](cluster, broker, req)
            if inspect.isawaitable(body):
                body = await body
        except MalformedRequest:
            raise
        except Exception as exc:  # noqa: BLE001 - a handler bug answers UNKNOWN_SERVER_ERROR where getErrorResponse puts it
            log.exception("%s broker %d: %s v%d failed", cluster.name, broker, req.name, req.api_version)
            out = error_response(self.table.schemas, req.api_key, req.api_version, req.correlation_id, UNKNOWN_SERVER_ERROR,
                                 req.body)
            if out is None:
                raise MalformedRequest(f"{req.name} failed: {exc!r}") from None
            return out
        if body is None:
            return None
        return encode_response(self.table, req.api_key, req.api_version, req.correlation_id, body)
