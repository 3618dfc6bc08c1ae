"""Kafka wire codec for generated Structs, byte-compatible with Kafka's generated Java code.

For every message version the codec generates specialised Python functions, compiled once:

- a checked decoder and a general encoder, which keep the index of the field they are in,
  so any failure is reported with the field path and the byte offset;
- a fast decoder without that bookkeeping nor bounds checks: any exception, or a read past
  the end, hands the input to the checked decoder, which returns the same value or says
  what is wrong;
- for versions of primitives and arrays of fixed-width ones, a fast encoder: one
  ``struct.Struct`` pack for the whole message, chosen by its shape (lengths, tagged fields
  present); any other value goes to the general encoder.

``record_decoder`` and ``record_encoder`` are the same fast paths for whole KRaft records,
frame header included (``records.framing``); a record encoder tests first the shape of the
value it was built on (the arrays' lengths: a cluster's replica count rarely varies), packed
without a lookup nor a run-time argument list. Consecutive fixed-width fields are read with a
single precompiled ``struct.Struct``, arrays of fixed-width primitives in one precompiled
call, and small varints inline. Decoded UUIDs are shared through a bounded cache keyed by
their bytes (metadata records repeat a few ids).

Wire rules:
- big-endian fixed-width values, UUIDs as 16 bytes, bool as one byte;
- non-flexible versions: int16 string lengths, int32 array and bytes lengths, -1 for null;
- flexible versions: compact lengths (uvarint N+1, 0 for null) and a tagged-field section
  closing every struct; tagged fields written in ascending tag order, only when they differ
  from their default; unknown tags kept on decode and written back on encode.
- nullable structs carry an int8 presence byte (-1 null, 1 present); a nullable uuid is
  written as the all-zero uuid, which reads back as null.
"""

from __future__ import annotations

import struct as _struct
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import msgspec

from records.schema import FieldSpec, MessageSpec, StructSpec
from records.structs import UNKNOWN_TAGGED_FIELDS, MessageClasses
from records.varint import VarintError, read_uvarint, uvarint_bytes


