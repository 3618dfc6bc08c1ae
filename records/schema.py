"""Loader for Kafka's JSON message schemas.

Reads the files Kafka keeps under ``clients/src/main/resources/common/message`` and
``metadata/src/main/resources/common/metadata`` unchanged: ``//`` comments, every key of
the format, every message type. It checks the rules Kafka's generator enforces, and every
rule break names the file and the field.
"""

from __future__ import annotations

import base64
import json
import keyword
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

MESSAGE_TYPES = frozenset(
    {"request", "response", "header", "metadata", "data", "coordinator-key", "coordinator-value"}
)
PRIMITIVE_TYPES = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "string", "uuid", "bytes", "records"}
)
INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "uint32": (0, (1 << 32) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}
NULLABLE_TYPES = frozenset({"string", "bytes", "records", "uuid"})
FIELD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*\Z")
STRUCT_NAME = re.compile(r"[A-Z][A-Za-z0-9]*\Z")

MESSAGE_KEYS = frozenset(
    {
        "apiKey", "type", "name", "validVersions", "flexibleVersions", "deprecatedVersions",
        "fields", "commonStructs", "listeners", "latestVersionUnstable", "apiStability",
    }
)
FIELD_KEYS = frozenset(
    {
        "name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "default",
        "ignorable", "entityType", "about", "fields", "mapKey", "flexibleVersions", "zeroCopy",
    }
)


class SchemaError(ValueError):
    """A schema file breaks a rule of Kafka's message format."""

    def __init__(self, source: str, message: str, field_path: str | None = None) -> None:
        where = f"{source}: field {field_path}: " if field_path else f"{source}: "
        super().__init__(where + message)
        self.source = source
        self.field_path = field_path


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive range of versions; ``lowest > highest`` means none."""

    lowest: int
    highest: int

    NONE_HIGHEST = -1
    OPEN = 0x7FFF

    @classmethod
    def parse(cls, text: object, what: str) -> "Versions":
        if isinstance(text, int) and not isinstance(text, bool):
            text = str(text)
        if not isinstance(text, str):
            raise ValueError(f"{what} must be a version range string, not {text!r}")
        text = text.strip()
        if text == "none":
            return cls(0, -1)
        m = re.fullmatch(r"(\d+)\+", text)
        if m:
            return cls(int(m.group(1)), cls.OPEN)
        m = re.fullmatch(r"(\d+)-(\d+)", text)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo > hi:
                raise ValueError(f"{what} range {text!r} is empty")
            return cls(lo, hi)
        m = re.fullmatch(r"\d+", text)
        if m:
            return cls(int(text), int(text))
        raise ValueError(f"{what} {text!r} is not a version range (use 'N', 'N+', 'N-M' or 'none')")

    @property
    def empty(self) -> bool:
        return self.lowest > self.highest

    def __contains__(self, version: int) -> bool:
        return self.lowest <= version <= self.highest

    def intersect(self, other: "Versions") -> "Versions":
        return Versions(max(self.lowest, other.lowest), min(self.highest, other.highest))

    def contains_range(self, other: "Versions") -> bool:
        return other.empty or (self.lowest <= other.lowest and other.highest <= self.highest)

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.highest == self.OPEN:
            return f"{self.lowest}+"
        if self.lowest == self.highest:
            return str(self.lowest)
        return f"{self.lowest}-{self.highest}"


NO_VERSIONS = Versions(0, -1)


@dataclass(frozen=True, slots=True)
class FieldType:
    """A field's type: a primitive, a struct, or an array of either."""

    name: str  # primitive name or struct name, without the array marker
    is_array: bool

    @property
    def is_struct(self) -> bool:
        return self.name not in PRIMITIVE_TYPES

    @property
    def can_be_nullable(self) -> bool:
        return self.is_array or self.is_struct or self.name in NULLABLE_TYPES

    def __str__(self) -> str:
        return ("[]" if self.is_array else "") + self.name


@dataclass(slots=True)
class FieldSpec:
    name: str
    type: FieldType
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    default: object  # Python value, already parsed for the type (struct fields: None or "")
    ignorable: bool
    about: str
    entity_type: str | None
    map_key: bool
    struct: "StructSpec | None" = None  # for struct and []struct types
    # A string or bytes field's own flexibleVersions (RequestHeader's ClientId: "none"): where its
    # length is compact, overriding the message's. None: as the message.
    flexible_versions: "Versions | None" = None

    @property
    def attr(self) -> str:
        return snake_case(self.name)

    @property
    def json_name(self) -> str:
        return self.name[0].lower() + self.name[1:]

    @property
    def is_tagged(self) -> bool:
        return self.tag is not None


