"""Kafka's JsonConverter form of messages.

- lowerCamelCase field names (``topicId``);
- UUIDs as Kafka prints them: 22-character URL-safe base64 without padding;
- bytes as base64; int64 as JSON numbers;
- only the fields a version has; tagged fields only when they differ from their default;
- unknown tagged fields, which Kafka's converter drops, under ``_unknownTaggedFields`` so
  that nothing read from the wire is lost on the way back.

Reading JSON is strict: a missing mandatory field, an unknown key, a wrong type or an
out-of-range integer is an error naming the field path.
"""

from __future__ import annotations

import base64
import binascii
import math
import uuid
from typing import Any

import msgspec

from records.schema import INT_RANGES, FieldSpec, MessageSpec, StructSpec
from records.structs import UNKNOWN_TAGGED_FIELDS, MessageClasses

UNKNOWN_TAGS_KEY = "_unknownTaggedFields"


class JsonFormError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"field {path}: {message}" if path else message)
        self.path = path


def uuid_to_kafka(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def uuid_from_kafka(text: str) -> uuid.UUID:
    """Parses Kafka's base64 form; the canonical 36-character form is accepted too."""
    if len(text) == 36 and text.count("-") == 4:
        return uuid.UUID(text)
    if len(text) != 22:
        raise ValueError(f"{text!r} is not a Kafka UUID (22 characters of URL-safe base64)")
    try:
        data = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        raise ValueError(f"{text!r} is not URL-safe base64") from None
    return uuid.UUID(bytes=data)


def to_json(spec: MessageSpec, classes: MessageClasses, value: msgspec.Struct, version: int) -> dict[str, Any]:
    return _Writer(spec, classes, version).struct(spec.struct, value)


def from_json(spec: MessageSpec, classes: MessageClasses, obj: object, version: int) -> msgspec.Struct:
    if version not in spec.valid_versions:
        raise JsonFormError("", f"{spec.name} has no version {version} (valid: {spec.valid_versions})")
    return _Reader(spec, classes, version).struct(spec.struct, obj, "")


class _Writer:
    def __init__(self, spec: MessageSpec, classes: MessageClasses, version: int) -> None:
        self.spec = spec
        self.classes = classes
        self.version = version
        self.flexible = spec.is_flexible(version)

    def struct(self, struct: StructSpec, value: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in struct.fields:
            if self.version not in f.versions:
                continue
            v = getattr(value, f.attr)
            if self.version in f.tagged_versions and v == self.classes.field_default(f):
                continue
            out[f.json_name] = self.value(f, v)
        unknown = getattr(value, UNKNOWN_TAGGED_FIELDS, ())
        if self.flexible and unknown:
            out[UNKNOWN_TAGS_KEY] = [
                {"tag": tag, "data": base64.b64encode(data).decode("ascii")} for tag, data in unknown
            ]
        return out

    def value(self, f: FieldSpec, v: Any) -> Any:
        if v is None:
            return None
        if f.type.is_array:
            return [self.single(f, x) for x in v]
        return self.single(f, v)

    def single(self, f: FieldSpec, v: Any) -> Any:
        if f.type.is_struct:
            return self.struct(f.struct, v)  # type: ignore[arg-type]
        t = f.type.name
        if t == "uuid":
            return uuid_to_kafka(v)
        if t in ("bytes", "records"):
            return base64.b64encode(v).decode("ascii")
        if t == "float64" and not math.isfinite(v):
            return str(v)  # JSON has no NaN or infinity; Kafka's converter writes them as text too
        return v


class _Reader:
    def __init__(self, spec: MessageSpec, classes: MessageClasses, version: int) -> None:
        self.spec = spec
        self.classes = classes
        self.version = version
        self.flexible = spec.is_flexible(version)

    def struct(self, struct: StructSpec, obj: object, path: str) -> Any:
        if not isinstance(obj, dict):
            raise JsonFormError(path, f"expected a JSON object, got {_kind(obj)}")
        known = {f.json_name for f in struct.fields if self.version in f.versions}
        extra = [k for k in obj if k not in known and not (k == UNKNOWN_TAGS_KEY and self.flexible)]
        if extra:
            absent = [k for k in extra if any(f.json_name == k for f in struct.fields)]
            if absent:
                raise JsonFormError(_join(path, absent[0]), f"not a field of {self.spec.name} version {self.version}")
            raise JsonFormError(_join(path, extra[0]), f"unknown field (fields here: {', '.join(sorted(known)) or 'none'})")
        kwargs: dict[str, Any] = {}
        for f in struct.fields:
            if self.version not in f.versions:
                continue
            fpath = _join(path, f.json_name)
            if f.json_name not in obj:
                if self.version in f.tagged_versions:
                    continue
                raise JsonFormError(fpath, f"missing; it is mandatory in version {self.version}")
            kwargs[f.attr] = self.value(f, obj[f.json_name], fpath)
        if UNKNOWN_TAGS_KEY in obj:
            kwargs[UNKNOWN_TAGGED_FIELDS] = self.unknown_tags(obj[UNKNOWN_TAGS_KEY], _join(path, UNKNOWN_TAGS_KEY))
        return self.classes.struct_class(struct)(**kwargs)

    def unknown_tags(self, obj: object, path: str) -> tuple[tuple[int, bytes], ...]:
        if not isinstance(obj, list):
            raise JsonFormError(path, "expected a list of {tag, data}")
        out = []
        for i, item in enumerate(obj):
            p = f"{path}[{i}]"
            if not isinstance(item, dict) or set(item) != {"tag", "data"}:
                raise JsonFormError(p, "expected {\"tag\": N, \"data\": BASE64}")
            tag = item["tag"]
            if not isinstance(tag, int) or isinstance(tag, bool) or tag < 0:
                raise JsonFormError(p + ".tag", "expected a non-negative integer")
            out.append((tag, self.base64(item["data"], p + ".data")))
        return tuple(sorted(out))

    def value(self, f: FieldSpec, v: object, path: str) -> Any:
        if v is None:
            if self.version in f.nullable_versions:
                return None
            raise JsonFormError(path, f"null is not allowed in version {self.version}")
        if f.type.is_array:
            if not isinstance(v, list):
                raise JsonFormError(path, f"expected an array, got {_kind(v)}")
            return tuple(self.single(f, x, f"{path}[{i}]") for i, x in enumerate(v))
        return self.single(f, v, path)

    def single(self, f: FieldSpec, v: object, path: str) -> Any:
        if f.type.is_struct:
            return self.struct(f.struct, v, path)  # type: ignore[arg-type]
        t = f.type.name
        if t in INT_RANGES:
            if not isinstance(v, int) or isinstance(v, bool):
                raise JsonFormError(path, f"expected an integer ({t}), got {_kind(v)}")
            lo, hi = INT_RANGES[t]
            if not lo <= v <= hi:
                raise JsonFormError(path, f"{v} is out of range for {t} [{lo}, {hi}]")
            return v
        if t == "bool":
            if not isinstance(v, bool):
                raise JsonFormError(path, f"expected true or false, got {_kind(v)}")
            return v
        if t == "float64":
            if isinstance(v, str) and v in ("NaN", "Infinity", "-Infinity", "nan", "inf", "-inf"):
                return float(v)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise JsonFormError(path, f"expected a number, got {_kind(v)}")
            return float(v)
        if t == "string":
            if not isinstance(v, str):
                raise JsonFormError(path, f"expected a string, got {_kind(v)}")
            return v
        if t == "uuid":
            if not isinstance(v, str):
                raise JsonFormError(path, f"expected a UUID string, got {_kind(v)}")
            try:
                return uuid_from_kafka(v)
            except ValueError as e:
                raise JsonFormError(path, str(e)) from None
        return self.base64(v, path)

    def base64(self, v: object, path: str) -> bytes:
        if not isinstance(v, str):
            raise JsonFormError(path, f"expected base64 text, got {_kind(v)}")
        try:
            return base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            raise JsonFormError(path, "invalid base64") from None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _kind(v: object) -> str:
    if v is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array", dict: "an object"}.get(
        type(v), type(v).__name__
    )
