"""Typed msgspec Structs generated from message schemas.

One frozen Struct per message, as Kafka generates one class per message: it holds the union
of the fields of every version, each with its schema default. Versions differ only in what
the codec reads and writes. Nested structs get their own classes, reachable through
``struct_class(spec, "StructName")``. Arrays are tuples, so values are immutable all the way
down and hashable.

Attribute names are the schema names in snake_case (``TopicId`` -> ``topic_id``). Flexible
messages also carry ``unknown_tagged_fields``: ``(tag, raw bytes)`` pairs kept from decode and
written back on encode.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import msgspec

from records.schema import INT_RANGES, FieldSpec, FieldType, MessageSpec, StructSpec

UNKNOWN_TAGGED_FIELDS = "unknown_tagged_fields"

_PRIMITIVE_PY: dict[str, Any] = {
    "bool": bool,
    "float64": float,
    "string": str,
    "uuid": uuid.UUID,
    "bytes": bytes,
    "records": bytes,
}
for _name, (_lo, _hi) in INT_RANGES.items():
    _PRIMITIVE_PY[_name] = Annotated[int, msgspec.Meta(ge=_lo, le=_hi)]


class MessageClasses:
    """The Struct classes of one message: the top-level class and one per nested struct."""

    def __init__(self, spec: MessageSpec) -> None:
        self.spec = spec
        self.flexible = not spec.flexible_versions.empty
        self.by_struct: dict[int, type[msgspec.Struct]] = {}
        self.by_name: dict[str, type[msgspec.Struct]] = {}
        self.defaults: dict[int, msgspec.Struct] = {}
        self.root = self._build(spec.struct)

    def _build(self, struct: StructSpec) -> type[msgspec.Struct]:
        if id(struct) in self.by_struct:
            return self.by_struct[id(struct)]
        fields: list[tuple[str, Any, Any]] = []
        seen: set[str] = set()
        for f in struct.fields:
            attr = f.attr
            if attr in seen or attr == UNKNOWN_TAGGED_FIELDS:
                raise ValueError(f"{self.spec.source}: field {f.name} maps to a duplicate attribute {attr}")
            seen.add(attr)
            fields.append((attr, self._annotation(f), self.field_default(f)))
        if self.flexible:
            fields.append((UNKNOWN_TAGGED_FIELDS, tuple[tuple[int, bytes], ...], ()))
        qualname = struct.name if struct is self.spec.struct else f"{self.spec.name}.{struct.name}"
        cls = msgspec.defstruct(
            struct.name,
            fields,
            frozen=True,
            module="records.generated",
            namespace={"__qualname__": qualname, "__doc__": f"{qualname} (generated from {self.spec.source})."},
        )
        self.by_struct[id(struct)] = cls
        self.by_name.setdefault(struct.name, cls)
        return cls

    def _annotation(self, f: FieldSpec) -> Any:
        t: Any
        if f.type.is_struct:
            t = self._build(f.struct)  # type: ignore[arg-type]
        else:
            t = _PRIMITIVE_PY[f.type.name]
        if f.type.is_array:
            t = tuple[t, ...]
        if not f.nullable_versions.empty:
            t = t | None
        return t

    def field_default(self, f: FieldSpec) -> Any:
        """The Python default of a field: the schema default, or the type's zero value."""
        if f.default is None:
            return None
        if f.type.is_array:
            return ()
        if f.type.is_struct:
            return self.default_instance(f.struct)  # type: ignore[arg-type]
        return f.default

    def default_instance(self, struct: StructSpec) -> msgspec.Struct:
        if id(struct) not in self.defaults:
            self.defaults[id(struct)] = self._build(struct)()
        return self.defaults[id(struct)]

    def struct_class(self, struct: StructSpec) -> type[msgspec.Struct]:
        return self.by_struct[id(struct)]


def python_type_name(ftype: FieldType) -> str:
    base = ftype.name if ftype.is_struct else getattr(_PRIMITIVE_PY[ftype.name], "__name__", "int")
    return f"tuple[{base}, ...]" if ftype.is_array else base