class CodecError(ValueError):
    """A value cannot be encoded, or bytes cannot be decoded, at a named field and byte."""

    def __init__(self, message: str, *, field: str | None = None, position: int | None = None) -> None:
        where = []
        if field:
            where.append(f"field {field}")
        if position is not None:
            where.append(f"byte {position}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.field = field
        self.position = position
        self.detail = message


class UnsupportedVersionError(CodecError):
    """A value uses a field that the requested version does not have."""


class _Truncated(Exception):
    def __init__(self, needed: int, remaining: int) -> None:
        self.needed = needed
        self.remaining = remaining


class _Invalid(Exception):
    pass


_FIXED = {"bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I", "int64": "q", "float64": "d", "uuid": "16s"}
_FIXED_SIZE = {"?": 1, "b": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "d": 8, "16s": 16}
_ZERO_UUID = uuid.UUID(int=0)
_UVB = [uvarint_bytes(i) for i in range(4096)]


def _uvb(n: int) -> bytes:
    return _UVB[n] if n < 4096 else uvarint_bytes(n)


_object_new = object.__new__
_UUID = uuid.UUID
_SAFE_UNKNOWN = uuid.SafeUUID.unknown
# UUID's slot setters: UUID.__setattr__ refuses writes, and the slot descriptors are the
# cheapest way around it.
_set_uuid_int = _UUID.int.__set__  # type: ignore[attr-defined]
_set_uuid_safe = _UUID.is_safe.__set__  # type: ignore[attr-defined]

# Decoded UUIDs by their 16 bytes. Metadata records repeat a few ids over and over (a topic
# id in every record of its partitions, a handful of log directory ids), and a UUID is
# immutable, so decoders share one instance per id. Bounded: cleared when full.
_UUID_CACHE: dict[bytes, uuid.UUID] = {}
_UUID_CACHE_MAX = 16384
_ZERO16 = bytes(16)


def _uuid(b: bytes) -> uuid.UUID:
    """The UUID of 16 bytes; skips UUID.__init__'s argument parsing."""
    u = _UUID_CACHE.get(b)
    if u is None:
        u = _object_new(_UUID)
        _set_uuid_int(u, int.from_bytes(b, "big"))
        _set_uuid_safe(u, _SAFE_UNKNOWN)
        if len(_UUID_CACHE) >= _UUID_CACHE_MAX:
            _UUID_CACHE.clear()
        _UUID_CACHE[bytes(b)] = u
    return u


def _uuid_or_none(b: bytes) -> uuid.UUID | None:
    return None if b == _ZERO16 else _uuid(b)


# Decoded UUID arrays by their bytes, for the same reason: a partition's log directories
# are one of the few lists its replicas' brokers have. Bounded: cleared when full.
_UUID_TUPLES: dict[bytes, tuple[uuid.UUID, ...]] = {}


def _uuid_tuple(raw: bytes, n: int) -> tuple[uuid.UUID, ...]:
    """The ``n`` UUIDs of ``raw``, kept for next time. A slice cut short by the buffer's end
    raises here, or matches a shorter array in the cache: the fast decoder's end test then
    fails, and the checked decoder reports it."""
    ids = tuple(map(_uuid, _array_table("unpack", "16s")[n](raw)))
    if len(_UUID_TUPLES) >= _UUID_CACHE_MAX:
        _UUID_TUPLES.clear()
    _UUID_TUPLES[raw] = ids
    return ids


def clear_uuid_cache() -> None:
    """Forgets the UUIDs decoded so far (benchmarks use it to measure a cold replay)."""
    _UUID_CACHE.clear()
    _UUID_TUPLES.clear()


def _uuid_bytes(u: Any) -> bytes:
    if u is None:
        return _ZERO16
    return u.bytes


# Precompiled ``struct`` functions for arrays of fixed-width values of up to _ARRAY_TABLE - 1
# elements: building '>' + str(n) + code and looking it up in struct's cache costs more
# than the unpacking itself. Longer arrays fall back to the format string.
_ARRAY_TABLE = 128


def _array_format(code: str, n: int) -> str:
    # "16s" takes its count as a size ("316s" is one 316-byte string), so UUIDs repeat it.
    return code * n if code == "16s" else f"{n}{code}"


_ARRAY_TABLES: dict[tuple[str, str], list[Callable[..., Any]]] = {}


def _array_table(kind: str, code: str) -> list[Callable[..., Any]]:
    """Built on first use by the code generator, indexed by element count.

    ``unpack``: the elements (``unpack_by_byte``: indexed by N + 1); ``pack_compact``: a one-byte compact length (N + 1 < 128) then
    the elements, for flexible versions; ``pack``: an int32 length then the elements.
    """
    table = _ARRAY_TABLES.get((kind, code))
    if table is None:
        if kind == "unpack":
            table = [_struct.Struct(">" + _array_format(code, n)).unpack_from for n in range(_ARRAY_TABLE)]
        elif kind == "unpack_by_byte":  # indexed by the compact length byte, N + 1
            # Bytes 128 and up start a longer varint: past the table's end (IndexError).
            table = [None, *_array_table("unpack", code)[:127]]  # type: ignore[list-item]
        elif kind == "pack_compact":
            table = [_struct.Struct(f">B{n}{code}").pack for n in range(_ARRAY_TABLE - 1)]
        else:
            table = [_struct.Struct(f">i{n}{code}").pack for n in range(_ARRAY_TABLE)]
        _ARRAY_TABLES[(kind, code)] = table
    return table


def _unpack_array(code: str, n: int) -> Callable[..., tuple[Any, ...]]:
    return _struct.Struct(">" + _array_format(code, n)).unpack_from


def _pack_array(code: str, n: int) -> Callable[..., bytes]:
    return _struct.Struct(">" + _array_format(code, n)).pack


class _Slow(Exception):
    """The fast encoder's way to the general one."""


_SHAPES_MAX = 4096
_HOT_MAX = 16  # the longest array a hot path unpacks by name


class _Shapes:
    """The ``struct`` pack of each shape a message version takes, built on first use.

    A shape is the tuple the fast encoder computes: the length of each variable part of the
    body (-1 for null), then, when a tagged field is present, the bitmask of those present
    and the lengths of the ones that vary. A shape that needs a varint longer than one byte
    (a compact length of 127 or more, a tag or tagged size of 128 or more) or an oversized
    string maps to False, and the general encoder takes the value. Bounded: cleared when full.
    """

    def __init__(self, body: list[tuple[str, str, str]], tagged: list[tuple[int, tuple[str, str, str]]] | None, keys: int) -> None:
        self.body = body
        self.tagged = tagged  # None: not a flexible version
        self.keys = keys
        self.cache: dict[tuple[int, ...], Any] = {}

    def __call__(self, key: tuple[int, ...]) -> Any:
        fmt = self.format(key)
        pack = False if fmt is None else _struct.Struct(fmt).pack
        if len(self.cache) >= _SHAPES_MAX:
            self.cache.clear()
        self.cache[key] = pack
        return pack

    @staticmethod
    def piece(piece: tuple[str, str, str], key: Iterator[int]) -> str | None:
        kind, code, length = piece
        if kind == "fixed":
            return code
        n = next(key)
        if length == "B" and n >= 127 or length == "h" and n > 0x7FFF:
            return None
        if kind == "str":
            return f"{length}{max(n, 0)}s"
        if code == "16s":  # one bytes argument
            return f"{length}{16 * max(n, 0)}s"
        return length + (f"{n}{code}" if n > 0 else "")

    def format(self, key: tuple[int, ...]) -> str | None:
        values = iter(key)
        parts = [">"]
        for piece in self.body:
            part = self.piece(piece, values)
            if part is None:
                return None
            parts.append(part)
        if self.tagged is not None:
            present = next(values, 0)
            if present.bit_count() >= 128:
                return None
            parts.append("B")
            for bit, (tag, piece) in enumerate(self.tagged):
                if present >> bit & 1:
                    part = self.piece(piece, values)
                    if part is None or tag >= 128 or _struct.calcsize(">" + part) >= 128:
                        return None
                    parts.append("BB" + part)
        return "".join(parts)


class _Writer:
    """Indented Python source."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 1

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def indent(self) -> "_Indent":
        return _Indent(self)


class _Indent:
    def __init__(self, w: _Writer) -> None:
        self.w = w

    def __enter__(self) -> None:
        self.w.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.w.depth -= 1


class _VersionCodegen:
    """Generates the decode and encode functions of one message version."""

    def __init__(self, spec: MessageSpec, version: int, classes: MessageClasses) -> None:
        self.spec = spec
        self.version = version
        self.flexible = spec.is_flexible(version)
        self.classes = classes
        self.consts: dict[str, Any] = {}
        self.paths: list[str] = []
        self.counter = 0
        # The fast decoder: no field tracking nor bounds checks; any exception, or a read
        # past ``end``, sends the input to the checked decoder, which says what is wrong.
        self.fast = False
        self.array_var = ""  # fast_field's last array

    # -- shared helpers -------------------------------------------------------------------

    def const(self, value: Any, prefix: str = "C") -> str:
        for name, existing in self.consts.items():
            if existing is value:
                return name
        name = f"_{prefix}{len(self.consts)}"
        self.consts[name] = value
        return name

    def tmp(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def track(self, path: str) -> int:
        self.paths.append(path)
        return len(self.paths) - 1

    def nullable(self, f: FieldSpec) -> bool:
        return self.version in f.nullable_versions

    def present(self, f: FieldSpec) -> bool:
        return self.version in f.versions

    def tagged(self, f: FieldSpec) -> bool:
        return self.version in f.tagged_versions

    def default_expr(self, f: FieldSpec) -> str:
        return self.const(self.classes.field_default(f))

    # -- decode ---------------------------------------------------------------------------

    def fast_decode_source(self, record: tuple[int, tuple[int, ...]] | None = None) -> str:
        """``decode(buf, pos, end)``; with ``record`` = (start, extra), ``decode(buf)``, which
        reads the whole buffer from ``start`` and returns ``_R((value, *extra))``, or None
        for anything else."""
        self.fast = True
        w = _Writer()
        w.depth = 0
        if record is None:
            w("def decode(buf, pos, end):")
            w.depth = 1
            w("_s = pos; _e = end")
        else:
            w("def decode(buf):")
            w.depth = 1
            w(f"pos = {record[0]}; end = len(buf)")
        w("try:")
        with w.indent():
            result = self.dec_struct(w, self.spec.struct, "")
            if record is None:
                w(f"if pos <= end: return {result}, pos")
            else:
                w(f"if pos == end: return _new_tuple(_R, ({result}, {''.join(f'{x!r}, ' for x in record[1])}))")
        w("except Exception:")
        with w.indent():
            w("pass")
        w("return _checked(buf, _s, _e)" if record is None else "return None")
        return "\n".join(w.lines)

    def decode_source(self) -> str:
        w = _Writer()
        w.depth = 0
        w("def decode(buf, pos, end):")
        w.depth = 1
        w("_f = -1")
        w("_p = pos")
        w("try:")
        with w.indent():
            result = self.dec_struct(w, self.spec.struct, "")
            w(f"return {result}, pos")
        w("except Exception as e:")
        with w.indent():
            w("raise _decode_error(e, _PATHS, _f, _p) from None")
        return "\n".join(w.lines)

    @staticmethod
    def uuid_from_bytes(var: str, nullable: bool) -> str:
        """Turns the 16 bytes in ``var`` into a UUID, looking in the cache inline first."""
        if nullable:
            return f"{var} = _uuid_or_none({var})"
        return f"{var} = _uuid_cached({var}) or _uuid({var})"

    def at(self, w: _Writer, path: str) -> None:
        """Notes the field being read, for errors; the fast variant leaves that to its fallback."""
        if not self.fast:
            w(f"_f = {self.track(path)}; _p = pos")

    def check(self, w: _Writer, n: str) -> None:
        # The fast variant reads on: struct and indexing raise past the buffer's end, and
        # its last test catches a read past ``end``.
        if not self.fast:
            w(f"if pos + {n} > end: raise _Truncated({n}, end - pos)")

    def check_byte(self, w: _Writer) -> None:
        if not self.fast:
            w("if pos >= end: raise _Truncated(1, 0)")

    def read_uvarint(self, w: _Writer, var: str) -> None:
        self.check_byte(w)
        w(f"{var} = buf[pos]")
        w(f"if {var} < 128: pos += 1")
        w(f"else: {var}, pos = _read_uvarint(buf, pos)")

    def read_length(self, w: _Writer, var: str, width: str) -> None:
        """A length or count: compact (uvarint N+1) in flexible versions, else fixed width."""
        if self.flexible:
            self.check_byte(w)
            w(f"{var} = buf[pos] - 1")
            w(f"if {var} < 127: pos += 1")  # a one-byte uvarint
            w(f"else: {var}, pos = _read_uvarint(buf, pos); {var} -= 1")
        else:
            fmt = {"int16": "h", "int32": "i"}[width]
            size = _FIXED_SIZE[fmt]
            self.check(w, str(size))
            w(f"{var} = {self.const(_struct.Struct('>' + fmt).unpack_from, 'U')}(buf, pos)[0]")
            w(f"pos += {size}")
            w(f"if {var} < -1: raise _Invalid('negative length ' + str({var}))")

    def dec_struct(self, w: _Writer, struct: StructSpec, path: str) -> str:
        cls = self.classes.struct_class(struct)
        values: list[str] = []
        fields = struct.fields
        pending: list[tuple[FieldSpec, str]] = []  # a run of fixed-width fields

        def flush() -> None:
            if not pending:
                return
            fmt = ">" + "".join(_FIXED[f.type.name] for f, _ in pending)
            size = _struct.calcsize(fmt)
            self.at(w, _join(path, pending[0][0].name))
            self.check(w, str(size))
            names = ", ".join(v for _, v in pending)
            w(f"{names}{',' if len(pending) == 1 else ''} = {self.const(_struct.Struct(fmt).unpack_from, 'U')}(buf, pos)")
            w(f"pos += {size}")
            for f, v in pending:
                if f.type.name == "uuid":
                    w(self.uuid_from_bytes(v, self.nullable(f)))
            pending.clear()

        for f in fields:
            var = self.tmp()
            values.append(var)
            if not self.present(f) or self.tagged(f):
                if not self.fast:  # the checked decoder names each run by its first field
                    flush()
                w(f"{var} = {self.default_expr(f)}")
                continue
            if not f.type.is_array and not f.type.is_struct and f.type.name in _FIXED:
                pending.append((f, var))
                continue
            flush()
            self.at(w, _join(path, f.name))
            self.dec_value(w, f, var, _join(path, f.name))
        flush()
        unknown = "()"
        if self.flexible:
            unknown = self.dec_tagged_section(w, struct, path, dict(zip((f.name for f in fields), values)))
        args = ", ".join(values + ([unknown] if self.classes.flexible else []))
        out = self.tmp("s")
        w(f"{out} = {self.const(cls, 'K')}({args})")
        return out

    def dec_tagged_section(self, w: _Writer, struct: StructSpec, path: str, variables: dict[str, str]) -> str:
        count, tag, size, unknown, stop, saved = (self.tmp(p) for p in ("nt", "tg", "sz", "uk", "te", "se"))
        self.at(w, _join(path, '(tagged fields)'))
        if self.fast:  # mostly none: one test
            w(f"{unknown} = ()")
            w("if buf[pos] == 0: pos += 1")
            w("else:")
            w.depth += 1
        self.read_uvarint(w, count)
        if not self.fast:
            w(f"{unknown} = ()")
        w(f"if {count}:")
        w.depth += 1
        w(f"for _ in range({count}):")
        with w.indent():
            if self.fast:  # tag and size mostly one byte each: read together
                w(f"{tag} = buf[pos]; {size} = buf[pos + 1]")
                w(f"if {tag} < 128 and {size} < 128: pos += 2")
                w("else:")
                with w.indent():
                    w(f"{tag}, pos = _read_uvarint(buf, pos)")
                    w(f"{size}, pos = _read_uvarint(buf, pos)")
            else:
                w("_p = pos")
                self.read_uvarint(w, tag)
                self.read_uvarint(w, size)
            self.check(w, size)
            w(f"{stop} = pos + {size}")
            first = True
            for f in sorted((f for f in struct.fields if self.tagged(f)), key=lambda f: f.tag or 0):
                w(f"{'if' if first else 'elif'} {tag} == {f.tag}:")
                first = False
                with w.indent():
                    if self.fast:  # reads past the field's end fail the size test, or the last one
                        self.dec_value(w, f, variables[f.name], _join(path, f.name))
                        w(f"if pos != {stop}: raise _Invalid('tagged field size')")
                        continue
                    self.at(w, _join(path, f.name))
                    w(f"{saved} = end; end = {stop}")
                    self.dec_value(w, f, variables[f.name], _join(path, f.name))
                    w(f"if pos != end: raise _Invalid('tagged field size ' + str({size}) + ' does not match its value')")
                    w(f"end = {saved}")
            if first:
                w("if True:")
            else:
                w("else:")
            with w.indent():
                w(f"{unknown} += (({tag}, bytes(buf[pos:{stop}])),)")
                w(f"pos = {stop}")
        w.depth -= 2 if self.fast else 1
        return unknown

    @contextmanager
    def lengths_of(self, f: FieldSpec) -> Iterator[None]:
        """Compact or fixed lengths as the field's own flexibleVersions says, if it has one."""
        saved = self.flexible
        if f.flexible_versions is not None:
            self.flexible = self.version in f.flexible_versions
        try:
            yield
        finally:
            self.flexible = saved

    def dec_value(self, w: _Writer, f: FieldSpec, var: str, path: str) -> None:
        with self.lengths_of(f):
            self._dec_value(w, f, var, path)

    def enc_value(self, w: _Writer, f: FieldSpec, expr: str, path: str) -> None:
        with self.lengths_of(f):
            self._enc_value(w, f, expr, path)

    def _dec_value(self, w: _Writer, f: FieldSpec, var: str, path: str) -> None:
        t = f.type
        nullable = self.nullable(f)
        if self.fast and self.flexible and t.is_array and not t.is_struct and t.name in _FIXED:
            self.fast_compact_array(w, t.name, var, nullable)
            return
        if t.is_array:
            n = self.tmp("n")
            self.read_length(w, n, "int32")
            w(f"if {n} < 0:")
            with w.indent():
                w(f"{var} = None" if nullable else "raise _Invalid('non-nullable array was null')")
            w("else:")
            with w.indent():
                too_many = f"raise _Invalid('array of ' + str({n}) + ' elements, but only ' + str(end - pos) + ' bytes remain')"
                if not t.is_struct and t.name in _FIXED and self.fast:
                    # An empty array costs no call; more than _ARRAY_TABLE - 1 elements raise
                    # IndexError, for the checked decoder.
                    code = _FIXED[t.name]
                    table = self.const(_array_table("unpack", code), "A")
                    if code == "16s":
                        raw = self.tmp("r")
                        w(f"{raw} = {table}[{n}](buf, pos)")
                        w(f"{var} = tuple(map(_uuid_cached, {raw}))")
                        w(f"if not all({var}): {var} = tuple(map(_uuid, {raw}))")
                    else:
                        w(f"{var} = {table}[{n}](buf, pos) if {n} else ()")
                    w(f"pos += {_FIXED_SIZE[code]} * {n}")
                elif not t.is_struct and t.name in _FIXED:
                    code = _FIXED[t.name]
                    size = _FIXED_SIZE[code]
                    stop = self.tmp("e")
                    w(f"{stop} = pos + {size} * {n}")
                    w(f"if {stop} > end:")  # one test when the array fits; else the precise error
                    with w.indent():
                        w(f"if {n} > end - pos: {too_many}")
                        w(f"raise _Truncated({size} * {n}, end - pos)")
                    table = self.const(_array_table("unpack", code), "A")
                    unpack = f"({table}[{n}] if {n} < {_ARRAY_TABLE} else _unpack_array('{code}', {n}))(buf, pos)"
                    if code == "16s":
                        raw = self.tmp("r")
                        w(f"{raw} = {unpack}")
                        w(f"{var} = tuple(map(_uuid_cached, {raw}))")
                        w(f"if not all({var}): {var} = tuple(map(_uuid, {raw}))")
                    else:
                        w(f"{var} = {unpack}")
                    w(f"pos = {stop}")
                else:
                    w(f"if {n} > end - pos: {too_many}")
                    items = self.tmp("a")
                    w(f"{items} = []")
                    w(f"for _ in range({n}):")
                    with w.indent():
                        item = self.tmp()
                        self.dec_single(w, f, item, path + "[]", nullable_elem=False)
                        w(f"{items}.append({item})")
                    w(f"{var} = tuple({items})")
            return
        self.dec_single(w, f, var, path, nullable_elem=nullable)

    def dec_single(self, w: _Writer, f: FieldSpec, var: str, path: str, nullable_elem: bool) -> None:
        t = f.type
        if t.is_struct:
            if nullable_elem:
                self.check(w, "1")
                w("if buf[pos] >= 128:")  # Kafka reads any negative presence byte as null
                with w.indent():
                    w(f"{var} = None; pos += 1")
                w("else:")
                with w.indent():
                    w("pos += 1")
                    result = self.dec_struct(w, f.struct, path)  # type: ignore[arg-type]
                    w(f"{var} = {result}")
            else:
                result = self.dec_struct(w, f.struct, path)  # type: ignore[arg-type]
                w(f"{var} = {result}")
            return
        if t.name in _FIXED:
            code = _FIXED[t.name]
            size = _FIXED_SIZE[code]
            self.check(w, str(size))
            w(f"{var} = {self.const(_struct.Struct('>' + code).unpack_from, 'U')}(buf, pos)[0]")
            w(f"pos += {size}")
            if t.name == "uuid":
                w(self.uuid_from_bytes(var, nullable_elem))
            return
        n = self.tmp("n")
        if self.fast and self.flexible:
            # One byte of compact length (1 to 127: N + 1) read once; else the general form.
            w(f"{n} = buf[pos]")
            w(f"if 0 < {n} < 128:")
            with w.indent():
                if t.name == "string":
                    w(f"{var} = str(buf[pos + 1:pos + {n}], 'utf-8')")
                else:
                    w(f"{var} = bytes(buf[pos + 1:pos + {n}])")
                w(f"pos += {n}")
            w("else:")
            w.depth += 1
        self.read_length(w, n, "int16" if t.name == "string" else "int32")
        w(f"if {n} < 0:")
        with w.indent():
            w(f"{var} = None" if nullable_elem else "raise _Invalid('non-nullable field was null')")
        w("else:")
        with w.indent():
            self.check(w, n)
            if t.name == "string":
                w(f"{var} = str(buf[pos:pos + {n}], 'utf-8')")
            else:
                w(f"{var} = bytes(buf[pos:pos + {n}])")
            w(f"pos += {n}")
        if self.fast and self.flexible:
            w.depth -= 1

    def fast_compact_array(self, w: _Writer, name: str, var: str, nullable: bool) -> None:
        """An array of fixed-width values after a one-byte compact length (N + 1 from 1 to
        127): the table is indexed by that byte. A null, a longer varint or too many elements
        for the table go to the checked decoder (nullable null: None)."""
        code = _FIXED[name]
        size = _FIXED_SIZE[code]
        table = self.const(_array_table("unpack_by_byte", code), "B")
        b = self.tmp("n")
        w(f"{b} = buf[pos]")
        w(f"if {b} == 1: {var} = (); pos += 1")
        w(f"elif {b}:")
        with w.indent():
            if code == "16s":
                raw = self.tmp("r")
                w(f"{raw} = buf[pos + 1:pos + 16 * {b} - 15]")
                w(f"{var} = _uuid_tuples({raw}) or _uuid_tuple({raw}, {b} - 1)")
            else:
                w(f"{var} = {table}[{b}](buf, pos + 1)")
            w(f"pos += {size} * {b} - {size - 1}")
        w("else:")
        with w.indent():
            w(f"{var} = None; pos += 1" if nullable else "raise _Invalid('non-nullable array was null')")

    # -- encode ---------------------------------------------------------------------------

    def encode_source(self) -> str:
        w = _Writer()
        w.depth = 0
        w("def encode(o):")
        w.depth = 1
        w("_f = -1")
        w("parts = []")
        w("ap = parts.append")
        w("try:")
        with w.indent():
            self.enc_struct(w, self.spec.struct, "o", "")
            w("return b''.join(parts)")
        w("except Exception as e:")
        with w.indent():
            w("raise _encode_error(e, _PATHS, _f) from None")
        return "\n".join(w.lines)

    def write_length(self, w: _Writer, expr: str, width: str) -> None:
        if self.flexible:
            w(f"ap(_uvb({expr} + 1))")
        else:
            fmt = {"int16": ">h", "int32": ">i"}[width]
            w(f"ap({self.const(_struct.Struct(fmt).pack, 'P')}({expr}))")

    def enc_struct(self, w: _Writer, struct: StructSpec, obj: str, path: str) -> None:
        pending: list[tuple[FieldSpec, str]] = []

        def flush() -> None:
            if not pending:
                return
            fmt = ">" + "".join(_FIXED[f.type.name] for f, _ in pending)
            args = []
            for f, expr in pending:
                if f.type.name == "uuid":
                    # Converted before the run is packed, under its own field name.
                    raw = self.tmp("u")
                    w(f"_f = {self.track(_join(path, f.name))}; {raw} = {expr}")
                    if self.nullable(f):
                        w(f"{raw} = _uuid_bytes({raw})")
                    else:
                        w(f"if {raw} is None: raise _Invalid('non-nullable field was null')")
                        w(f"{raw} = {raw}.int.to_bytes(16, 'big')")
                    args.append(raw)
                else:
                    args.append(expr)
            w(f"_f = {self.track(_join(path, pending[0][0].name))}")
            w(f"ap({self.const(_struct.Struct(fmt).pack, 'P')}({', '.join(args)}))")
            pending.clear()

        for f in struct.fields:
            expr = f"{obj}.{f.attr}"
            if not self.present(f):
                if not f.ignorable:
                    flush()
                    w(f"_f = {self.track(_join(path, f.name))}")
                    w(f"if {expr} != {self.default_expr(f)}: raise _Unsupported({f.name!r}, {self.version})")
                continue
            if self.tagged(f):
                continue
            if not f.type.is_array and not f.type.is_struct and f.type.name in _FIXED:
                pending.append((f, expr))
                continue
            flush()
            w(f"_f = {self.track(_join(path, f.name))}")
            self.enc_value(w, f, expr, _join(path, f.name))
        flush()
        if self.flexible:
            self.enc_tagged_section(w, struct, obj, path)

    def enc_tagged_section(self, w: _Writer, struct: StructSpec, obj: str, path: str) -> None:
        tagged = sorted((f for f in struct.fields if self.tagged(f)), key=lambda f: f.tag or 0)
        unknown = f"{obj}.{UNKNOWN_TAGGED_FIELDS}"
        if not tagged:
            w(f"_f = {self.track(_join(path, '(tagged fields)'))}")
            w(f"if {unknown}:")
            with w.indent():
                w(f"ap(_uvb(len({unknown})))")
                w(f"for tg, data in sorted({unknown}):")
                with w.indent():
                    w("ap(_uvb(tg)); ap(_uvb(len(data))); ap(data)")
            w("else:")
            with w.indent():
                w("ap(b'\\x00')")
            return
        entries = self.tmp("te")
        w(f"{entries} = []")
        for f in tagged:
            expr = f"{obj}.{f.attr}"
            w(f"_f = {self.track(_join(path, f.name))}")
            w(f"if {expr} != {self.default_expr(f)}:")
            with w.indent():
                saved_parts = self.tmp("sp")
                w(f"{saved_parts} = parts, ap")
                w("parts = []; ap = parts.append")
                self.enc_value(w, f, expr, _join(path, f.name))
                w(f"{entries}.append(({f.tag}, b''.join(parts)))")
                w(f"parts, ap = {saved_parts}")
        w(f"_f = {self.track(_join(path, '(tagged fields)'))}")
        w(f"if {unknown}:")
        with w.indent():
            w(f"{entries}.extend({unknown})")
            w(f"{entries}.sort()")
            w(f"if len({{t for t, _ in {entries}}}) != len({entries}): raise _Invalid('an unknown tag repeats a known or unknown tag')")
        w(f"if {entries}:")
        with w.indent():
            w(f"ap(_uvb(len({entries})))")
            w(f"for tg, data in {entries}:")
            with w.indent():
                w("ap(_uvb(tg)); ap(_uvb(len(data))); ap(data)")
        w("else:")
        with w.indent():
            w("ap(b'\\x00')")

    def _enc_value(self, w: _Writer, f: FieldSpec, expr: str, path: str) -> None:
        t = f.type
        nullable = self.nullable(f)
        if t.is_array:
            val = self.tmp()
            w(f"{val} = {expr}")
            w(f"if {val} is None:")
            with w.indent():
                if nullable:
                    w("ap(b'\\x00')" if self.flexible else "ap(b'\\xff\\xff\\xff\\xff')")
                else:
                    w("raise _Invalid('non-nullable array was null')")
            w("else:")
            with w.indent():
                if not t.is_struct and t.name in _FIXED and t.name != "uuid":
                    # Length and elements in one precompiled pack.
                    code = _FIXED[t.name]
                    n = self.tmp("n")
                    w(f"{n} = len({val})")
                    if self.flexible:
                        table, limit = self.const(_array_table("pack_compact", code), "A"), _ARRAY_TABLE - 1
                        w(f"if {n} < {limit}: ap({table}[{n}]({n} + 1, *{val}))")
                    else:
                        table, limit = self.const(_array_table("pack", code), "A"), _ARRAY_TABLE
                        w(f"if {n} < {limit}: ap({table}[{n}]({n}, *{val}))")
                    w("else:")
                    with w.indent():
                        self.write_length(w, n, "int32")
                        w(f"ap(_pack_array('{code}', {n})(*{val}))")
                    return
                self.write_length(w, f"len({val})", "int32")
                if t.name == "uuid":
                    item = self.tmp("e")
                    w(f"for {item} in {val}:")
                    with w.indent():
                        w(f"if {item} is None: raise _Invalid('non-nullable field was null')")
                        w(f"ap({item}.int.to_bytes(16, 'big'))")
                else:
                    item = self.tmp("e")
                    w(f"for {item} in {val}:")
                    with w.indent():
                        self.enc_single(w, f, item, path + "[]", nullable_elem=False)
            return
        self.enc_single(w, f, expr, path, nullable_elem=nullable)

    def enc_single(self, w: _Writer, f: FieldSpec, expr: str, path: str, nullable_elem: bool) -> None:
        t = f.type
        if t.is_struct:
            val = self.tmp()
            w(f"{val} = {expr}")
            if nullable_elem:
                w(f"if {val} is None:")
                with w.indent():
                    w("ap(b'\\xff')")
                w("else:")
                with w.indent():
                    w("ap(b'\\x01')")
                    self.enc_struct(w, f.struct, val, path)  # type: ignore[arg-type]
            else:
                w(f"if {val} is None: raise _Invalid('non-nullable struct was null')")
                self.enc_struct(w, f.struct, val, path)  # type: ignore[arg-type]
            return
        if t.name in _FIXED:
            code = _FIXED[t.name]
            if t.name == "uuid":
                if nullable_elem:
                    w(f"ap(_uuid_bytes({expr}))")
                else:
                    w(f"if {expr} is None: raise _Invalid('non-nullable field was null')")
                    w(f"ap({expr}.int.to_bytes(16, 'big'))")
            else:
                w(f"ap({self.const(_struct.Struct('>' + code).pack, 'P')}({expr}))")
            return
        val = self.tmp()
        w(f"{val} = {expr}")
        w(f"if {val} is None:")
        with w.indent():
            if nullable_elem:
                if self.flexible:
                    w("ap(b'\\x00')")
                else:
                    w("ap(b'\\xff\\xff')" if t.name == "string" else "ap(b'\\xff\\xff\\xff\\xff')")
            else:
                w("raise _Invalid('non-nullable field was null')")
        w("else:")
        with w.indent():
            if t.name == "string":
                data = self.tmp("b")
                w(f"{data} = {val}.encode('utf-8')")
                if not self.flexible:
                    w(f"if len({data}) > 32767: raise _Invalid('string of ' + str(len({data})) + ' bytes is longer than 32767')")
                self.write_length(w, f"len({data})", "int16")
                w(f"ap({data})")
            else:
                w(f"if not isinstance({val}, (bytes, bytearray, memoryview)): raise _Invalid('expected bytes, got ' + type({val}).__name__)")
                self.write_length(w, f"len({val})", "int32")
                w(f"ap(bytes({val}))")

    # -- fast encode ----------------------------------------------------------------------

    def fast_encode_source(self, prefix: bytes = b"", sample: Any = None) -> str | None:
        """One ``struct`` pack for the whole message, chosen by its shape (see ``_Shapes``),
        after ``prefix`` (a record's frame header).

        With ``sample``, a value of the message, its shape when it has no tagged field to
        write and no string (see ``hot_shape``) is tested first, by its lengths alone, and
        packed by a precompiled call with its arrays' elements unpacked by name: no shape
        lookup, no argument list built at run time.

        For versions whose fields are primitives and arrays of fixed-width ones; None for the
        others (structs, arrays of strings). Anything the shape cannot say (an unknown tagged
        field, a length that needs a multi-byte varint, a wrong value) goes to the general
        encoder, ``_general``.
        """
        struct = self.spec.struct
        if any(f.type.is_struct or f.type.is_array and f.type.name not in _FIXED for f in struct.fields if self.present(f)):
            return None
        w = _Writer()
        w.depth = 0
        w("def encode(o):")
        w.depth = 1
        w("try:")
        w.depth += 1
        slow = [f"o.{UNKNOWN_TAGGED_FIELDS}"] if self.flexible else []  # tests for the general encoder
        body: list[tuple[str, str, str]] = []  # pieces for _Shapes
        keys: list[str] = []
        args: list[str] = []
        if prefix:
            body.append(("fixed", f"{len(prefix)}s", ""))
            args.append(self.const(prefix, "H"))
        tagged: list[FieldSpec] = []
        late: list[str] = []  # what only the shape lookup needs (a UUID array's bytes joined)
        arrays: list[tuple[str, str]] = []  # (value variable, length variable) of the body's arrays
        for f in struct.fields:
            expr = f"o.{f.attr}"
            if not self.present(f):
                if not f.ignorable:
                    default = self.classes.field_default(f)
                    slow.append(f"{expr} is not None" if default is None else expr if default == () else f"{expr} != {self.default_expr(f)}")
                continue
            if self.tagged(f):
                tagged.append(f)
                continue
            with self.lengths_of(f):
                piece, key, field_args = self.fast_field(w, f, expr, late)
            body.append(piece)
            if key is not None:
                keys.append(key)
                if piece[0] == "arr":
                    arrays.append((self.array_var, key))
            args.extend(field_args)
        if slow:
            w(f"if {' or '.join(slow)}: raise _Slow")
        tagged.sort(key=lambda f: f.tag or 0)
        tagged_pieces: list[tuple[int, tuple[str, str, str]]] | None = [] if self.flexible else None
        hot = self.hot_shape(sample, body, keys, arrays, tagged)
        tail = [] if not self.flexible else ["0"]
        if not self.flexible or not tagged:
            self.hot_pack(w, hot, body, keys, args + tail, arrays)
            for line in late:
                w(line)
            self.fast_pack(w, body, keys, args + tail)
        else:
            presence = []
            for bit, f in enumerate(tagged):
                x = self.tmp("x")
                w(f"{x} = o.{f.attr}")
                default = self.classes.field_default(f)
                if default is None:
                    presence.append((bit, f, x, f"{x} is not None", f"{x} is None"))
                else:
                    d = self.default_expr(f)
                    presence.append((bit, f, x, f"{x} != {d}", f"{x} == {d}"))
            w(f"if {' and '.join(p[4] for p in presence)}:")  # no tagged field to write
            with w.indent():
                self.hot_pack(w, hot, body, keys, args + tail, arrays)
                for line in late:
                    w(line)
                self.fast_pack(w, body, keys, args + tail)
            w("else:")
            with w.indent():
                for line in late:
                    w(line)
                w("t = 0")
                for bit, _, _, test, _ in presence:
                    w(f"if {test}: t |= {1 << bit}")
                w(f"a = [{', '.join(args + ['t.bit_count()'])}]")
                w(f"tl = [{', '.join(keys + ['t'])}]")
                for bit, f, x, _, _ in presence:
                    w(f"if t & {1 << bit}:")
                    with w.indent():
                        piece, key, field_args = self.fast_field(w, f, x)
                        size = {"fixed": str(_struct.calcsize(">" + piece[1])), "arr": f"{_FIXED_SIZE.get(piece[1], 0)} * {key} + 1 if {key} > 0 else 1", "str": f"{key} + 1 if {key} > 0 else 1"}[piece[0]]
                        stars = [a for a in field_args if a.startswith("*")]
                        plain = [a for a in field_args if not a.startswith("*")]
                        w(f"a += ({f.tag}, {size}, {', '.join(plain)},)")
                        for s in stars:
                            w(f"a += {s[1:]}")
                        if key is not None:
                            w(f"tl.append({key})")
                    tagged_pieces.append((f.tag or 0, piece))  # type: ignore[union-attr]
                w("k = tuple(tl)")
                w("p = _SH.get(k)")
                w("if p is None: p = _shape(k)")
                w("if p: return p(*a)")
        self.consts["_shape"] = shapes = _Shapes(body, tagged_pieces, len(keys))
        self.consts["_SH"] = shapes.cache
        w.depth -= 1
        w("except Exception:")
        with w.indent():
            w("pass")
        w(f"return {self.const(prefix, 'H')} + _general(o)" if prefix else "return _general(o)")
        return "\n".join(w.lines)

    def hot_shape(
        self, sample: Any, body: list[tuple[str, str, str]], keys: list[str], arrays: list[tuple[str, str]], tagged: list[FieldSpec]
    ) -> tuple[int, ...] | None:
        """The lengths of ``sample``'s body arrays (-1: null), when a hot path can pack it:
        no string nor bytes in the body (their lengths vary from value to value), no tagged
        field to write, arrays of at most _HOT_MAX elements."""
        if sample is None or len(arrays) != len(keys):
            return None
        try:
            if self.flexible and getattr(sample, UNKNOWN_TAGGED_FIELDS):
                return None
            if any(getattr(sample, f.attr) != self.classes.field_default(f) for f in tagged):
                return None
            shape = []
            for f in self.spec.struct.fields:
                if self.present(f) and not self.tagged(f) and f.type.is_array:
                    value = getattr(sample, f.attr)
                    shape.append(-1 if value is None else len(value))
        except Exception:  # a value the general encoder will refuse: no hot path
            return None
        if len(shape) != len(arrays) or max(shape, default=0) > _HOT_MAX:
            return None
        if _Shapes(body, [] if self.flexible else None, len(keys)).format(tuple(shape)) is None:
            return None
        return tuple(shape)

    def hot_pack(
        self, w: _Writer, hot: tuple[int, ...] | None, body: list[tuple[str, str, str]], keys: list[str], args: list[str],
        arrays: list[tuple[str, str]],
    ) -> None:
        """The hot shape's test and pack (see ``fast_encode_source``): the same bytes as the
        shape lookup's pack, a UUID array's elements as separate 16-byte arguments."""
        if hot is None or not keys:
            return
        fmt = [">"]
        hot_args: list[str] = []
        lengths = iter(hot)
        tests, unpacks = [], []
        it = iter(args)
        for piece in body:
            kind, code, length = piece
            if kind == "fixed":
                fmt.append(code)
                hot_args.append(next(it))
                continue
            n = next(lengths)
            count, _ = next(it), next(it)
            v, nv = arrays[len(tests)]
            tests.append(f"{nv} == {n}")
            hot_args.append(str(n + 1 if length == "B" else n))
            fmt.append(length + (code * n if code == "16s" else f"{n}{code}" if n > 0 else ""))
            if n > 0:
                names = [self.tmp("e") for _ in range(n)]
                unpacks.append(f"{', '.join(names)}, = {v}")
                hot_args.extend(f"{e}.int.to_bytes(16)" if code == "16s" else e for e in names)
        hot_args.extend(it)  # the empty tagged section's 0
        if self.flexible:
            fmt.append("B")
        w(f"if {' and '.join(tests)}:")
        with w.indent():
            for line in unpacks:
                w(line)
            w(f"return {self.const(_struct.Struct(''.join(fmt)).pack, 'P')}({', '.join(hot_args)})")

    def fast_pack(self, w: _Writer, body: list[tuple[str, str, str]], keys: list[str], args: list[str]) -> None:
        """The pack call of a value with no tagged field: precompiled when no length varies,
        else looked up by shape."""
        if not keys:
            fmt = _Shapes(body, [] if self.flexible else None, 0).format(())
            assert fmt is not None
            w(f"return {self.const(_struct.Struct(fmt).pack, 'P')}({', '.join(args)})")
            return
        w(f"k = ({''.join(k + ', ' for k in keys)})")
        w("p = _SH.get(k)")
        w("if p is None: p = _shape(k)")
        w(f"if p: return p({', '.join(args)})")

    def fast_field(
        self, w: _Writer, f: FieldSpec, expr: str, late: list[str] | None = None
    ) -> tuple[tuple[str, str, str], str | None, list[str]]:
        """Emits what a field needs before the pack; returns its piece, its shape variable
        (None when its size is fixed) and its pack arguments. An array's value variable is
        left in ``array_var``; with ``late``, a UUID array's joined bytes are computed there,
        for the shape lookup only."""
        t = f.type
        nullable = self.nullable(f)
        length = "B" if self.flexible else ("h" if t.name == "string" else "i")
        if not t.is_array and t.name in _FIXED:
            if t.name == "uuid":
                return ("fixed", "16s", ""), None, [f"_uuid_bytes({expr})" if nullable else f"{expr}.int.to_bytes(16)"]
            return ("fixed", _FIXED[t.name], ""), None, [expr]
        v, n = self.tmp(), self.tmp("n")
        w(f"{v} = {expr}")
        count = f"{n} + 1" if self.flexible else n
        if t.is_array:
            length = "B" if self.flexible else "i"
            empty, measure = "()", f"{n} = len({v})"
            piece = ("arr", _FIXED[t.name], length)
            if t.name == "uuid":
                # The UUIDs' bytes as one argument, unrolled up to 3 (to_bytes refuses what is
                # not a UUID's int, as the general encoder does).
                raw = self.tmp("u")
                if nullable:
                    w(f"if {v} is None: {n} = -1; {v} = ()")
                    w(f"else: {measure}")
                else:
                    w(measure)
                join = w if late is None else late.append
                join(f"if {n} <= 0: {raw} = b''")
                join(f"elif {n} == 1: {raw} = {v}[0].int.to_bytes(16)")
                join(f"elif {n} == 2: {raw} = {v}[0].int.to_bytes(16) + {v}[1].int.to_bytes(16)")
                join(f"elif {n} == 3: {raw} = {v}[0].int.to_bytes(16) + {v}[1].int.to_bytes(16) + {v}[2].int.to_bytes(16)")
                join(f"else: {raw} = b''.join([e.int.to_bytes(16) for e in {v}])")
                self.array_var = v
                return piece, n, [count, raw]
            result = [count, f"*{v}"]
            self.array_var = v
        elif t.name == "string":
            raw = self.tmp("b")
            empty, measure = "b''", f"{raw} = {v}.encode('utf-8'); {n} = len({raw})"
            piece, result = ("str", "s", length), [count, raw]
            if nullable:
                w(f"if {v} is None: {n} = -1; {raw} = b''")
                w(f"else: {measure}")
            else:
                w(measure)
            return piece, n, result
        else:  # bytes, records: other bytes-like values take the general path, which copies them
            empty, measure = "b''", f"{n} = len({v})"
            w(f"if type({v}) is not bytes and {v} is not None: raise _Slow")
            piece, result = ("str", "s", length), [count, v]
        if nullable:
            w(f"if {v} is None: {n} = -1; {v} = {empty}")
            w(f"else: {measure}")
        else:
            w(measure)
        return piece, n, result


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _decode_error(e: Exception, paths: list[str], f: int, p: int) -> CodecError:
    field = paths[f] if f >= 0 else None
    if isinstance(e, _Truncated):
        return CodecError(f"truncated: needs {e.needed} more bytes, {e.remaining} remain", field=field, position=p)
    if isinstance(e, VarintError):
        return CodecError(str(e).rsplit(" at byte", 1)[0], field=field, position=e.position)
    if isinstance(e, UnicodeDecodeError):
        return CodecError(f"invalid UTF-8 in string: {e.reason}", field=field, position=p)
    if isinstance(e, _Invalid):
        return CodecError(str(e), field=field, position=p)
    if isinstance(e, (_struct.error, IndexError)):
        return CodecError(f"truncated: {e}", field=field, position=p)
    return CodecError(f"{type(e).__name__}: {e}", field=field, position=p)


def _encode_error(e: Exception, paths: list[str], f: int) -> CodecError:
    field = paths[f] if f >= 0 else None
    if isinstance(e, CodecError):
        return type(e)(e.detail, field=e.field or field)
    if isinstance(e, _Invalid):
        return CodecError(str(e), field=field)
    if isinstance(e, _struct.error):
        return CodecError(f"value out of range for its type ({e})", field=field)
    if isinstance(e, AttributeError):
        return CodecError(f"wrong value type: {e}", field=field)
    if isinstance(e, TypeError):
        return CodecError(f"wrong value type: {e}", field=field)
    return CodecError(f"{type(e).__name__}: {e}", field=field)


class _UnsupportedFactory:
    def __call__(self, name: str, version: int) -> UnsupportedVersionError:
        return UnsupportedVersionError(f"the field is not supported in version {version} and has a non-default value")


_BASE_NAMESPACE: dict[str, Any] = {
    "_Truncated": _Truncated,
    "_Invalid": _Invalid,
    "_Unsupported": _UnsupportedFactory(),
    "_read_uvarint": read_uvarint,
    "_uvb": _uvb,
    "_uuid": _uuid,
    "_uuid_cached": _UUID_CACHE.get,
    "_uuid_tuples": _UUID_TUPLES.get,
    "_uuid_tuple": _uuid_tuple,
    "_unpack_array": _unpack_array,
    "_pack_array": _pack_array,
    "_uuid_or_none": _uuid_or_none,
    "_uuid_bytes": _uuid_bytes,
    "_new_tuple": tuple.__new__,
    "_Slow": _Slow,
    "_decode_error": _decode_error,
    "_encode_error": _encode_error,
}


class VersionCodec:
    """The compiled decode and encode functions of one message version.

    ``decode_at`` is the fast decoder, which hands anything it cannot read to
    ``decode_checked`` (the same result, or the error naming field and byte).
    """

    __slots__ = (
        "version", "decode_at", "decode_checked", "encode", "encode_general",
        "decode_source", "fast_decode_source", "encode_source", "fast_encode_source", "_make",
    )

    def __init__(self, spec: MessageSpec, version: int, classes: MessageClasses) -> None:
        self._make = (spec, version, classes)
        self.version = version
        dec = _VersionCodegen(spec, version, classes)
        self.decode_source = dec.decode_source()
        self.decode_checked: Callable[[Any, int, int], tuple[Any, int]] = _compile(
            self.decode_source, "decode", dec, f"<decode {spec.name} v{version}>"
        )
        fast = _VersionCodegen(spec, version, classes)
        self.fast_decode_source = fast.fast_decode_source()
        fast.consts["_checked"] = self.decode_checked
        self.decode_at: Callable[[Any, int, int], tuple[Any, int]] = _compile(
            self.fast_decode_source, "decode", fast, f"<fast decode {spec.name} v{version}>"
        )
        enc = _VersionCodegen(spec, version, classes)
        self.encode_source = enc.encode_source()
        self.encode_general: Callable[[Any], bytes] = _compile(
            self.encode_source, "encode", enc, f"<encode {spec.name} v{version}>"
        )
        fast = _VersionCodegen(spec, version, classes)
        self.fast_encode_source = fast.fast_encode_source()
        self.encode: Callable[[Any], bytes] = self.encode_general
        if self.fast_encode_source is not None:
            fast.consts["_general"] = self.encode_general
            self.encode = _compile(self.fast_encode_source, "encode", fast, f"<fast encode {spec.name} v{version}>")


    def record_encoder(self, prefix: bytes, sample: Any = None) -> Callable[[Any], bytes]:
        """``prefix`` (a frame header) and the encoded value, in one pack when it can;
        ``sample``'s shape first (see ``_VersionCodegen.fast_encode_source``)."""
        spec, version, classes = self._make
        gen = _VersionCodegen(spec, version, classes)
        source = gen.fast_encode_source(prefix, sample)
        if source is None:
            general = self.encode_general
            return lambda value: prefix + general(value)
        gen.consts["_general"] = self.encode_general
        return _compile(source, "encode", gen, f"<record encode {spec.name} v{version}>")

    def record_decoder(self, start: int, cls: type[tuple[Any, ...]], extra: tuple[int, ...]) -> Callable[[bytes], Any]:
        """A fast decoder of whole records: the body from byte ``start`` to the end, returned
        as ``cls((value, *extra))`` (a NamedTuple), or None when the checked path is needed."""
        spec, version, classes = self._make
        gen = _VersionCodegen(spec, version, classes)
        source = gen.fast_decode_source((start, extra))
        gen.consts["_R"] = cls
        return _compile(source, "decode", gen, f"<record decode {spec.name} v{version}>")


def _compile(source: str, name: str, gen: _VersionCodegen, filename: str) -> Callable[..., Any]:
    namespace = dict(_BASE_NAMESPACE)
    namespace.update(gen.consts)
    namespace["_PATHS"] = gen.paths
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


class MessageCodec:
    """Encode and decode every valid version of one message."""

    def __init__(self, spec: MessageSpec, classes: MessageClasses | None = None) -> None:
        self.spec = spec
        self.classes = classes or MessageClasses(spec)
        self.cls = self.classes.root
        self._versions: dict[int, VersionCodec] = {}

    def version_codec(self, version: int) -> VersionCodec:
        codec = self._versions.get(version)
        if codec is None:
            if version not in self.spec.valid_versions:
                raise UnsupportedVersionError(
                    f"{self.spec.name} has no version {version} (valid: {self.spec.valid_versions})"
                )
            codec = self._versions[version] = VersionCodec(self.spec, version, self.classes)
        return codec

    def encode(self, value: msgspec.Struct, version: int) -> bytes:
        if type(value) is not self.cls:
            raise CodecError(f"expected a {self.spec.name}, got {type(value).__name__}")
        return (self._versions.get(version) or self.version_codec(version)).encode(value)

    def decode(self, data: bytes | bytearray | memoryview, version: int) -> msgspec.Struct:
        """Decodes exactly one message: truncated input and trailing bytes are errors."""
        value, pos = self.decode_prefix(data, version, 0)
        if pos != len(data):
            raise CodecError(f"{len(data) - pos} bytes of garbage after the {self.spec.name} body", position=pos)
        return value

    def decode_prefix(self, data: bytes | bytearray | memoryview, version: int, pos: int = 0) -> tuple[msgspec.Struct, int]:
        if type(data) is not bytes and isinstance(data, memoryview):
            data = bytes(data)
        return (self._versions.get(version) or self.version_codec(version)).decode_at(data, pos, len(data))
