"""Wire probes of a Kafka node's readiness, without a client: a Metadata v1 request that lists the
brokers (Kafka lists only unfenced ones) and ZooKeeper's ``srvr`` four-letter word."""

from __future__ import annotations

import socket
import struct

from streams.brokers.noida import _recv_exactly

METADATA_KEY = 3


def _metadata_request(correlation_id: int) -> bytes:
    """Metadata v1 (request header v1) with an empty topic list: brokers and controller only."""
    client = b"kip1279-probe"
    body = struct.pack(">hhih", METADATA_KEY, 1, correlation_id, len(client)) + client + struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


def metadata_broker_ids(host: str, port: int, timeout: float = 1.0) -> set[int]:
    """The broker ids a Metadata v1 response lists (empty when the broker does not answer yet)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(_metadata_request(0x4B1279))
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            body = _recv_exactly(sock, size)
    except (OSError, struct.error):
        return set()
    cid, n = struct.unpack_from(">ii", body, 0)
    if cid != 0x4B1279:
        return set()
    pos, ids = 8, set()
    for _ in range(n):
        (node_id, hlen) = struct.unpack_from(">ih", body, pos)
        pos += 6 + hlen + 4  # host, port
        (rlen,) = struct.unpack_from(">h", body, pos)
        pos += 2 + max(rlen, 0)
        ids.add(node_id)
    return ids


def zookeeper_serving(host: str, port: int, timeout: float = 1.0) -> bool:
    """ZooKeeper's ``srvr`` four-letter word answers (it does once the server serves clients)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"srvr")
            return sock.recv(64).startswith(b"Zookeeper version")
    except OSError:
        return False
