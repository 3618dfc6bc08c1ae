"""Hypothesis strategies for any message version of any schema set.

A generated value holds random values for the fields its version has, and defaults for the
others, so it survives encode -> decode unchanged. Flexible structs also get random unknown
tagged fields, with tags above every known one.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import strategies as st

from records.codec import MessageCodec
from records.schema import INT_RANGES, FieldSpec, StructSpec
from records.structs import UNKNOWN_TAGGED_FIELDS

_MAX_ARRAY = 4


def message_values(codec: MessageCodec, version: int, unknown_tags: bool = True) -> st.SearchStrategy[Any]:
    """``unknown_tags=False`` leaves unknown tagged fields out, for codecs that drop them."""
    return _Builder(codec, version, unknown_tags).struct(codec.spec.struct)


class _Builder:
    def __init__(self, codec: MessageCodec, version: int, unknown_tags: bool = True) -> None:
        self.codec = codec
        self.unknown_tags = unknown_tags
        self.classes = codec.classes
        self.version = version
        self.flexible = codec.spec.is_flexible(version)

    def struct(self, struct: StructSpec) -> st.SearchStrategy[Any]:
        cls = self.classes.struct_class(struct)
        kwargs: dict[str, st.SearchStrategy[Any]] = {}
        for f in struct.fields:
            if self.version in f.versions:
                kwargs[f.attr] = self.value(f)
        if self.flexible and self.unknown_tags:
            known = [f.tag for f in struct.fields if f.tag is not None]
            first_free = max(known, default=-1) + 1
            kwargs[UNKNOWN_TAGGED_FIELDS] = st.dictionaries(
                st.integers(first_free, first_free + 300), st.binary(max_size=8), max_size=2
            ).map(lambda d: tuple(sorted(d.items())))
        return st.builds(cls, **kwargs)

    def value(self, f: FieldSpec) -> st.SearchStrategy[Any]:
        if f.type.is_array:
            inner = self.single(f)
            base: st.SearchStrategy[Any] = st.lists(inner, max_size=_MAX_ARRAY).map(tuple)
        else:
            base = self.single(f)
        if self.version in f.nullable_versions:
            return st.one_of(st.none(), base)
        return base

    def single(self, f: FieldSpec) -> st.SearchStrategy[Any]:
        if f.type.is_struct:
            return self.struct(f.struct)  # type: ignore[arg-type]
        t = f.type.name
        if t in INT_RANGES:
            lo, hi = INT_RANGES[t]
            return st.integers(lo, hi)
        if t == "bool":
            return st.booleans()
        if t == "float64":
            return st.floats(allow_nan=False)
        if t == "string":
            limit = 40
            return st.text(max_size=limit)
        if t == "uuid":
            # The all-zero uuid stands for null in nullable versions; keep it out of those.
            nonzero = st.integers(1, (1 << 128) - 1).map(lambda i: uuid.UUID(int=i))
            if self.version in f.nullable_versions:
                return nonzero
            return st.one_of(st.just(uuid.UUID(int=0)), nonzero)
        return st.binary(max_size=24)
