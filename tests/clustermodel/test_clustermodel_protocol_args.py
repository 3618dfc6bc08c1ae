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
