"""``MethodSpec.positional`` (the client's argument binding) places keyword arguments as
``inspect.Signature.bind`` does, for every method, without inspect on the usual paths."""

from __future__ import annotations

import inspect

import pytest

from clustermodel.protocol import METHODS


def _bound(m, args, kwargs):  # noqa: ANN001, ANN202
    b = m.signature.bind(None, *args, **kwargs)
    b.apply_defaults()
    return list(b.arguments.values())[1:]


@pytest.mark.parametrize("name", sorted(METHODS))
def test_positional_equals_inspect_binding(name: str) -> None:
    m = METHODS[name]
    params = list(m.signature.parameters.values())[1:]
    required = [p.name for p in params if p.default is inspect.Parameter.empty]
    optional = [p.name for p in params if p.default is not inspect.Parameter.empty]
    args = tuple(f"a{i}" for i in range(len(required)))
    for kwargs in ({}, {k: f"k-{k}" for k in optional}, {k: "last" for k in optional[-1:]}):
        assert m.positional(args, kwargs) == _bound(m, args, kwargs)
    if required:  # a required argument by keyword: still bound
        kwargs = {required[-1]: "by-name"}
        assert m.positional(args[:-1], kwargs) == _bound(m, args[:-1], kwargs)
        with pytest.raises(TypeError):  # missing: refused as inspect refuses it
            m.positional(args[:-1], {})


def test_frames_encoded_in_place_follow_each_other_in_one_buffer() -> None:
    """A pipeline's requests are encoded straight into one buffer (``encode_request_into``): each
    frame's length prefix counts its own message only, wherever in the buffer it starts."""
    import os

    from clustermodel.protocol import HEADER, encode_request, encode_request_into, request_decoder

    payload = os.urandom(70_000)  # longer than msgspec's first buffer: the buffer grows mid-encode
    calls = [(1, "A", "ping", []), (2, "B", "append_mirror_batches", [payload, [payload[:5]]]), (3, "C", "now", [])]
    out = bytearray()
    for call in calls:
        encode_request_into(out, *call)
    frames, pos = [], 0
    while pos < len(out):
        size = int.from_bytes(out[pos : pos + HEADER], "big")
        frames.append(bytes(out[pos + HEADER : pos + HEADER + size]))
        pos += HEADER + size
    assert pos == len(out)
    assert [(r.id, r.cluster, r.method) for r in map(request_decoder.decode, frames)] == [c[:3] for c in calls]
    assert b"".join(encode_request(*c) for c in calls) == out
    assert payload in out
