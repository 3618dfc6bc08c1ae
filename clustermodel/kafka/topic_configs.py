"""A topic's configs as Kafka 4.1's DescribeConfigs gives them: every topic config, the ones set on the
topic (DYNAMIC_TOPIC_CONFIG) over Kafka's defaults, each with its type, synonyms and documentation.

The defaults are what a fresh Apache Kafka broker says of a topic with no configs set, stored in
topic_config_defaults.json; tests/kafka_config_table.py rewrites that table from the jars, and the
tools yardstick checks it against a running Kafka. Note a fresh KRaft cluster with ELR sets a
cluster-wide min.insync.replicas (DYNAMIC_DEFAULT_BROKER_CONFIG), so that one is not DEFAULT_CONFIG.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

TABLE = Path(__file__).with_name("topic_config_defaults.json")
TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5  # ConfigSource ids: DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG
UNKNOWN_TYPE = 0


class ConfigEntry(NamedTuple):
    name: str
    value: str | None
    source: int
    config_type: int
    documentation: str | None
    synonyms: tuple[tuple[str, str | None, int], ...]  # (name, value, source), most specific first
    read_only: bool = False
    sensitive: bool = False


@lru_cache(maxsize=1)
def topic_config_defaults() -> dict[str, ConfigEntry]:
    """Kafka's topic configs of a topic with none set, in the order Kafka lists them."""
    table = json.loads(TABLE.read_text())["configs"]
    return {c["name"]: ConfigEntry(c["name"], c["value"], c["source"], c["type"], c["documentation"],
                                   tuple((n, v, s) for n, v, s in c["synonyms"]), c["read_only"], c["sensitive"])
            for c in table}  # fmt: skip


def describe_topic_configs(explicit: Mapping[str, str], keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """Every config of a topic whose set configs are ``explicit`` (only ``keys`` when given), as Kafka
    describes them: a set config is the topic's, and its own synonym comes before the defaults'."""
    defaults = topic_config_defaults()
    entries = []
    for name, d in defaults.items():
        if name in explicit:
            value = explicit[name]
            d = d._replace(value=value, source=TOPIC_CONFIG, synonyms=((name, value, TOPIC_CONFIG), *d.synonyms))
        entries.append(d)
    # Configs Kafka does not know (the model accepts any name) follow, as set.
    entries += [ConfigEntry(n, v, TOPIC_CONFIG, UNKNOWN_TYPE, None, ((n, v, TOPIC_CONFIG),))
                for n, v in sorted(explicit.items()) if n not in defaults]  # fmt: skip
    if keys is not None:
        wanted = set(keys)
        entries = [e for e in entries if e.name in wanted]
    return entries
