"""What a KIP-1279 destination cluster must do, and the ApiVersions entries that show it.

Pure: a broker's ApiVersions table (api key -> (min, max)) in, the missing capabilities out.
A destination appends batches at the source's offsets, truncates mirror partitions and bumps
leader epochs inside its brokers; no standard Kafka API does any of it (Produce assigns its own
offsets, DeleteRecords only moves the log start). A broker that lists the KIP's APIs is taken to
have them; one that lists none of them (any Kafka without KIP-1279, noida-db, tansu) cannot be a
mirror's destination, nor a failback's.

API keys as the KIP's prototype and ``schemas/`` number them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

KIP1279_APIS: dict[int, str] = {
    94: "CreateClusterMirror",
    95: "StartMirrorTopics",
    96: "StopMirrorTopics",
    100: "ReadMirrorStates",
    101: "WriteMirrorStates",
    105: "BumpLeaderEpochs",
}


class Capability(NamedTuple):
    name: str
    why: str
    api_keys: tuple[int, ...]


DESTINATION_CAPABILITIES: tuple[Capability, ...] = (
    Capability("mirror appends", "batches kept at the source's offsets, byte for byte, by the broker's mirror "
               "fetcher (Produce assigns its own offsets)", (101,)),  # fmt: skip
    Capability("truncation", "a mirror partition truncated to an offset: PREPARING's log truncation, a failback's "
               "to the last mirrored offset (DeleteRecords only moves the log start)", (101, 100)),  # fmt: skip
    Capability("leader-epoch bump", "DLE >= SLE, before fetching and at the failover", (105,)),
    Capability("mirror partition states", "WriteMirrorStates/ReadMirrorStates: states and last mirrored epochs",
               (101, 100)),  # fmt: skip
    Capability("mirror topics", "read-only mirror topics with the source's topic IDs, stopped at a failover",
               (94, 95, 96)),  # fmt: skip
)


def missing_capabilities(versions: Mapping[int, tuple[int, int]]) -> list[tuple[Capability, list[str]]]:
    """Each capability ``versions`` lacks, with the missing APIs (``Name (key)``) that show it."""
    out = []
    for cap in DESTINATION_CAPABILITIES:
        gone = [f"{KIP1279_APIS[k]} ({k})" for k in cap.api_keys if k not in versions]
        if gone:
            out.append((cap, gone))
    return out


def describe_missing(missing: list[tuple[Capability, list[str]]]) -> str:
    """``missing`` in one line: each capability, why it is needed, the APIs a broker lacks."""
    return "; ".join(f"{cap.name} ({cap.why}): no {', '.join(apis)}" for cap, apis in missing)
