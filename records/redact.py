"""Which config values are secrets, and the one marker every output puts in their place.

ConfigRecords (the records tools: ``decode``, ``dump-log``) follow Kafka's RecordRedactor: every
config Kafka does not know and every PASSWORD-typed one is hidden. Configs outside metadata
records (the CLI, the logs, the audit export) go by the name pattern below. It lives here,
the lowest layer, because the records tools print ConfigRecords read back from the metadata log.
The marker is the one Kafka's ``RecordRedactor`` writes into a sensitive ConfigRecord's value.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
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


# Kafka's config names and types per resource type, generated from Kafka's own ConfigDefs by
# tools/kafka/src/KafkaConfigTable.java (tests/test_redaction_table.py regenerates and compares).
KAFKA_CONFIGS: Final = Path(__file__).with_name("kafka_configs.json")


@cache
def _kafka_configs() -> dict[int, dict[str, str]]:
    table = json.loads(KAFKA_CONFIGS.read_text())
    return {t["id"]: t["configs"] for t in table["resourceTypes"].values()}


def is_sensitive_config(resource_type: int, name: str) -> bool:
    """Kafka's RecordRedactor rule for a ConfigRecord (KafkaConfigSchema.isSensitive): sensitive
    unless Kafka knows the config for that resource type and its type is not PASSWORD. So a
    plugin's or a listener-prefixed config, which Kafka cannot type, is hidden."""
    configs = _kafka_configs().get(resource_type)
    if configs is None:
        return True
    kind = configs.get(name)
    return kind is None or kind == "PASSWORD"


def may_hold_secrets(message: str) -> bool:
    """Whether a message of this type can carry a secret (what to hide when it does not decode)."""
    return message == "ConfigRecord" or message in _KEY_MATERIAL


def needs_redaction(message: str, data: Mapping[str, object]) -> bool:
    """Whether a message's JSON data object holds a secret."""
    if message == "ConfigRecord":
        name, resource_type = data.get("name"), data.get("resourceType")
        if data.get("value") is None or not isinstance(name, str) or not isinstance(resource_type, int):
            return False
        return is_sensitive_config(resource_type, name)
    return message in _KEY_MATERIAL


def redact_message_json(message: str, data: dict[str, object]) -> dict[str, object]:
    """A message's JSON data object with its secrets replaced by the marker (others unchanged)."""
    if not needs_redaction(message, data):
        return data
    if message == "ConfigRecord":
        return {**data, "value": REDACTED}
    return {k: (REDACTED if k in _KEY_MATERIAL[message] and v is not None else v) for k, v in data.items()}
