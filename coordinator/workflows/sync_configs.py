"""Topic config sync: the source's topic configs, minus ``topic.properties.exclude``.

Excluded names describe the local cluster rather than the data (replication throttles,
``min.insync.replicas``, ``unclean.leader.election.enable``, timestamp checks; the prototype's
list), so they are neither copied nor deleted: a destination's own value for them survives.
Names are matched as whole-name Java regular expressions, as the prototype compiles its list
(``coordinator.java_regex``; ``MirrorConfig`` has left out any it cannot use).
A destination config absent from the source (and not excluded) is deleted, so the mirror topic
carries the source's settings and nothing else. A source that enables unclean leader election
gets a warning at every sync (it can lose data the mirror already copied; threads, PP review).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

import msgspec

from coordinator.java_regex import JavaPatterns, compile_java_list
from coordinator.workflows.commands import AlterConfigs
from coordinator.workflows.config import ALWAYS_EXCLUDED_PROPERTIES


def exclude_pattern(exclude: Iterable[str]) -> JavaPatterns | None:
    return compile_java_list((*exclude, *ALWAYS_EXCLUDED_PROPERTIES))


def is_excluded(name: str, pattern: JavaPatterns | None) -> bool:
    return pattern is not None and pattern.fullmatch(name)


def filter_configs(configs: Mapping[str, str], exclude: Iterable[str]) -> dict[str, str]:
    """The configs a mirror topic takes from its source topic."""
    pattern = exclude_pattern(exclude)
    return {k: v for k, v in sorted(configs.items()) if not is_excluded(k, pattern)}


class ConfigSync(msgspec.Struct, frozen=True, gc=False):
    command: AlterConfigs | None
    warnings: tuple[str, ...] = ()


def plan_config_sync(
    topic_id: uuid.UUID,
    topic_name: str,
    source_configs: Mapping[str, str],
    dest_configs: Mapping[str, str],
    exclude: Iterable[str],
) -> ConfigSync:
    """The AlterConfigs that makes the mirror topic's configs match its source's (None when they do)."""
    pattern = exclude_pattern(exclude)
    wanted = {k: v for k, v in source_configs.items() if not is_excluded(k, pattern)}
    to_set = tuple(sorted((k, v) for k, v in wanted.items() if dest_configs.get(k) != v))
    to_delete = tuple(sorted(k for k in dest_configs if k not in wanted and not is_excluded(k, pattern)))
    warnings: tuple[str, ...] = ()
    if source_configs.get("unclean.leader.election.enable", "").lower() == "true":
        warnings = (
            f"source topic {topic_name} ({topic_id}) has unclean.leader.election.enable=true: "
            "the source may lose records the mirror already copied",
        )
    command = AlterConfigs(topic_id, to_set, to_delete) if to_set or to_delete else None
    return ConfigSync(command, warnings)
