"""Controller-side validation of the cluster mirror admin requests.

As Kafka's controller managers: a write takes the current ``MetadataImage`` and returns
``AdminResult(records, response)``. It mutates nothing. The caller appends the records to the
metadata log and answers once they are committed; replaying them gives the new image.

Each refused topic (or request) gets its KIP-1279 error and a message naming the state it is
in, and produces no record. Per-topic refusals do not stop the other topics of the request;
request-level refusals (authorization, unknown mirror, racing request, bad pattern) produce no
record at all.

Two views of state are used, as in the prototype:

- the *desired* state of each topic, from the image (``MirrorTopicStateChangeRecord``);
- optionally, the *actual* per-partition states (``states``: ``(mirror, topic_id, partition)``
  -> ``MirrorState``, a missing key is UNKNOWN), checked against the legal transitions. The
  prototype's broker does this check before forwarding the request to the controller.

StateValidationOffset (prototype semantics): the metadata offset at which the caller checked
the partition states; -1 skips the check. The request is refused with
INVALID_CLUSTER_MIRROR_STATES if any topic it concerns had its mirror state changed after that
offset, or if the offset is ahead of this image (the caller saw metadata we have not applied).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

import msgspec

from coordinator.image import (
    AclOperation,
    AclPermissionType,
    AclsImage,
    ConfigResourceType,
    MetadataImage,
    MirrorTopic,
    PatternType,
    TopicImage,
)
from coordinator.states import DesiredState, ErrorCode, MirrorState, is_legal_transition
from coordinator.state_counts import StateTally
from coordinator.topic_filter import (
    EXCLUDE_CONFIG,
    INCLUDE_CONFIG,
    InvalidPattern,
    compile_patterns,
    discover_topics,
    is_legal_topic_name,
    join_patterns,
    literal_pattern,
    pattern_list_problem,
    select_topics,
    split_patterns,
)
from coordinator.workflows.config import config_problems
from records.framing import ApiMessageAndVersion
from records.redact import REDACTED, SENSITIVE_CONFIG_NAME, is_sensitive, redact_config  # noqa: F401  (re-exported)
from records.registry import SchemaSet, default_schemas

StateView = Mapping[tuple[str, uuid.UUID, int], MirrorState]
TopicRef = str | uuid.UUID  # a topic name, or a topic ID

BOOTSTRAP_CONFIG = "bootstrap.servers"
SOURCE_CLUSTER_ID_CONFIG = "mirror.source.cluster.id"
# ------------------------------------------------------------------------------- results


class TopicResult(NamedTuple):
    name: str
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


class AdminResponse(msgspec.Struct, frozen=True):
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    topics: tuple[TopicResult, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()  # (topic, reason): pattern matches left out of a start

    def first_error(self) -> tuple[ErrorCode, str | None]:
        """The request-level error, else the first topic's error (what a CLI reports)."""
        if self.error_code != ErrorCode.NONE:
            return self.error_code, self.error_message
        for t in self.topics:
            if t.error_code != ErrorCode.NONE:
                return t.error_code, t.error_message
        return ErrorCode.NONE, None


class AdminResult(NamedTuple):
    records: tuple[ApiMessageAndVersion, ...]
    response: AdminResponse

    @property
    def ok(self) -> bool:
        return self.response.first_error()[0] == ErrorCode.NONE


def _refuse(code: ErrorCode, message: str, topics: tuple[TopicResult, ...] = ()) -> AdminResult:
    return AdminResult((), AdminResponse(code, message, topics))


# ------------------------------------------------------------------------- authorization