@dataclass(slots=True)
class StructSpec:
    name: str
    versions: Versions
    fields: list[FieldSpec]

    def fields_in(self, version: int) -> list[FieldSpec]:
        return [f for f in self.fields if version in f.versions]


@dataclass(slots=True)
class MessageSpec:
    name: str
    type: str
    api_key: int | None
    valid_versions: Versions
    flexible_versions: Versions
    struct: StructSpec
    common_structs: dict[str, StructSpec]
    source: str
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def fields(self) -> list[FieldSpec]:
        return self.struct.fields

    def versions(self) -> range:
        if self.valid_versions.empty:
            return range(0)
        return range(self.valid_versions.lowest, self.valid_versions.highest + 1)

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible_versions

    def all_structs(self) -> Iterable[StructSpec]:
        """Every struct of the message, depth first, each once (common structs included)."""
        seen: set[int] = set()
        stack = [self.struct]
        while stack:
            s = stack.pop()
            if id(s) in seen:
                continue
            seen.add(id(s))
            yield s
            stack.extend(f.struct for f in reversed(s.fields) if f.struct is not None)


def snake_case(name: str) -> str:
    """``TopicId`` -> ``topic_id``; ``CRCType`` -> ``crc_type``; keywords get a trailing ``_``."""
    out = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    return out + "_" if keyword.iskeyword(out) else out


