"""A loaded set of schemas with their Structs and codecs, looked up by name or apiKey."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import msgspec

from records import jsonform
from records.codec import CodecError, MessageCodec
from records.schema import MessageSpec, SchemaError, load_schema_dir

PROJECT_SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


class SchemaSet:
    """Every message of a schema folder: specs, Struct classes and codecs, built lazily."""

    def __init__(self, specs: Iterable[MessageSpec], source: str = "") -> None:
        self.source = source
        self.specs: dict[str, MessageSpec] = {}
        self._codecs: dict[str, MessageCodec] = {}
        self._by_api_key: dict[tuple[str, int], MessageSpec] = {}
        for spec in specs:
            if spec.name in self.specs:
                raise SchemaError(spec.source, f"message {spec.name} is also defined in {self.specs[spec.name].source}")
            self.specs[spec.name] = spec
            if spec.api_key is not None:
                key = (spec.type, spec.api_key)
                other = self._by_api_key.get(key)
                if other is not None:
                    raise SchemaError(spec.source, f"{spec.type} apiKey {spec.api_key} is also used by {other.name} ({other.source})")
                self._by_api_key[key] = spec

    @classmethod
    def load(cls, directory: str | Path) -> "SchemaSet":
        """Loads a folder; raises the first error (``load_schema_dir`` gives them all)."""
        specs, errors = load_schema_dir(directory)
        if errors:
            raise errors[0]
        return cls(specs, str(directory))

    def spec(self, name: str) -> MessageSpec:
        try:
            return self.specs[name]
        except KeyError:
            raise KeyError(f"no message named {name!r} in {self.source or 'the schemas'}") from None

    def codec(self, name: str) -> MessageCodec:
        codec = self._codecs.get(name)
        if codec is None:
            codec = self._codecs[name] = MessageCodec(self.spec(name))
        return codec

    def struct(self, name: str) -> type[msgspec.Struct]:
        """The Struct class of a message."""
        return self.codec(name).cls

    def nested(self, message: str, struct_name: str) -> type[msgspec.Struct]:
        """The Struct class of a nested or common struct of a message."""
        classes = self.codec(message).classes
        try:
            return classes.by_name[struct_name]
        except KeyError:
            raise KeyError(f"{message} has no struct named {struct_name!r}") from None

    def by_api_key(self, api_key: int, message_type: str = "metadata") -> MessageSpec | None:
        return self._by_api_key.get((message_type, api_key))

    def name_of(self, value: msgspec.Struct) -> str:
        name = type(value).__name__
        if name not in self.specs or self.codec(name).cls is not type(value):
            raise CodecError(f"{type(value).__qualname__} is not a message of {self.source or 'these schemas'}")
        return name

    def encode(self, value: msgspec.Struct, version: int) -> bytes:
        return self.codec(self.name_of(value)).encode(value, version)

    def decode(self, name: str, data: bytes | bytearray | memoryview, version: int) -> msgspec.Struct:
        return self.codec(name).decode(data, version)

    def to_json(self, value: msgspec.Struct, version: int) -> dict[str, Any]:
        """Kafka's JsonConverter form of a message at a version."""
        name = self.name_of(value)
        codec = self.codec(name)
        return jsonform.to_json(codec.spec, codec.classes, value, version)

    def from_json(self, name: str, obj: object, version: int) -> msgspec.Struct:
        codec = self.codec(name)
        return jsonform.from_json(codec.spec, codec.classes, obj, version)


@lru_cache(maxsize=None)
def default_schemas() -> SchemaSet:
    """The project's own ``schemas/`` folder, loaded once."""
    return SchemaSet.load(PROJECT_SCHEMAS)


@lru_cache(maxsize=8)
def schemas_at(directory: str) -> SchemaSet:
    return SchemaSet.load(directory)
