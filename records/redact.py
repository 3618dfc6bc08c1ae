"""Which config values are secrets, and the one marker every output puts in their place.

The one rule the records tools, the CLI, the logs and the audit export share. It lives here,
the lowest layer, because the records tools print ConfigRecords read back from the metadata log.
The marker is the one Kafka's ``RecordRedactor`` writes into a sensitive ConfigRecord's value.
"""

from __future__ import annotations

import re
from typing import Final, Mapping

REDACTED: Final = "(redacted)"
# Config names whose values are credentials (RE2-compatible, so Arrow can apply it column-wise too).
SENSITIVE_CONFIG_NAME: Final = (
    r"(?i)(jaas|passw(or)?d|secret|credential|token|private[._-]?key|api[._-]?key|"
    r"basic\.auth\.user\.info|\.key$|sasl\.client\.callback)"
)
_SENSITIVE = re.compile(SENSITIVE_CONFIG_NAME)


def is_sensitive(key: str) -> bool:
    return _SENSITIVE.search(key) is not None


def redact_config(config: Mapping[str, str | None]) -> dict[str, str | None]:
    """A copy of a config safe to print, export or log: credentials are replaced by the marker."""
    return {k: (REDACTED if v is not None and is_sensitive(k) else v) for k, v in config.items()}


# Fields of metadata records that hold key material whatever their name, as Kafka's
# RecordRedactor prints them: message name -> JSON field names.
_KEY_MATERIAL: Final = {
    "UserScramCredentialRecord": ("salt", "storedKey", "serverKey"),
}


def may_hold_secrets(message: str) -> bool:
    """Whether a message of this type can carry a secret (what to hide when it does not decode)."""
    return message == "ConfigRecord" or message in _KEY_MATERIAL


def needs_redaction(message: str, data: Mapping[str, object]) -> bool:
    """Whether a message's JSON data object holds a secret."""
    if message == "ConfigRecord":
        name = data.get("name")
        return isinstance(name, str) and is_sensitive(name) and data.get("value") is not None
    return message in _KEY_MATERIAL


def redact_message_json(message: str, data: dict[str, object]) -> dict[str, object]:
    """A message's JSON data object with its secrets replaced by the marker (others unchanged)."""
    if not needs_redaction(message, data):
        return data
    if message == "ConfigRecord":
        return {**data, "value": REDACTED}
    return {k: (REDACTED if k in _KEY_MATERIAL[message] and v is not None else v) for k, v in data.items()}