def strip_comments(text: str) -> str:
    """Removes ``//`` comments, leaving string literals alone."""
    out = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
        elif c == '"':
            in_string = True
            out.append(c)
            i += 1
        elif c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j  # keep the newline so JSON error line numbers stay right
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_schema_text(text: str, source: str) -> MessageSpec:
    try:
        raw = json.loads(strip_comments(text))
    except json.JSONDecodeError as e:
        raise SchemaError(source, f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    return _Parser(source).message(raw)


def load_schema(path: str | Path) -> MessageSpec:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SchemaError(str(path), f"cannot read: {e}") from None
    return parse_schema_text(text, path.name)


def load_schema_dir(directory: str | Path) -> tuple[list[MessageSpec], list[SchemaError]]:
    """Loads every ``*.json`` of a folder; returns the good specs and every error found."""
    directory = Path(directory)
    if not directory.is_dir():
        raise SchemaError(str(directory), "not a directory")
    specs: list[MessageSpec] = []
    errors: list[SchemaError] = []
    for path in sorted(directory.glob("*.json")):
        try:
            specs.append(load_schema(path))
        except SchemaError as e:
            errors.append(e)
    return specs, errors


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.common: dict[str, StructSpec] = {}
        self.struct_names: dict[str, str] = {}  # struct name -> path of the field defining it
        self.flexible = NO_VERSIONS

    def fail(self, message: str, path: str | None = None) -> SchemaError:
        return SchemaError(self.source, message, path)

    def versions(self, value: object, what: str, path: str | None) -> Versions:
        try:
            return Versions.parse(value, what)
        except ValueError as e:
            raise self.fail(str(e), path) from None

    def message(self, raw: object) -> MessageSpec:
        if not isinstance(raw, dict):
            raise self.fail("top level must be a JSON object")
        unknown = sorted(set(raw) - MESSAGE_KEYS)
        if unknown:
            raise self.fail(f"unknown top-level key(s): {', '.join(unknown)}")
        name = raw.get("name")
        if not isinstance(name, str) or not STRUCT_NAME.match(name):
            raise self.fail(f"message name {name!r} must be an UpperCamelCase identifier")
        mtype = raw.get("type")
        if mtype not in MESSAGE_TYPES:
            raise self.fail(f"message type {mtype!r} is not one of {', '.join(sorted(MESSAGE_TYPES))}")
        api_key = raw.get("apiKey")
        if api_key is not None and (not isinstance(api_key, int) or isinstance(api_key, bool) or not 0 <= api_key <= 0x7FFF):
            raise self.fail(f"apiKey {api_key!r} must be an integer from 0 to 32767")
        if mtype in ("request", "response", "metadata") and api_key is None:
            raise self.fail(f"a {mtype} message needs an apiKey")
        if "validVersions" not in raw:
            raise self.fail("validVersions is missing")
        valid = self.versions(raw["validVersions"], "validVersions", None)
        if "flexibleVersions" not in raw:
            raise self.fail("flexibleVersions is missing")
        self.flexible = self.versions(raw["flexibleVersions"], "flexibleVersions", None)
        if not self.flexible.empty and self.flexible.highest != Versions.OPEN:
            raise self.fail(f"flexibleVersions {self.flexible} must be open-ended, like 'N+'")
        common_raw = raw.get("commonStructs", [])
        if not isinstance(common_raw, list):
            raise self.fail("commonStructs must be a list")
        # Common structs may be referenced before they are parsed; register names first.
        for cs in common_raw:
            if not isinstance(cs, dict) or not isinstance(cs.get("name"), str):
                raise self.fail("every common struct needs a name")
            if cs["name"] in self.struct_names:
                raise self.fail(f"common struct {cs['name']} is defined twice")
            self.struct_names[cs["name"]] = f"commonStructs.{cs['name']}"
            self.common[cs["name"]] = StructSpec(cs["name"], self.versions(cs.get("versions", "0+"), "versions", cs["name"]), [])
        for cs in common_raw:
            spec = self.common[cs["name"]]
            spec.fields.extend(self.fields(cs.get("fields"), spec.versions, f"commonStructs.{cs['name']}"))
        fields = self.fields(raw.get("fields"), valid, None)
        spec = MessageSpec(
            name=name,
            type=mtype,
            api_key=api_key,
            valid_versions=valid,
            flexible_versions=self.flexible,
            struct=StructSpec(name, valid, fields),
            common_structs=self.common,
            source=self.source,
            extra={k: raw[k] for k in ("listeners", "latestVersionUnstable", "apiStability", "deprecatedVersions") if k in raw},
        )
        return spec

    def fields(self, raw: object, parent_versions: Versions, parent_path: str | None) -> list[FieldSpec]:
        if raw is None:
            raw = []
        if not isinstance(raw, list):
            raise self.fail("fields must be a list", parent_path)
        out = [self.field(f, parent_versions, parent_path) for f in raw]
        names: set[str] = set()
        for f in out:
            path = _join(parent_path, f.name)
            if f.name.lower() in names:
                raise self.fail("duplicate field name", path)
            names.add(f.name.lower())
        tags = sorted(f.tag for f in out if f.tag is not None)
        if len(tags) != len(set(tags)):
            dup = next(t for t in tags if tags.count(t) > 1)
            raise self.fail(f"tag {dup} is used by more than one field", parent_path or "(top level)")
        if tags != list(range(len(tags))):
            raise self.fail(
                f"tags must be contiguous starting at 0, found {tags}", parent_path or "(top level)"
            )
        return out

    def field(self, raw: object, parent_versions: Versions, parent_path: str | None) -> FieldSpec:
        if not isinstance(raw, dict):
            raise self.fail("a field must be a JSON object", parent_path)
        name = raw.get("name")
        path = _join(parent_path, name if isinstance(name, str) else repr(name))
        if not isinstance(name, str) or not FIELD_NAME.match(name):
            raise self.fail(f"field name {name!r} must be a letter followed by letters and digits", path)
        unknown = sorted(set(raw) - FIELD_KEYS)
        if unknown:
            raise self.fail(f"unknown key(s): {', '.join(unknown)}", path)
        type_text = raw.get("type")
        if not isinstance(type_text, str) or not type_text:
            raise self.fail("type is missing", path)
        is_array = type_text.startswith("[]")
        base = type_text[2:] if is_array else type_text
        if base.startswith("[]"):
            raise self.fail(f"nested arrays are not allowed: {type_text}", path)
        if base not in PRIMITIVE_TYPES and not STRUCT_NAME.match(base):
            raise self.fail(f"unknown type {type_text!r}", path)
        ftype = FieldType(base, is_array)
        if "versions" not in raw and "taggedVersions" not in raw:
            raise self.fail("versions is missing", path)
        # Kafka lets a tagged field omit versions: they are its taggedVersions (TransactionLogValue).
        versions = self.versions(raw.get("versions", raw.get("taggedVersions")), "versions", path)
        nullable = self.versions(raw.get("nullableVersions", "none"), "nullableVersions", path)
        tagged = self.versions(raw.get("taggedVersions", "none"), "taggedVersions", path)
        tag = raw.get("tag")
        if not nullable.empty and not ftype.can_be_nullable:
            raise self.fail(f"nullableVersions is set, but type {ftype} cannot be null", path)
        # Kafka accepts nullableVersions wider than versions (CreateTopicsResponse does it).
        nullable = nullable.intersect(versions)
        if isinstance(tag, str) and tag.isdigit():
            tag = int(tag)  # Jackson coerces "tag": "2"; Kafka's own files use both forms
        if tag is not None:
            if not isinstance(tag, int) or isinstance(tag, bool) or tag < 0:
                raise self.fail(f"tag {tag!r} must be a non-negative integer", path)
            if tagged.empty:
                raise self.fail("a tag needs taggedVersions", path)
        elif not tagged.empty:
            raise self.fail("taggedVersions is set but tag is missing", path)
        if not tagged.empty:
            if not self.flexible.contains_range(tagged):
                raise self.fail(f"taggedVersions {tagged} is not within flexibleVersions {self.flexible}", path)
            if tagged.highest != Versions.OPEN:
                raise self.fail(f"taggedVersions {tagged} must be open-ended", path)
            if not versions.contains_range(tagged):
                raise self.fail(f"taggedVersions {tagged} is outside versions {versions}", path)
        for key in ("ignorable", "mapKey", "zeroCopy"):
            if key in raw and not isinstance(raw[key], bool):
                raise self.fail(f"{key} must be true or false", path)
        about = raw.get("about", "")
        if not isinstance(about, str):
            raise self.fail("about must be a string", path)
        struct = None
        sub = raw.get("fields")
        if ftype.is_struct:
            if sub is not None:
                if base in self.struct_names:
                    raise self.fail(f"struct {base} is defined twice (also at {self.struct_names[base]})", path)
                self.struct_names[base] = path
                struct = StructSpec(base, versions, self.fields(sub, versions, path))
            elif base in self.common:
                struct = self.common[base]
            else:
                raise self.fail(f"struct type {base} has no fields and is not a common struct", path)
        elif sub is not None:
            raise self.fail(f"type {ftype} cannot have fields", path)
        default = self.default(raw.get("default"), ftype, versions, nullable, path)
        field_flexible = None
        if "flexibleVersions" in raw:
            if ftype.is_array or ftype.name not in ("string", "bytes"):
                raise self.fail(f"flexibleVersions can only be set on a string or bytes field, not {ftype}", path)
            field_flexible = self.versions(raw["flexibleVersions"], "flexibleVersions", path)
        return FieldSpec(
            name=name,
            type=ftype,
            versions=versions,
            nullable_versions=nullable,
            tagged_versions=tagged,
            tag=tag,
            default=default,
            ignorable=bool(raw.get("ignorable", False)),
            about=about,
            entity_type=raw.get("entityType"),
            map_key=bool(raw.get("mapKey", False)),
            struct=struct,
            flexible_versions=field_flexible,
        )

    def default(self, raw: object, ftype: FieldType, versions: Versions, nullable: Versions, path: str) -> object:
        """Parses a default into its Python value; struct values are built later by the codec."""
        if isinstance(raw, bool):
            raw = "true" if raw else "false"
        elif isinstance(raw, (int, float)):
            raw = str(raw)
        elif raw is not None and not isinstance(raw, str):
            raise self.fail(f"default {raw!r} must be a string or a number", path)
        text = raw
        if text == "null":
            if not nullable.contains_range(versions):
                raise self.fail("null cannot be the default: not every version of this field is nullable", path)
            if not ftype.can_be_nullable:
                raise self.fail(f"null is not a legal default for type {ftype}", path)
            return None
        if ftype.is_array or ftype.is_struct or ftype.name in ("bytes", "records"):
            if text not in (None, ""):
                raise self.fail(f"invalid default {text!r}: a {ftype} field defaults to empty or null only", path)
            return () if ftype.is_array else (b"" if not ftype.is_struct else "")
        t = ftype.name
        if t in INT_RANGES:
            if text in (None, ""):
                return 0
            try:
                value = int(text, 16) if text.lower().startswith(("0x", "-0x")) else int(text, 10)
            except ValueError:
                raise self.fail(f"invalid default {text!r} for {t}", path) from None
            lo, hi = INT_RANGES[t]
            if not lo <= value <= hi:
                raise self.fail(f"default {value} is out of range for {t} [{lo}, {hi}]", path)
            return value
        if t == "bool":
            if text in (None, "", "false"):
                return False
            if text == "true":
                return True
            raise self.fail(f"invalid default {text!r} for bool (use true or false)", path)
        if t == "float64":
            if text in (None, ""):
                return 0.0
            try:
                return float(text)
            except ValueError:
                raise self.fail(f"invalid default {text!r} for float64", path) from None
        if t == "string":
            return "" if text is None else text
        if t == "uuid":
            if text in (None, ""):
                return ZERO_UUID
            try:
                data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            except (ValueError, TypeError):
                data = b""
            if len(data) != 16:
                raise self.fail(f"invalid default {text!r} for uuid (base64 of 16 bytes)", path)
            return uuid.UUID(bytes=data)
        raise self.fail(f"no default rule for type {ftype}", path)  # unreachable: types are checked first


ZERO_UUID = uuid.UUID(int=0)


def _join(parent: str | None, name: str) -> str:
    return f"{parent}.{name}" if parent else name
