"""What the metadata log's writer, reader, snapshots and dead-letter queue share: the record serde,
the epoch a record without one carries, the log's error and the header integers."""

from __future__ import annotations

import struct

from records.framing import MetadataRecordSerde
from records.registry import default_schemas


NO_EPOCH = -1
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
INT16 = struct.Struct(">h")


class MetadataLogError(RuntimeError):
    pass


def default_serde() -> MetadataRecordSerde:
    return MetadataRecordSerde(default_schemas())
