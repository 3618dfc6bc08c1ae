"""Which topics a start (or a mirror's discovery) selects.

A mirror keeps its patterns in its configs, as the KIP-1279 prototype does:
``mirror.topics.include`` and ``mirror.topics.exclude``, comma-separated Java regexes matched
against the whole topic name (``coordinator.java_regex``: the same meaning, or refused). Include literals and include regexes are merged into one list (a literal
is written as a regex matching only itself); exclude wins over include.

Rules:

- internal topics (``__.*``: ``__consumer_offsets``, ``__mirror_state``, ...) are never selected,
  even by name, unless the caller asks for them;
- a name given explicitly beats the exclude patterns (failing back one topic by name must work
  even after a pattern stop excluded it);
- a regex only *discovers* topics attached to no mirror: a stopped topic is not restarted by a
  regex start (its local writes would be truncated away); it must be started by name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from coordinator.image import MetadataImage
from coordinator.java_regex import JavaPatternError, JavaPatterns, compile_java_list

INCLUDE_CONFIG = "mirror.topics.include"
EXCLUDE_CONFIG = "mirror.topics.exclude"
INTERNAL_TOPIC = re.compile(r"__.*", re.DOTALL)
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


class InvalidPattern(ValueError):
    def __init__(self, pattern: str, reason: str) -> None:
        super().__init__(f"invalid pattern '{pattern}': {reason}")
        self.pattern = pattern
        self.reason = reason


def pattern_list_problem(patterns: Iterable[str]) -> str | None:
    """Why a list of patterns kept in a comma-separated config cannot be used, or None: the one
    rule of every edge (flags, create, alter, a stored config read back)."""
    try:
        compile_patterns(tuple(p.strip() for p in patterns if p.strip()))
    except InvalidPattern as e:
        return str(e)
    return None


def is_internal(topic: str) -> bool:
    return INTERNAL_TOPIC.fullmatch(topic) is not None


def is_legal_topic_name(name: str) -> bool:
    """Kafka's topic (and mirror) name rule: 1-249 of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    return _LEGAL_TOPIC.fullmatch(name) is not None and name not in (".", "..")


def literal_pattern(topic: str) -> str:
    """A regex that matches exactly ``topic``; only '.' needs escaping in a legal topic name."""
    return topic.replace(".", r"\.") if is_legal_topic_name(topic) else re.escape(topic)


def split_patterns(csv: str | None) -> list[str]:
    if not csv:
        return []
    return [p.strip() for p in csv.split(",") if p.strip()]


def join_patterns(patterns: Iterable[str]) -> str:
    return ",".join(dict.fromkeys(patterns))  # ordered, without duplicates


@lru_cache(maxsize=256)
def compile_patterns(patterns: tuple[str, ...]) -> JavaPatterns | None:
    """All patterns as one matcher (None if there are none); raises InvalidPattern."""
    for p in patterns:
        if "," in p:
            raise InvalidPattern(p, "a pattern cannot contain ',' (configs keep patterns comma-separated)")
    try:
        return compile_java_list(patterns)
    except JavaPatternError as e:
        raise InvalidPattern(e.pattern, e.reason) from None


@dataclass(frozen=True, slots=True)
class TopicFilter:
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    include_internal: bool = False

    @classmethod
    def from_config(cls, configs: Mapping[str, str]) -> "TopicFilter":
        return cls(tuple(split_patterns(configs.get(INCLUDE_CONFIG))), tuple(split_patterns(configs.get(EXCLUDE_CONFIG))))

    def validate(self) -> None:
        compile_patterns(self.include)
        compile_patterns(self.exclude)

    def matches(self, topic: str) -> bool:
        if not self.include_internal and is_internal(topic):
            return False
        exc = compile_patterns(self.exclude)
        if exc is not None and exc.fullmatch(topic):
            return False
        inc = compile_patterns(self.include)
        return inc is not None and inc.fullmatch(topic)


@dataclass(frozen=True, slots=True)
class Selection:
    topics: tuple[str, ...]  # selected, explicit names first, each once
    rejected: tuple[tuple[str, str], ...]  # explicit names refused, with the reason
    skipped: tuple[tuple[str, str], ...]  # regex matches left out, with the reason


def select_topics(
    candidates: Iterable[str],
    literals: Sequence[str] = (),
    include_patterns: Sequence[str] = (),
    exclude_patterns: Sequence[str] = (),
    *,
    include_internal: bool = False,
    skip: Callable[[str], str | None] | None = None,
) -> Selection:
    """Explicit ``literals`` plus the ``candidates`` the patterns select.

    ``skip(name)`` may give a reason to leave a regex match out (the caller's rule for topics
    already attached to a mirror). Raises InvalidPattern for a bad regex.
    """
    f = TopicFilter(tuple(include_patterns), tuple(exclude_patterns), include_internal)
    f.validate()
    chosen: dict[str, None] = {}
    rejected: list[tuple[str, str]] = []
    for name in literals:
        if not include_internal and is_internal(name):
            rejected.append((name, f"{name!r} is an internal topic and cannot be mirrored"))
        elif not is_legal_topic_name(name):
            rejected.append((name, f"{name!r} is not a legal topic name"))
        else:
            chosen.setdefault(name, None)
    skipped: list[tuple[str, str]] = []
    if include_patterns:
        for name in candidates:
            if name in chosen or not f.matches(name):
                continue
            reason = skip(name) if skip is not None else None
            if reason is None:
                chosen[name] = None
            else:
                skipped.append((name, reason))
    return Selection(tuple(chosen), tuple(rejected), tuple(skipped))


def discover_topics(image: MetadataImage, mirror_name: str, candidates: Iterable[str]) -> tuple[str, ...]:
    """Candidates (e.g. the source's topic names) the mirror's own include/exclude configs select
    that are attached to no mirror yet: what periodic discovery should start."""
    mirror = image.mirrors.get(mirror_name)
    if mirror is None:
        return ()
    f = TopicFilter.from_config(mirror.configs)
    # A stored pattern that cannot be used (refused at write time since; --describe shows it):
    # an include is left out; an exclude stops discovery, as what it would keep out is unknown
    # and a started topic turns the destination's topic read-only.
    if any(pattern_list_problem((p,)) for p in f.exclude):
        return ()
    f = TopicFilter(tuple(p for p in f.include if pattern_list_problem((p,)) is None), f.exclude)
    members = image.mirrors.topics
    by_name = image.topics.by_name
    out = []
    for name in candidates:
        tid = by_name.get(name)
        if (tid is None or tid not in members) and f.matches(name):
            out.append(name)
    return tuple(out)
