"""Secret redaction before anything reaches Parquet or HTML.

Two rules, applied column-wise with Arrow compute (so 10M-row tables stay fast):

- a config whose *name* is sensitive (``sasl.jaas.config``, anything with password, secret,
  credential(s), token, private key, api key) has its *values* replaced by ``(redacted)`` (``records.redact.REDACTED``);
- free text (error messages, transition reasons, config values under harmless names) has
  ``name=value`` pairs with a sensitive name and whole JAAS login-module clauses scrubbed,
  because exceptions from SASL clients quote their config.

The patterns are RE2 (Arrow's regex engine) and Python ``re`` compatible.
"""

from __future__ import annotations

import re
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from records.redact import REDACTED, SENSITIVE_CONFIG_NAME, is_sensitive

# Config names whose values are secret: the one definition, shared with the CLI and records tools.
SENSITIVE_NAME: Final = SENSITIVE_CONFIG_NAME
# `name=value` / `name: value` / `"name": "value"` with a sensitive name, in free text.
_KV: Final = (
    r"(?i)((?:[\w.-]*(?:passw(?:or)?d|secret|credential|token|api[._-]?key)[\w.-]*)"
    r"[\"']?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&\"'}\])]+)"
)
# A JAAS clause: `org.x.FooLoginModule required ... ;` (to the end of text if no `;`).
_JAAS: Final = r"(?i)[\w.$]*LoginModule\s+(?:required|requisite|sufficient|optional)\b[^;]*;?"

_KV_RE = re.compile(_KV)
_JAAS_RE = re.compile(_JAAS)


def is_sensitive_name(name: str) -> bool:
    return is_sensitive(name)


def scrub_text(text: str | None) -> str | None:
    """Free text with secrets in it -> the same text with the secret parts redacted."""
    if text is None:
        return None
    text = _JAAS_RE.sub(REDACTED, text)
    return _KV_RE.sub(lambda m: m.group(1) + REDACTED, text)


def _scrub_plain(arr: pa.Array) -> pa.Array:
    arr = pc.replace_substring_regex(arr, pattern=_JAAS, replacement=REDACTED)
    return pc.replace_substring_regex(arr, pattern=_KV, replacement=r"\1" + REDACTED)


def scrub_column(col: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray:
    """Vectorised ``scrub_text`` on a string column. Dictionary columns: scrub the dictionary only."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    out: list[pa.Array] = []
    for chunk in chunks:
        if pa.types.is_dictionary(chunk.type):
            out.append(
                pa.DictionaryArray.from_arrays(chunk.indices, _scrub_plain(chunk.dictionary.cast(pa.string())))
            )
        else:
            out.append(_scrub_plain(chunk))
    if not out:
        return pa.chunked_array([], col.type)
    return pa.chunked_array(out)


def redact_by_name(names: pa.ChunkedArray, values: pa.ChunkedArray) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """Values under a sensitive name become ``REDACTED`` (nulls stay null). Returns (values, mask)."""
    names = names.cast(pa.string())
    mask = pc.fill_null(pc.match_substring_regex(names, pattern=SENSITIVE_NAME), False)
    values = values.cast(pa.string())
    redacted = pc.if_else(pc.and_(mask, pc.is_valid(values)), pa.scalar(REDACTED), values)
    return scrub_column(redacted), mask
