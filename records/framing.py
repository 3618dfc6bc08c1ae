"""KRaft metadata-record framing, as Kafka's ``MetadataRecordSerde``.

A framed record is: unsigned varint frame version (1), unsigned varint apiKey, unsigned
varint version, then the message body. Frame version 0, an apiKey or version that does not
fit an int16, an unknown apiKey and bytes after the body are errors.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import msgspec

from records.codec import CodecError
from records.registry import SchemaSet
from records.varint import VarintError, read_uvarint, uvarint_bytes

FRAME_VERSION = 1
_INT16_MAX = 0x7FFF


class FrameError(ValueError):
    def __init__(self, message: str, position: int | None = None, field: str | None = None, *, field_in_message: bool = False) -> None:
        where = []
        if field and field_in_message:
            where.append(f"field {field}")
        if position is not None:
            where.append(f"byte {position}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.position = position
        self.field = field


class ApiMessageAndVersion(NamedTuple):
    """A decoded metadata record: its message, version and apiKey, as Kafka's class of that name."""

    message: msgspec.Struct
    version: int
    api_key: int


def record_type_name(message_name: str) -> str:
    """``TopicRecord`` -> ``TOPIC_RECORD``, the names of Kafka's ``MetadataRecordType``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", message_name).upper()


class MetadataRecordSerde:
    """Frames metadata records of one schema set."""

    def __init__(self, schemas: SchemaSet, message_type: str = "metadata") -> None:
        self.schemas = schemas
        self.message_type = message_type
        self._headers: dict[tuple[int, int], bytes] = {}
        # Hot paths, filled as records are seen: Struct type -> version -> the encoder of
        # header and body, and a 3-byte header (frame 1, one-byte apiKey and version) -> a decoder
        # of the whole record, which returns None for anything that needs the full path.
        self._encoders: dict[type, dict[int, Any]] = {}
        self._decoders: dict[bytes, Any] = {}

    def encode(self, message: msgspec.Struct, version: int) -> bytes:
        try:
            fast = self._encoders[type(message)][version]
        except KeyError:
            return self._encode(message, version)
        return fast(message)  # type: ignore[no-any-return]

    def _encode(self, message: msgspec.Struct, version: int) -> bytes:
        name = self.schemas.name_of(message)
        spec = self.schemas.spec(name)
        if spec.type != self.message_type or spec.api_key is None:
            raise FrameError(f"{name} is a {spec.type} message, not a {self.message_type} record")
        header = self._headers.get((spec.api_key, version))
        if header is None:
            header = self._headers[(spec.api_key, version)] = (
                uvarint_bytes(FRAME_VERSION) + uvarint_bytes(spec.api_key) + uvarint_bytes(version)
            )
        codec = self.schemas.codec(name)
        body = codec.encode(message, version)
        self._encoders.setdefault(type(message), {})[version] = codec.version_codec(version).record_encoder(header, message)
        return header + body

    def read_header(self, data: bytes | bytearray | memoryview) -> tuple[int, int, int]:
        """Returns (apiKey, version, body position)."""
        try:
            frame, pos = read_uvarint(data, 0)
            if frame != FRAME_VERSION:
                raise FrameError(
                    f"unsupported frame version {frame}; only version {FRAME_VERSION} exists", 0, "frameVersion"
                )
            key_pos = pos
            api_key, pos = read_uvarint(data, pos)
            if api_key > _INT16_MAX:
                raise FrameError(f"apiKey {api_key} is too large for an int16", key_pos, "apiKey")
            version_pos = pos
            version, pos = read_uvarint(data, pos)
            if version > _INT16_MAX:
                raise FrameError(f"version {version} is too large for an int16", version_pos, "version")
        except VarintError as e:
            raise FrameError(f"bad frame header: {str(e).rsplit(' at byte', 1)[0]}", e.position) from None
        return api_key, version, pos

    def decode(self, data: bytes | bytearray | memoryview) -> ApiMessageAndVersion:
        try:
            fast = self._decoders.get(data[:3])
        except (TypeError, ValueError):  # unhashable (a bytearray, a writable memoryview): the full path copies it
            fast = None
        if fast is not None:
            record = fast(data)
            if record is not None:
                return record  # type: ignore[no-any-return]
        return self._decode(data)

    def _decode(self, data: bytes | bytearray | memoryview) -> ApiMessageAndVersion:
        if type(data) is not bytes:
            data = bytes(data)
        api_key, version, pos = self.read_header(data)
        spec = self.schemas.by_api_key(api_key, self.message_type)
        if spec is None:
            raise FrameError(f"unknown {self.message_type} record apiKey {api_key}", 1, "apiKey")
        codec = self.schemas.codec(spec.name)
        if version not in spec.valid_versions:
            raise FrameError(f"{spec.name} has no version {version} (valid: {spec.valid_versions})", pos, "version")
        try:
            message, end = codec.decode_prefix(data, version, pos)
        except CodecError as e:
            raise FrameError(f"{spec.name} v{version}: {e.detail}", e.position, e.field, field_in_message=True) from None
        if end != len(data):
            raise FrameError(f"{len(data) - end} bytes of garbage after the {spec.name} body", end)
        if pos == 3 and data[:3] not in self._decoders:  # once: a record the fast path passes on comes here each time
            self._decoders[data[:3]] = codec.version_codec(version).record_decoder(3, ApiMessageAndVersion, (version, api_key))
        return ApiMessageAndVersion(message, version, api_key)

    def to_json(self, record: ApiMessageAndVersion) -> dict[str, Any]:
        """The ``{"type", "version", "data"}`` form kafka-dump-log prints."""
        name = type(record.message).__name__
        return {
            "type": record_type_name(name),
            "version": record.version,
            "data": self.schemas.to_json(record.message, record.version),
        }
