"""A TLS listener in front of a real broker that has none (noida-db), for the source port's TLS tests.

It terminates TLS (certificates from a trustme CA; client certificates required when asked),
forwards every Kafka request frame to the broker unchanged, and forwards the answers, except that
Metadata answers name this listener instead of the broker, as a broker's advertised TLS listener
would: the client then reaches the broker through it again. Responses are matched to requests by
correlation id; the Metadata body is rewritten with our schema codec.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
import threading
from typing import Any

import msgspec

from records.kafka_envelope import response_header_size
from records.registry import default_schemas

METADATA = 3


class TlsFront:
    def __init__(self, upstream: tuple[str, int], server_context: ssl.SSLContext) -> None:
        self.upstream, self.context = upstream, server_context
        self.port = 0
        self.handshakes = 0  # TLS sessions that carried at least one request
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="tls-front")
        self._server: Any = None

    def start(self) -> TlsFront:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def shut() -> None:
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        asked: dict[int, tuple[int, int]] = {}
        self.handshakes += 1

        async def requests() -> None:
            while True:
                size = await reader.readexactly(4)
                frame = await reader.readexactly(struct.unpack(">i", size)[0])
                api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
                asked[correlation_id] = (api_key, version)
                up_writer.write(size + frame)
                await up_writer.drain()

        async def responses() -> None:
            while True:
                size = await up_reader.readexactly(4)
                frame = await up_reader.readexactly(struct.unpack(">i", size)[0])
                (correlation_id,) = struct.unpack_from(">i", frame)
                api_key, version = asked.pop(correlation_id, (-1, -1))
                if api_key == METADATA:
                    frame = self._rewrite(frame, version)
                writer.write(struct.pack(">i", len(frame)) + frame)
                await writer.drain()

        try:
            await asyncio.gather(requests(), responses())
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()
            up_writer.close()

    def _rewrite(self, frame: bytes, version: int) -> bytes:
        schemas = default_schemas()
        _, header = response_header_size(frame, METADATA, version)
        body = schemas.decode("MetadataResponse", frame[header:], version)
        brokers = [msgspec.structs.replace(b, host="127.0.0.1", port=self.port) for b in body.brokers]
        return frame[:header] + schemas.encode(msgspec.structs.replace(body, brokers=brokers), version)