def authorize(
    acls: AclsImage, principal: str, host: str, operation: AclOperation, mirror_name: str,
    super_users: frozenset[str] = frozenset(),
) -> bool:
    """Kafka's StandardAuthorizer rules on a ClusterMirror resource: a matching DENY wins, then a
    matching ALLOW (ALL covers every operation; READ/WRITE/DELETE/ALTER imply DESCRIBE, and
    ALTER_CONFIGS implies DESCRIBE_CONFIGS); no matching ACL denies."""
    if principal in super_users:
        return True
    implied = {operation, AclOperation.ALL}
    if operation == AclOperation.DESCRIBE:
        implied |= {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    elif operation == AclOperation.DESCRIBE_CONFIGS:
        implied.add(AclOperation.ALTER_CONFIGS)
    allowed = False
    for _, acl in acls.cluster_mirror_acls():
        if acl.principal not in (principal, "User:*") or acl.host not in (host, "*"):
            continue
        if acl.pattern_type == PatternType.LITERAL:
            if acl.resource_name not in (mirror_name, "*"):
                continue
        elif acl.pattern_type != PatternType.PREFIXED or not mirror_name.startswith(acl.resource_name):
            continue
        if acl.permission_type == AclPermissionType.DENY and acl.operation in (operation, AclOperation.ALL):
            return False
        if acl.permission_type == AclPermissionType.ALLOW and acl.operation in implied:
            allowed = True
    return allowed


class Principal(NamedTuple):
    name: str  # e.g. "User:alice"
    host: str = "*"
    super_users: frozenset[str] = frozenset()


def _denied(image: MetadataImage, who: Principal | None, op: AclOperation, mirror: str) -> AdminResult | None:
    if who is None or authorize(image.acls, who.name, who.host, op, mirror, who.super_users):
        return None
    return _refuse(ErrorCode.CLUSTER_MIRROR_AUTHORIZATION_FAILED,
                   f"{who.name} is not authorized to {op.name} cluster mirror {mirror!r}")


# ------------------------------------------------------------------------------- records


class _Writer:
    def __init__(self, schemas: SchemaSet | None) -> None:
        s = schemas or default_schemas()
        self.config = s.struct("ConfigRecord")
        self.config_key = s.spec("ConfigRecord").api_key
        self.state = s.struct("MirrorTopicStateChangeRecord")
        self.state_key = s.spec("MirrorTopicStateChangeRecord").api_key

    def mirror_config(self, mirror: str, key: str, value: str | None) -> ApiMessageAndVersion:
        message = self.config(resource_type=int(ConfigResourceType.CLUSTER_MIRROR), resource_name=mirror, name=key, value=value)
        return ApiMessageAndVersion(message, 0, self.config_key)  # type: ignore[arg-type]

    def desired(self, topic_id: uuid.UUID, mirror: str | None, state: DesiredState) -> ApiMessageAndVersion:
        message = self.state(topic_id=topic_id, mirror_name=mirror, desired_state=int(state))
        return ApiMessageAndVersion(message, 0, self.state_key)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- helpers


def _partition_states(states: StateView | None, mirror: str, topic: TopicImage) -> list[tuple[int, MirrorState]]:
    if states is None:
        return []
    tid = topic.topic_id
    # values may be plain state bytes (as stored in __mirror_state); MirrorState(...) only for
    # those: a describe of 50k partitions spent a fifth of its time in Enum lookups
    get, out = states.get, []
    for p in sorted(topic.partitions):
        s = get((mirror, tid, p), MirrorState.UNKNOWN)
        out.append((p, s if s.__class__ is MirrorState else MirrorState(s)))
    return out


def _summary(pstates: list[tuple[int, MirrorState]]) -> str:
    groups: dict[MirrorState, list[int]] = {}
    for p, s in pstates:
        groups.setdefault(s, []).append(p)
    parts = []
    for s, ps in groups.items():
        shown = ", ".join(map(str, ps[:8])) + (f", ... ({len(ps)} partitions)" if len(ps) > 8 else "")
        parts.append(f"{s.name} [{shown}]")
    return "; ".join(parts)


def _desc(name: str, m: MirrorTopic | None, pstates: list[tuple[int, MirrorState]]) -> str:
    where = "in no cluster mirror" if m is None else f"in mirror {m.mirror_name!r} with desired state {m.desired_state.name}"
    return f"Topic {name!r} is {where}" + (f"; partitions: {_summary(pstates)}" if pstates else "")


def _svo_refusal(image: MetadataImage, svo: int, concerned: Iterable[tuple[str, uuid.UUID]]) -> AdminResult | None:
    if svo == -1:
        return None
    if svo < -1:
        return _refuse(ErrorCode.INVALID_REQUEST, f"StateValidationOffset {svo} is invalid (-1 skips validation)")
    if svo > image.offset:
        return _refuse(ErrorCode.INVALID_CLUSTER_MIRROR_STATES,
                       f"states were validated at metadata offset {svo}, ahead of this controller's offset {image.offset}")
    for name, tid in concerned:
        m = image.mirrors.topics.get(tid)
        if m is not None and m.last_change_offset > svo:
            return _refuse(ErrorCode.INVALID_CLUSTER_MIRROR_STATES,
                           f"mirror state of topic {name!r} changed at metadata offset {m.last_change_offset}, "
                           f"after the states were validated at offset {svo}; retry")
    return None


def _resolve(image: MetadataImage, refs: Sequence[TopicRef]) -> tuple[list[TopicImage], list[TopicResult]]:
    found: dict[uuid.UUID, TopicImage] = {}
    errors: list[TopicResult] = []
    for ref in refs:
        if isinstance(ref, uuid.UUID):
            t = image.topics.get(ref)
            if t is None:
                errors.append(TopicResult(str(ref), ErrorCode.UNKNOWN_TOPIC_ID, f"Topic ID {ref} does not exist"))
                continue
        else:
            t = image.topics.get_by_name(ref)
            if t is None:
                errors.append(TopicResult(ref, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {ref!r} does not exist"))
                continue
        found.setdefault(t.topic_id, t)
    return list(found.values()), errors


_Verdict = tuple[ErrorCode, str] | DesiredState | None  # an error, the state to write, or nothing to do


def _being_stopped(t: TopicImage, m: MirrorTopic | None, ps: list[tuple[int, MirrorState]]) -> tuple[ErrorCode, str] | None:
    if any(s == MirrorState.STOPPING for _, s in ps):
        return ErrorCode.MIRROR_TOPIC_BEING_STOPPED, _desc(t.name, m, ps)
    return None


def _bad_partitions(t: TopicImage, m: MirrorTopic | None, ps: list[tuple[int, MirrorState]],
                    ok: frozenset[MirrorState], code: ErrorCode, need: str) -> tuple[ErrorCode, str] | None:
    if any(s not in ok for _, s in ps):
        return code, f"{_desc(t.name, m, ps)}; {need}"
    return None


_START_FROM = frozenset({MirrorState.STOPPED, MirrorState.UNKNOWN})
_STOP_FROM = frozenset(s for s in MirrorState if is_legal_transition(s, MirrorState.STOPPING)) | {MirrorState.STOPPED}
_PAUSE_FROM = frozenset(s for s in MirrorState if is_legal_transition(s, MirrorState.PAUSING))
_RESUME_FROM = frozenset(s for s in MirrorState if is_legal_transition(s, MirrorState.MIRRORING))


def _start_verdict(mirror: str, t: TopicImage, m: MirrorTopic | None, states: StateView | None) -> _Verdict:
    if m is not None and m.mirror_name != mirror and m.desired_state is not DesiredState.STOP:
        return ErrorCode.TOPIC_ALREADY_IN_CLUSTER_MIRROR, _desc(t.name, m, [])
    if m is not None and m.mirror_name == mirror:
        if m.desired_state is DesiredState.START:
            return None  # already started: nothing to write
        if m.desired_state is DesiredState.PAUSE:
            return ErrorCode.MIRROR_TOPIC_NOT_STOPPED, _desc(t.name, m, []) + "; resume it instead"
    ps = _partition_states(states, m.mirror_name if m is not None else mirror, t)
    return (_being_stopped(t, m, ps)
            or _bad_partitions(t, m, ps, _START_FROM, ErrorCode.MIRROR_TOPIC_NOT_STOPPED,
                               "every partition must be STOPPED (or have no state) to start")
            or DesiredState.START)


def _member(mirror: str, t: TopicImage, m: MirrorTopic | None, states: StateView | None
            ) -> tuple[tuple[ErrorCode, str] | None, list[tuple[int, MirrorState]]]:
    """What stop, pause and resume check first: the topic is in this mirror and not stopping."""
    if m is None or m.mirror_name != mirror:
        return (ErrorCode.TOPIC_NOT_IN_CLUSTER_MIRROR, _desc(t.name, m, []) + f", not in mirror {mirror!r}"), []
    ps = _partition_states(states, mirror, t)
    return _being_stopped(t, m, ps), ps


def _stop_verdict(mirror: str, t: TopicImage, m: MirrorTopic | None, states: StateView | None) -> _Verdict:
    err, ps = _member(mirror, t, m, states)
    if err is not None or m is None:
        return err
    if m.desired_state is DesiredState.STOP:
        return None  # already stopped
    return (_bad_partitions(t, m, ps, _STOP_FROM, ErrorCode.INVALID_CLUSTER_MIRROR_STATES,
                            "a partition with no state yet cannot be stopped; retry")
            or DesiredState.STOP)


def _pause_verdict(mirror: str, t: TopicImage, m: MirrorTopic | None, states: StateView | None) -> _Verdict:
    err, ps = _member(mirror, t, m, states)
    if err is not None or m is None:
        return err
    if m.desired_state is DesiredState.PAUSE:
        return ErrorCode.MIRROR_TOPIC_ALREADY_PAUSED, _desc(t.name, m, ps)
    if m.desired_state is DesiredState.STOP:
        return ErrorCode.INVALID_CLUSTER_MIRROR_STATES, _desc(t.name, m, ps) + "; only a mirroring topic can be paused"
    return (_bad_partitions(t, m, ps, _PAUSE_FROM, ErrorCode.INVALID_CLUSTER_MIRROR_STATES,
                            "every partition must be MIRRORING to pause")
            or DesiredState.PAUSE)


def _resume_verdict(mirror: str, t: TopicImage, m: MirrorTopic | None, states: StateView | None) -> _Verdict:
    err, ps = _member(mirror, t, m, states)
    if err is not None or m is None:
        return err
    if m.desired_state is not DesiredState.PAUSE:
        return ErrorCode.MIRROR_TOPIC_NOT_PAUSED, _desc(t.name, m, ps)
    if any(s == MirrorState.PAUSING for _, s in ps):
        return ErrorCode.MIRROR_TOPIC_NOT_PAUSED, _desc(t.name, m, ps) + "; still pausing"
    return (_bad_partitions(t, m, ps, _RESUME_FROM, ErrorCode.INVALID_CLUSTER_MIRROR_STATES,
                            "a partition with no state cannot be resumed; retry")
            or DesiredState.START)


def _precheck(image: MetadataImage, who: Principal | None, op: AclOperation, mirror: str) -> AdminResult | None:
    """Authorization first (a denied caller learns nothing), then the mirror must exist."""
    denied = _denied(image, who, op, mirror)
    if denied is not None:
        return denied
    if image.mirrors.get(mirror) is None:
        return _refuse(ErrorCode.UNKNOWN_CLUSTER_MIRROR, f"Cluster mirror {mirror!r} does not exist")
    return None


def _topic_op(
    image: MetadataImage, mirror: str, topics: list[TopicImage], errors: list[TopicResult], verdict,  # noqa: ANN001
    states: StateView | None, writer: _Writer, svo: int, head: list[ApiMessageAndVersion],
) -> AdminResult:
    """The common shape of start/stop/pause/resume once the topics are resolved."""
    racing = _svo_refusal(image, svo, ((t.name, t.topic_id) for t in topics))
    if racing is not None:
        return racing
    records: list[ApiMessageAndVersion] = []
    results = list(errors)
    for t in topics:
        v = verdict(mirror, t, image.mirrors.topics.get(t.topic_id), states)
        if isinstance(v, tuple):
            results.append(TopicResult(t.name, v[0], v[1]))
            continue
        if v is not None:
            records.append(writer.desired(t.topic_id, mirror, v))
        results.append(TopicResult(t.name))
    # Pattern changes are standing instructions for discovery: only made when no topic was refused.
    if all(r.error_code == ErrorCode.NONE for r in results):
        records[:0] = head
    return AdminResult(tuple(records), AdminResponse(topics=tuple(results)))


def _pattern_refusal(*fields: tuple[str, Sequence[str]]) -> AdminResult | None:
    """INVALID_REQUEST naming the request field of the first pattern that cannot be used."""
    for field, patterns in fields:
        problem = pattern_list_problem(patterns)
        if problem is not None:
            return _refuse(ErrorCode.INVALID_REQUEST, f"{problem} (in {field})")
    return None


def _pattern_records(image: MetadataImage, mirror: str, writer: _Writer,
                     add_include: Sequence[str], add_exclude: Sequence[str]) -> list[ApiMessageAndVersion]:
    """Config records that merge patterns into the mirror's include/exclude lists (prototype)."""
    cfg = image.mirrors.mirrors[mirror].configs
    include, exclude = split_patterns(cfg.get(INCLUDE_CONFIG)), split_patterns(cfg.get(EXCLUDE_CONFIG))
    include = [p for p in include if p not in add_exclude] + [p for p in add_include if p not in include]
    exclude = [p for p in exclude if p not in add_include] + [p for p in add_exclude if p not in exclude]
    out = []
    for key, values in ((INCLUDE_CONFIG, include), (EXCLUDE_CONFIG, exclude)):
        value = join_patterns(values) or None
        if value != cfg.get(key):
            out.append(writer.mirror_config(mirror, key, value))
    return out


# ----------------------------------------------------------------------------- the writes


def create_cluster_mirror(
    image: MetadataImage, mirror_name: str, configs: Mapping[str, str | None], *,
    principal: Principal | None = None, schemas: SchemaSet | None = None,
) -> AdminResult:
    denied = _denied(image, principal, AclOperation.CREATE, mirror_name)
    if denied is not None:
        return denied
    if not is_legal_topic_name(mirror_name):
        return _refuse(ErrorCode.INVALID_REQUEST, f"{mirror_name!r} is not a legal cluster mirror name "
                       "(1-249 characters of [a-zA-Z0-9._-], not '.' or '..')")
    if image.mirrors.get(mirror_name) is not None:
        return _refuse(ErrorCode.CLUSTER_MIRROR_ALREADY_EXISTS, f"Cluster mirror {mirror_name!r} already exists")
    values = {k: v for k, v in configs.items() if v is not None}
    if not values.get(BOOTSTRAP_CONFIG, "").strip():
        return _refuse(ErrorCode.INVALID_CONFIG, f"a cluster mirror needs {BOOTSTRAP_CONFIG}")
    # The rules of --alter: a mirror never starts with a key or value it cannot use.
    problems = config_problems(values)
    if problems:
        return _refuse(ErrorCode.INVALID_CONFIG, "; ".join(problems[k] for k in sorted(problems)))
    w = _Writer(schemas)
    return AdminResult(tuple(w.mirror_config(mirror_name, k, values[k]) for k in sorted(values)), AdminResponse())


def delete_cluster_mirror(
    image: MetadataImage, mirror_name: str, *, states: StateView | None = None,
    state_validation_offset: int = -1, principal: Principal | None = None, schemas: SchemaSet | None = None,
) -> AdminResult:
    """Deletes an empty mirror: every topic must be stopped. Stopped topics are detached, then
    the mirror's configs are tombstoned (one atomic batch, as the prototype writes it)."""
    refused = _precheck(image, principal, AclOperation.DELETE, mirror_name)
    if refused is not None:
        return refused
    mirror = image.mirrors.mirrors[mirror_name]
    members = sorted(image.mirrors.topics_of(mirror_name), key=lambda m: m.topic_id.int)
    named = [(image.topics.by_id[m.topic_id], m) for m in members]
    racing = _svo_refusal(image, state_validation_offset, ((t.name, t.topic_id) for t, _ in named))
    if racing is not None:
        return racing
    active = [t.name for t, m in named if m.desired_state is not DesiredState.STOP]
    if active:
        shown = ", ".join(repr(n) for n in sorted(active)[:5]) + (f" and {len(active) - 5} more" if len(active) > 5 else "")
        return _refuse(ErrorCode.CLUSTER_MIRROR_NOT_EMPTY,
                       f"Cluster mirror {mirror_name!r} still has {len(active)} active or paused topic(s): {shown}")
    for t, m in named:
        ps = _partition_states(states, mirror_name, t)
        err = _being_stopped(t, m, ps) or _bad_partitions(
            t, m, ps, frozenset({MirrorState.STOPPED}), ErrorCode.INVALID_CLUSTER_MIRROR_STATES,
            "every partition must be STOPPED before the mirror is deleted")
        if err is not None:
            return _refuse(*err)
    w = _Writer(schemas)
    records = [w.desired(t.topic_id, None, DesiredState.STOP) for t, _ in named]
    records += [w.mirror_config(mirror_name, k, None) for k in sorted(mirror.configs)]
    return AdminResult(tuple(records), AdminResponse())


def start_mirror_topics(
    image: MetadataImage, mirror_name: str, topics: Sequence[TopicRef] = (), *,
    include_patterns: Sequence[str] = (), exclude_patterns: Sequence[str] = (),
    candidates: Iterable[str] | None = None, states: StateView | None = None,
    state_validation_offset: int = -1, principal: Principal | None = None, schemas: SchemaSet | None = None,
) -> AdminResult:
    """Start (first mirror) or fail back topics, named or by regex over ``candidates`` (default:
    the local topic names). A regex only picks topics attached to no mirror; named topics are
    added to ``mirror.topics.include`` with the patterns."""
    refused = _precheck(image, principal, AclOperation.ALTER, mirror_name)
    if refused is not None:
        return refused
    if not topics and not include_patterns:
        return _refuse(ErrorCode.INVALID_REQUEST, "no topics or include patterns to start")
    bad = _pattern_refusal(("IncludePatterns", include_patterns), ("ExcludePatterns", exclude_patterns))
    if bad is not None:
        return bad
    names = [r for r in topics if isinstance(r, str)]
    members, by_name = image.mirrors.topics, image.topics.by_name

    def skip(name: str) -> str | None:
        m = members.get(by_name.get(name))  # type: ignore[arg-type]
        if m is None:
            return None
        return f"{_desc(name, m, [])}; a pattern does not restart it, start it by name"

    try:
        sel = select_topics(image.topics.by_name if candidates is None else candidates, names,
                            include_patterns, exclude_patterns, skip=skip)
    except InvalidPattern as e:
        return _refuse(ErrorCode.INVALID_REQUEST, str(e))
    refs: list[TopicRef] = [r for r in topics if isinstance(r, uuid.UUID)] + [n for n in sel.topics]
    found, errors = _resolve(image, refs)
    errors = [TopicResult(n, ErrorCode.INVALID_TOPIC_EXCEPTION, why) for n, why in sel.rejected] + errors
    w = _Writer(schemas)
    literals = [literal_pattern(t.name) for t in found if t.name in names]
    head = _pattern_records(image, mirror_name, w, literals + list(include_patterns), exclude_patterns)
    result = _topic_op(image, mirror_name, found, errors, _start_verdict, states, w, state_validation_offset, head)
    if not sel.skipped or result.response.error_code != ErrorCode.NONE:
        return result
    return result._replace(response=msgspec.structs.replace(result.response, skipped=sel.skipped))


def discover_mirror_topics(
    image: MetadataImage, mirror_name: str, source_topics: Mapping[str, uuid.UUID], *,
    states: StateView | None = None, schemas: SchemaSet | None = None,
) -> AdminResult:
    """Periodic discovery, the controller's own write: the source's topics (name -> topic ID)
    that the mirror's ``mirror.topics.include`` selects and its ``mirror.topics.exclude`` does
    not, attached to no mirror yet, are started. A topic the user stopped stays attached (desired
    STOP), so it is never rediscovered; one not registered under the source's topic ID yet waits
    for the next round. Refused topics are left out of the response: nobody asked for them."""
    if image.mirrors.get(mirror_name) is None:
        return AdminResult((), AdminResponse())
    w = _Writer(schemas)
    records, results = [], []
    for name in discover_topics(image, mirror_name, source_topics):
        t = image.topics.get_by_name(name)
        if t is None or t.topic_id != source_topics[name]:
            continue
        if _start_verdict(mirror_name, t, None, states) is DesiredState.START:
            records.append(w.desired(t.topic_id, mirror_name, DesiredState.START))
            results.append(TopicResult(name))
    return AdminResult(tuple(records), AdminResponse(topics=tuple(results)))


def stop_mirror_topics(
    image: MetadataImage, mirror_name: str, topics: Sequence[TopicRef] = (), *, patterns: Sequence[str] = (),
    states: StateView | None = None, state_validation_offset: int = -1,
    principal: Principal | None = None, schemas: SchemaSet | None = None,
) -> AdminResult:
    """Fail over topics of a mirror: named ones, and the mirror's topics matching ``patterns``
    (which also move from ``mirror.topics.include`` to ``mirror.topics.exclude``)."""
    refused = _precheck(image, principal, AclOperation.ALTER, mirror_name)
    if refused is not None:
        return refused
    if not topics and not patterns:
        return _refuse(ErrorCode.INVALID_REQUEST, "no topics or patterns to stop")
    bad = _pattern_refusal(("Patterns", patterns))
    if bad is not None:
        return bad
    try:
        f = compile_patterns(tuple(patterns))
    except InvalidPattern as e:
        return _refuse(ErrorCode.INVALID_REQUEST, str(e))
    refs = list(topics)
    head: list[ApiMessageAndVersion] = []
    w = _Writer(schemas)
    if f is not None:
        for m in image.mirrors.topics_of(mirror_name):
            t = image.topics.by_id[m.topic_id]
            if m.desired_state is not DesiredState.STOP and f.fullmatch(t.name):
                refs.append(t.topic_id)
        head = _pattern_records(image, mirror_name, w, (), patterns)
    found, errors = _resolve(image, refs)
    return _topic_op(image, mirror_name, found, errors, _stop_verdict, states, w, state_validation_offset, head)


def pause_mirror_topics(
    image: MetadataImage, mirror_name: str, topics: Sequence[TopicRef], *, states: StateView | None = None,
    state_validation_offset: int = -1, principal: Principal | None = None, schemas: SchemaSet | None = None,
) -> AdminResult:
    return _named_topics_op("pause", _pause_verdict, image, mirror_name, topics, states, state_validation_offset,
                            principal, schemas)


def resume_mirror_topics(
    image: MetadataImage, mirror_name: str, topics: Sequence[TopicRef], *, states: StateView | None = None,
    state_validation_offset: int = -1, principal: Principal | None = None, schemas: SchemaSet | None = None,
) -> AdminResult:
    """Resume paused topics: written as START (a resume is a start on a paused topic)."""
    return _named_topics_op("resume", _resume_verdict, image, mirror_name, topics, states, state_validation_offset,
                            principal, schemas)


def _named_topics_op(
    verb: str, verdict: Callable[[str, TopicImage, MirrorTopic | None, StateView | None], _Verdict],
    image: MetadataImage, mirror_name: str, topics: Sequence[TopicRef],
    states: StateView | None, state_validation_offset: int, principal: Principal | None, schemas: SchemaSet | None,
) -> AdminResult:
    """An Alter on topics the request names (pause, resume): no pattern configs change."""
    refused = _precheck(image, principal, AclOperation.ALTER, mirror_name)
    if refused is not None:
        return refused
    if not topics:
        return _refuse(ErrorCode.INVALID_REQUEST, f"no topics to {verb}")
    found, errors = _resolve(image, topics)
    return _topic_op(image, mirror_name, found, errors, verdict, states, _Writer(schemas), state_validation_offset, [])


class ConfigOp(enum.IntEnum):
    """``AlterClusterMirrorConfigsRequest.ConfigOperation`` (Kafka's AlterConfigOp.OpType SET, DELETE)."""

    SET = 0
    DELETE = 1


def alter_cluster_mirror_configs(
    image: MetadataImage, mirror_name: str, changes: Sequence[tuple[str, ConfigOp, str | None]], *,
    validate_only: bool = False, principal: Principal | None = None, schemas: SchemaSet | None = None,
) -> AdminResult:
    """Incremental alter of a mirror's configs: a ConfigRecord per key that changes, nothing for
    a key already so. All or nothing: one refused key (INVALID_CONFIG) and no record is written;
    every key of the request gets its result."""
    refused = _precheck(image, principal, AclOperation.ALTER_CONFIGS, mirror_name)
    if refused is not None:
        return refused
    if not changes:
        return _refuse(ErrorCode.INVALID_REQUEST, "no config to alter")
    wanted: dict[str, str | None] = {}
    problems: dict[str, str] = {}
    for key, op, value in changes:
        if key in wanted or key in problems:
            problems[key] = f"config {key} appears more than once in the request"
        elif op == ConfigOp.SET and value is None:
            problems[key] = f"SET of {key} needs a value"
        elif op not in (ConfigOp.SET, ConfigOp.DELETE):
            problems[key] = f"config operation {int(op)} is not supported (SET=0, DELETE=1)"
        else:
            wanted[key] = value if op == ConfigOp.SET else None
    problems.update(config_problems({k: v for k, v in wanted.items() if k not in problems}))
    order = list(dict.fromkeys(k for k, _, _ in changes))
    results = tuple(TopicResult(k, ErrorCode.INVALID_CONFIG, problems[k]) if k in problems else TopicResult(k)
                    for k in order)  # fmt: skip
    if problems or validate_only:
        return AdminResult((), AdminResponse(topics=results))
    current = image.mirrors.mirrors[mirror_name].configs
    w = _Writer(schemas)
    # Sets before deletes: the mirror never has no config between two records of the batch.
    records = [w.mirror_config(mirror_name, k, v) for k, v in sorted(wanted.items()) if v is not None and current.get(k) != v]
    records += [w.mirror_config(mirror_name, k, None) for k, v in sorted(wanted.items()) if v is None and k in current]
    return AdminResult(tuple(records), AdminResponse(topics=results))


class DescribedConfig(NamedTuple):
    name: str
    value: str | None  # the marker when sensitive
    sensitive: bool


def describe_cluster_mirror_configs(
    image: MetadataImage, mirror_name: str, *, principal: Principal | None = None,
) -> tuple[ErrorCode, str | None, tuple[DescribedConfig, ...]]:
    """A mirror's configs, sorted by name, secrets replaced by the marker (DESCRIBE_CONFIGS)."""
    refused = _precheck(image, principal, AclOperation.DESCRIBE_CONFIGS, mirror_name)
    if refused is not None:
        return refused.response.error_code, refused.response.error_message, ()
    configs = image.mirrors.mirrors[mirror_name].configs
    shown = redact_config(configs)
    return ErrorCode.NONE, None, tuple(DescribedConfig(k, shown[k], is_sensitive(k)) for k in sorted(configs))


# ------------------------------------------------------------------------------ the reads


class ListedMirror(NamedTuple):
    name: str
    source_bootstrap: str
    source_cluster_id: str
    topic_count: int
    topic_names: tuple[str, ...]


class DescribedTopic(NamedTuple):
    name: str
    topic_id: uuid.UUID
    desired_state: DesiredState
    partitions: tuple[tuple[int, MirrorState], ...]
    # Counts per state (a partition with no state: UNKNOWN) when described from a ``StateTally``:
    # then no partitions are listed.
    state_counts: Mapping[MirrorState, int] | None = None


class DescribedMirror(NamedTuple):
    name: str
    error_code: ErrorCode
    error_message: str | None
    configs: dict[str, str | None]  # redacted
    topics: tuple[DescribedTopic, ...]


def _members_by_mirror(image: MetadataImage) -> dict[str, list[MirrorTopic]]:
    out: dict[str, list[MirrorTopic]] = {}
    for m in image.mirrors.topics.values():
        out.setdefault(m.mirror_name, []).append(m)
    return out


def list_cluster_mirrors(
    image: MetadataImage, include_topic_names: bool = False, *, principal: Principal | None = None,
    source_cluster_ids: Mapping[str, str] | None = None,
) -> tuple[ListedMirror, ...]:
    """Every mirror the principal may describe (the others are left out, as Kafka lists). The
    source cluster ID is the mirror's ``mirror.source.cluster.id``, else what its source last
    answered (``source_cluster_ids``, by mirror), else empty."""
    answered = source_cluster_ids or {}
    members = _members_by_mirror(image)
    out = []
    for name in sorted(image.mirrors.mirrors):
        if _denied(image, principal, AclOperation.DESCRIBE, name) is not None:
            continue
        mirror = image.mirrors.mirrors[name]
        ms = members.get(name, [])
        topic_names = tuple(sorted(image.topics.by_id[m.topic_id].name for m in ms)) if include_topic_names else ()
        cluster_id = mirror.configs.get(SOURCE_CLUSTER_ID_CONFIG) or answered.get(name, "")
        out.append(ListedMirror(name, mirror.source_bootstrap, cluster_id, len(ms), topic_names))
    return tuple(out)


def describe_cluster_mirrors(
    image: MetadataImage, mirror_names: Sequence[str] = (), *, states: StateView | None = None,
    principal: Principal | None = None, tally: StateTally | None = None,
) -> tuple[DescribedMirror, ...]:
    """Mirrors (all the principal may describe when ``mirror_names`` is empty, as a listing) with
    redacted configs, their topics' desired states and, given ``states``, each partition's state;
    given ``tally`` instead, each topic's counts per state and no partitions (a progress poll's
    cost then follows the topics). A mirror named and denied answers its authorization error."""
    names = list(mirror_names) or [n for n in sorted(image.mirrors.mirrors)
                                   if _denied(image, principal, AclOperation.DESCRIBE, n) is None]  # fmt: skip
    members = _members_by_mirror(image)
    out = []
    for name in names:
        mirror = image.mirrors.get(name)
        denied = _denied(image, principal, AclOperation.DESCRIBE, name)
        if denied is not None:
            out.append(DescribedMirror(name, denied.response.error_code, denied.response.error_message, {}, ()))
            continue
        if mirror is None:
            out.append(DescribedMirror(name, ErrorCode.UNKNOWN_CLUSTER_MIRROR,
                                       f"Cluster mirror {name!r} does not exist", {}, ()))
            continue
        topics = []
        for m in sorted(members.get(name, []), key=lambda m: image.topics.by_id[m.topic_id].name):
            t = image.topics.by_id[m.topic_id]
            if tally is not None:
                counts = tally.topic_counts(name, t.topic_id, t.partitions)
                topics.append(DescribedTopic(t.name, t.topic_id, m.desired_state, (), counts))
                continue
            ps = _partition_states(states, name, t) if states is not None else [(p, MirrorState.UNKNOWN) for p in sorted(t.partitions)]
            topics.append(DescribedTopic(t.name, t.topic_id, m.desired_state, tuple(ps)))
        out.append(DescribedMirror(name, ErrorCode.NONE, None, redact_config(mirror.configs), tuple(topics)))
    return tuple(out)
