"""Controller-side validation of the cluster mirror admin requests."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.admin import (
    REDACTED,
    AdminResult,
    Principal,
    create_cluster_mirror,
    delete_cluster_mirror,
    describe_cluster_mirrors,
    discover_mirror_topics,
    list_cluster_mirrors,
    pause_mirror_topics,
    redact_config,
    resume_mirror_topics,
    start_mirror_topics,
    stop_mirror_topics,
)
from coordinator.changes import MirrorPartitionKey, local_changes
from coordinator.delta import MetadataDelta
from coordinator.image import (
    AclOperation,
    AclPermissionType,
    AclResourceType,
    MetadataImage,
    PatternType,
)
from coordinator.states import DesiredState, ErrorCode, MirrorState
from test_image_delta import R, image_of, tid_

E = ErrorCode
S = MirrorState
A, B, C = tid_(1), tid_(2), tid_(3)


def commit(image: MetadataImage, result: AdminResult) -> MetadataImage:
    """What the runtime does: append the records, replay them; they must replay cleanly."""
    d = MetadataDelta(image)
    for i, r in enumerate(result.records):
        assert d.replay(r, image.offset + 1 + i, 2) is None
    return d.apply()


def base() -> MetadataImage:
    """Topics a (2 partitions), b, c; mirror a-to-b created through the admin path."""
    img = image_of(R.topic("a", A, 2) + R.topic("b", B) + R.topic("c.x", C) + R.topic("__consumer_offsets", tid_(9)))
    return commit(img, create_cluster_mirror(img, "a-to-b", {"bootstrap.servers": "src:9092", "sasl.jaas.config": "pw"}))


def states_of(img: MetadataImage, state: MirrorState, mirror: str = "a-to-b") -> dict[tuple[str, uuid.UUID, int], MirrorState]:
    return {(mirror, t.topic_id, p): state for t in img.topics.by_id.values() for p in t.partitions}


def codes(result: AdminResult) -> list[ErrorCode]:
    return [t.error_code for t in result.response.topics]


def refused(result: AdminResult, code: ErrorCode) -> None:
    assert result.records == ()
    assert result.response.first_error()[0] == code, result.response


# ---------------------------------------------------------------------- create / delete


def test_create_records_one_config_per_key_and_replays_to_the_mirror() -> None:
    img = base()
    mirror = img.mirrors.get("a-to-b")
    assert mirror is not None and dict(mirror.configs) == {"bootstrap.servers": "src:9092", "sasl.jaas.config": "pw"}
    refused(create_cluster_mirror(img, "a-to-b", {"bootstrap.servers": "x"}), E.CLUSTER_MIRROR_ALREADY_EXISTS)
    refused(create_cluster_mirror(img, "bad/name", {"bootstrap.servers": "x"}), E.INVALID_REQUEST)
    refused(create_cluster_mirror(img, "b-to-a", {"sasl.jaas.config": "x"}), E.INVALID_CONFIG)
    refused(create_cluster_mirror(img, "b-to-a", {"bootstrap.servers": "x", "mirror.topics.include": "a("}), E.INVALID_CONFIG)


def test_unknown_mirror_is_refused_by_every_write() -> None:
    img = base()
    for result in (delete_cluster_mirror(img, "nope"), start_mirror_topics(img, "nope", ["a"]),
                   stop_mirror_topics(img, "nope", ["a"]), pause_mirror_topics(img, "nope", ["a"]),
                   resume_mirror_topics(img, "nope", ["a"])):
        refused(result, E.UNKNOWN_CLUSTER_MIRROR)
        assert "'nope'" in (result.response.error_message or "")


def test_delete_refuses_a_mirror_that_is_not_empty_then_detaches_stopped_topics() -> None:
    img = commit(base(), start_mirror_topics(base(), "a-to-b", ["a", "b"]))
    result = delete_cluster_mirror(img, "a-to-b")
    refused(result, E.CLUSTER_MIRROR_NOT_EMPTY)
    assert "'a', 'b'" in (result.response.error_message or "")
    img = commit(img, stop_mirror_topics(img, "a-to-b", ["a", "b"]))
    refused(delete_cluster_mirror(img, "a-to-b", states=states_of(img, S.STOPPING)), E.MIRROR_TOPIC_BEING_STOPPED)
    refused(delete_cluster_mirror(img, "a-to-b", states=states_of(img, S.FAILED)), E.INVALID_CLUSTER_MIRROR_STATES)
    result = delete_cluster_mirror(img, "a-to-b", states=states_of(img, S.STOPPED))
    d = MetadataDelta(img)
    for i, r in enumerate(result.records):
        assert d.replay(r, img.offset + 1 + i) is None
    after = d.apply()
    assert after.mirrors.get("a-to-b") is None and not after.mirrors.topics
    assert len(local_changes(d).removed) == 3


# ------------------------------------------------------------------------------- start


def test_start_writes_start_records_and_skips_topics_already_started() -> None:
    img = base()
    result = start_mirror_topics(img, "a-to-b", ["a", A, "nope", "__consumer_offsets"])
    assert sorted(codes(result)) == sorted([E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_TOPIC_EXCEPTION])
    # only the legal topic gets its record; refused ones (and the include list) change nothing
    assert [(r.api_key, r.message.topic_id) for r in result.records] == [(29, A)]
    result = start_mirror_topics(img, "a-to-b", ["a", A])
    started = commit(img, result)
    member = started.mirror_topic(A)
    assert member is not None and (member.mirror_name, member.desired_state) == ("a-to-b", DesiredState.START)
    assert started.mirrors.get("a-to-b").configs["mirror.topics.include"] == "a"  # type: ignore[union-attr]
    again = start_mirror_topics(started, "a-to-b", ["a"])
    assert again.records == () and codes(again) == [E.NONE]


def test_start_refusals() -> None:
    img = base()
    img = commit(img, create_cluster_mirror(img, "c-to-b", {"bootstrap.servers": "c:9092"}))
    img = commit(img, start_mirror_topics(img, "c-to-b", ["b"]))
    img = commit(img, start_mirror_topics(img, "a-to-b", ["a"]))
    img = commit(img, pause_mirror_topics(img, "a-to-b", ["a"]))
    result = start_mirror_topics(img, "a-to-b", ["b"])
    refused(result, E.TOPIC_ALREADY_IN_CLUSTER_MIRROR)
    assert "'c-to-b'" in (result.response.topics[0].error_message or "")
    refused(start_mirror_topics(img, "a-to-b", ["a"]), E.MIRROR_TOPIC_NOT_STOPPED)
    refused(start_mirror_topics(img, "a-to-b", include_patterns=["("]), E.INVALID_REQUEST)
    refused(start_mirror_topics(img, "a-to-b"), E.INVALID_REQUEST)


def test_failback_needs_stopped_partitions() -> None:
    img = base()
    img = commit(img, start_mirror_topics(img, "a-to-b", ["a"]))
    img = commit(img, stop_mirror_topics(img, "a-to-b", ["a"]))
    stopping = {("a-to-b", A, 0): S.STOPPED, ("a-to-b", A, 1): S.STOPPING}
    result = start_mirror_topics(img, "a-to-b", ["a"], states=stopping)
    refused(result, E.MIRROR_TOPIC_BEING_STOPPED)
    assert "STOPPING [1]" in (result.response.topics[0].error_message or "")
    refused(start_mirror_topics(img, "a-to-b", ["a"], states={("a-to-b", A, 0): S.MIRRORING}), E.MIRROR_TOPIC_NOT_STOPPED)
    d = MetadataDelta(img)
    for i, r in enumerate(start_mirror_topics(img, "a-to-b", ["a"], states=states_of(img, S.STOPPED)).records):
        d.replay(r, img.offset + 1 + i)
    assert local_changes(d).start == (MirrorPartitionKey("a-to-b", A, 0), MirrorPartitionKey("a-to-b", A, 1))


def test_a_stopped_topic_can_move_to_another_mirror() -> None:
    img = base()
    img = commit(img, start_mirror_topics(img, "a-to-b", ["b"]))
    img = commit(img, stop_mirror_topics(img, "a-to-b", ["b"]))
    img = commit(img, create_cluster_mirror(img, "c-to-b", {"bootstrap.servers": "c:9092"}))
    d = MetadataDelta(img)
    for i, r in enumerate(start_mirror_topics(img, "c-to-b", ["b"]).records):
        d.replay(r, img.offset + 1 + i)
    ch = local_changes(d)
    assert ch.removed == (MirrorPartitionKey("a-to-b", B, 0),) and ch.start == (MirrorPartitionKey("c-to-b", B, 0),)


def test_a_regex_start_does_not_rediscover_a_stopped_topic() -> None:
    img = base()
    img = commit(img, start_mirror_topics(img, "a-to-b", include_patterns=["[ab]"]))
    assert {img.topics.by_id[t].name for t in img.mirrors.topics} == {"a", "b"}
    img = commit(img, stop_mirror_topics(img, "a-to-b", ["a"]))
    result = start_mirror_topics(img, "a-to-b", include_patterns=[".*"])
    assert [t.name for t in result.response.topics] == ["c.x"]  # not a (stopped), b (started), __consumer_offsets
    assert commit(img, result).mirror_topic(A).desired_state is DesiredState.STOP  # type: ignore[union-attr]
    by_name = start_mirror_topics(img, "a-to-b", ["a"])  # failback by name works
    assert commit(img, by_name).mirror_topic(A).desired_state is DesiredState.START  # type: ignore[union-attr]


def source_ids(img: MetadataImage) -> dict[str, uuid.UUID]:
    return {t.name: t.topic_id for t in img.topics.by_id.values()}


def test_discovery_starts_new_topics_a_started_pattern_selects() -> None:
    img = base()
    img = commit(img, start_mirror_topics(img, "a-to-b", include_patterns=["a|pay.*"], exclude_patterns=["pay-internal"]))
    assert {img.topics.by_id[t].name for t in img.mirrors.topics} == {"a"}
    assert discover_mirror_topics(img, "a-to-b", source_ids(img)).records == ()  # nothing new yet
    new, internal = tid_(20), tid_(21)
    img = commit(img, AdminResult(tuple(R.topic("pay-new", new, 3) + R.topic("pay-internal", internal)), None))  # type: ignore[arg-type]
    found = discover_mirror_topics(img, "a-to-b", source_ids(img))
    assert [t.name for t in found.response.topics] == ["pay-new"]
    after = commit(img, found)
    assert after.mirror_topic(new) is not None and after.mirror_topic(new).desired_state is DesiredState.START  # type: ignore[union-attr]
    assert after.mirror_topic(internal) is None  # excluded
    assert local_changes(img, after).start == tuple(MirrorPartitionKey("a-to-b", new, p) for p in range(3))
    assert discover_mirror_topics(after, "a-to-b", source_ids(after)).records == ()  # once
    # a source topic only known locally under another topic ID is not this one: left alone
    assert discover_mirror_topics(img, "a-to-b", {"pay-new": tid_(99)}).records == ()
    assert discover_mirror_topics(img, "no-such-mirror", source_ids(img)).records == ()


def test_discovery_never_restarts_a_stopped_topic_nor_another_mirrors_topic() -> None:
    img = base()
    img = commit(img, create_cluster_mirror(img, "other", {"bootstrap.servers": "x:9092"}))
    img = commit(img, start_mirror_topics(img, "other", ["c.x"]))
    img = commit(img, start_mirror_topics(img, "a-to-b", include_patterns=[".*"]))
    assert {img.topics.by_id[m.topic_id].name for m in img.mirrors.topics_of("a-to-b")} == {"a", "b"}
    img = commit(img, stop_mirror_topics(img, "a-to-b", ["a"]))  # stopped by name: .* still includes it
    assert discover_mirror_topics(img, "a-to-b", source_ids(img)).records == ()
    # a topic with a partition still STOPPING under this mirror is not started behind the stop's back
    d = tid_(30)
    img = commit(img, AdminResult(tuple(R.topic("d", d)), None))  # type: ignore[arg-type]
    assert discover_mirror_topics(img, "a-to-b", source_ids(img), states={("a-to-b", d, 0): S.STOPPING}).records == ()
    assert [t.name for t in discover_mirror_topics(img, "a-to-b", source_ids(img)).response.topics] == ["d"]


# -------------------------------------------------------------------------------- stop


def test_stop_refusals_and_idempotence() -> None:
    img = base()
    img = commit(img, start_mirror_topics(img, "a-to-b", ["a"]))
    refused(stop_mirror_topics(img, "a-to-b", ["b"]), E.TOPIC_NOT_IN_CLUSTER_MIRROR)
    refused(stop_mirror_topics(img, "a-to-b", ["a"], states={("a-to-b", A, 0): S.STOPPING}), E.MIRROR_TOPIC_BEING_STOPPED)
    refused(stop_mirror_topics(img, "a-to-b", ["a"], states={("a-to-b", A, 0): S.MIRRORING}),
            E.INVALID_CLUSTER_MIRROR_STATES)  # partition 1 has no state yet
    ok = stop_mirror_topics(img, "a-to-b", ["a"], states={("a-to-b", A, 0): S.FAILED, ("a-to-b", A, 1): S.PAUSED})
    assert len(ok.records) == 1 and ok.ok  # failover works from FAILED and PAUSED (SPEC transitions)
    stopped = commit(img, ok)
    again = stop_mirror_topics(stopped, "a-to-b", ["a"])
    assert again.records == () and codes(again) == [E.NONE]


def test_stop_by_pattern_moves_it_to_the_exclude_list() -> None:
    img = base()
    img = commit(img, start_mirror_topics(img, "a-to-b", ["a", "b"], include_patterns=["[ab]"]))
    after = commit(img, stop_mirror_topics(img, "a-to-b", patterns=["[ab]"]))
    assert {after.mirror_topic(t).desired_state for t in (A, B)} == {DesiredState.STOP}  # type: ignore[union-attr]
    configs = after.mirrors.get("a-to-b").configs  # type: ignore[union-attr]
    assert configs["mirror.topics.include"] == "a,b" and configs["mirror.topics.exclude"] == "[ab]"


def test_a_mass_stop_is_one_record_per_topic() -> None:
    img = base()
    img = commit(img, start_mirror_topics(img, "a-to-b", ["a", "b", "c.x"]))
    result = stop_mirror_topics(img, "a-to-b", patterns=[".*"])
    assert sum(r.api_key == 29 for r in result.records) == 3
    d = MetadataDelta(img)
    for i, r in enumerate(result.records):
        d.replay(r, img.offset + 1 + i)
    assert len(local_changes(d).stop) == 4


# ------------------------------------------------------------------------ pause / resume


def test_pause_refusals() -> None:
    img = base()
    refused(pause_mirror_topics(img, "a-to-b", ["a"]), E.TOPIC_NOT_IN_CLUSTER_MIRROR)
    img = commit(img, start_mirror_topics(img, "a-to-b", ["a", "b"]))
    refused(pause_mirror_topics(img, "a-to-b", ["a"], states={("a-to-b", A, 0): S.PREPARING}), E.INVALID_CLUSTER_MIRROR_STATES)
    paused = commit(img, pause_mirror_topics(img, "a-to-b", ["a"], states=states_of(img, S.MIRRORING)))
    refused(pause_mirror_topics(paused, "a-to-b", ["a"]), E.MIRROR_TOPIC_ALREADY_PAUSED)
    stopped = commit(img, stop_mirror_topics(img, "a-to-b", ["b"]))
    refused(pause_mirror_topics(stopped, "a-to-b", ["b"], states={("a-to-b", B, 0): S.STOPPING}), E.MIRROR_TOPIC_BEING_STOPPED)
    result = pause_mirror_topics(stopped, "a-to-b", ["b"])
    refused(result, E.INVALID_CLUSTER_MIRROR_STATES)
    assert "desired state STOP" in (result.response.topics[0].error_message or "")


def test_resume_is_a_start_on_a_paused_topic() -> None:
    img = base()
    img = commit(img, start_mirror_topics(img, "a-to-b", ["a"]))
    refused(resume_mirror_topics(img, "a-to-b", ["a"]), E.MIRROR_TOPIC_NOT_PAUSED)
    paused = commit(img, pause_mirror_topics(img, "a-to-b", ["a"]))
    refused(resume_mirror_topics(paused, "a-to-b", ["a"], states={("a-to-b", A, 0): S.PAUSING}), E.MIRROR_TOPIC_NOT_PAUSED)
    refused(resume_mirror_topics(paused, "a-to-b", ["a"], states={("a-to-b", A, 1): S.STOPPING}), E.MIRROR_TOPIC_BEING_STOPPED)
    result = resume_mirror_topics(paused, "a-to-b", ["a"], states=states_of(paused, S.PAUSED))
    assert [r.message.desired_state for r in result.records] == [int(DesiredState.START)]
    d = MetadataDelta(paused)
    d.replay(result.records[0], paused.offset + 1)
    assert len(local_changes(d).resume) == 2


def test_a_refused_topic_does_not_stop_the_others_nor_change_patterns() -> None:
    img = base()
    result = start_mirror_topics(img, "a-to-b", ["a", "nope"], include_patterns=["c.*"])
    assert sorted(codes(result)) == [E.NONE, E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION]
    after = commit(img, result)
    assert after.mirror_topic(A) is not None and after.mirror_topic(C) is not None
    assert "mirror.topics.include" not in after.mirrors.get("a-to-b").configs  # type: ignore[union-attr]


# ------------------------------------------------------------------ state validation offset


def test_state_validation_offset_refuses_racing_requests() -> None:
    img = base()
    img = commit(img, start_mirror_topics(img, "a-to-b", ["a"]))
    validated_at = img.offset
    img = commit(img, pause_mirror_topics(img, "a-to-b", ["a"]))  # someone else raced us
    refused(resume_mirror_topics(img, "a-to-b", ["a"], state_validation_offset=validated_at - 1), E.INVALID_CLUSTER_MIRROR_STATES)
    refused(resume_mirror_topics(img, "a-to-b", ["a"], state_validation_offset=img.offset + 5), E.INVALID_CLUSTER_MIRROR_STATES)
    refused(resume_mirror_topics(img, "a-to-b", ["a"], state_validation_offset=-7), E.INVALID_REQUEST)
    assert resume_mirror_topics(img, "a-to-b", ["a"], state_validation_offset=img.offset).ok
    assert resume_mirror_topics(img, "a-to-b", ["a"], state_validation_offset=-1).ok
    refused(delete_cluster_mirror(img, "a-to-b", state_validation_offset=validated_at), E.INVALID_CLUSTER_MIRROR_STATES)


# ------------------------------------------------------------------------- authorization


def acl(principal: str, op: AclOperation, name: str = "a-to-b", allow: bool = True,
        pattern: PatternType = PatternType.LITERAL) -> Any:
    return R.Acl(id=uuid.uuid5(uuid.NAMESPACE_OID, f"{principal}{op}{name}{allow}{pattern}"),
                 resource_type=int(AclResourceType.CLUSTER_MIRROR), resource_name=name, pattern_type=int(pattern),
                 principal=principal, host="*", operation=int(op),
                 permission_type=int(AclPermissionType.ALLOW if allow else AclPermissionType.DENY))


def test_cluster_mirror_acls_authorize_each_operation() -> None:
    img = base()
    d = MetadataDelta(img)
    for i, r in enumerate([acl("User:alice", AclOperation.ALTER), acl("User:bob", AclOperation.ALL, "a-", pattern=PatternType.PREFIXED),
                           acl("User:bob", AclOperation.DELETE, allow=False), acl("User:carol", AclOperation.CREATE, "*")]):
        d.replay(r, img.offset + 1 + i)
    img = d.apply()
    alice, bob, carol = Principal("User:alice"), Principal("User:bob"), Principal("User:carol")
    assert start_mirror_topics(img, "a-to-b", ["a"], principal=alice).ok
    refused(start_mirror_topics(img, "a-to-b", ["a"], principal=carol), E.CLUSTER_MIRROR_AUTHORIZATION_FAILED)
    refused(delete_cluster_mirror(img, "a-to-b", principal=alice), E.CLUSTER_MIRROR_AUTHORIZATION_FAILED)
    refused(delete_cluster_mirror(img, "a-to-b", principal=bob), E.CLUSTER_MIRROR_AUTHORIZATION_FAILED)  # DENY wins
    assert pause_mirror_topics(img, "a-to-b", ["a"], principal=bob).response.topics  # ALL on a- prefix
    assert create_cluster_mirror(img, "x", {"bootstrap.servers": "x"}, principal=carol).ok
    refused(create_cluster_mirror(img, "x", {"bootstrap.servers": "x"}, principal=alice), E.CLUSTER_MIRROR_AUTHORIZATION_FAILED)
    assert [m.name for m in list_cluster_mirrors(img, principal=alice)] == ["a-to-b"]  # ALTER implies DESCRIBE
    assert list_cluster_mirrors(img, principal=carol) == ()
    assert Principal("User:root", super_users=frozenset({"User:root"})) and delete_cluster_mirror(
        img, "a-to-b", principal=Principal("User:root", super_users=frozenset({"User:root"}))).ok


# ---------------------------------------------------------------------- reads and secrets


def test_describe_and_list_never_show_credentials() -> None:
    img = base()
    img = commit(img, start_mirror_topics(img, "a-to-b", ["a"]))
    described = describe_cluster_mirrors(img, ["a-to-b", "nope"], states={("a-to-b", A, 0): S.MIRRORING})
    assert described[0].configs["sasl.jaas.config"] == REDACTED and "pw" not in repr(described)
    assert described[0].topics[0].partitions == ((0, S.MIRRORING), (1, S.UNKNOWN))
    assert described[1].error_code == E.UNKNOWN_CLUSTER_MIRROR
    listed = list_cluster_mirrors(img, include_topic_names=True)
    assert listed[0][:2] == ("a-to-b", "src:9092") and listed[0].topic_names == ("a",)


@pytest.mark.parametrize("key", ["sasl.jaas.config", "ssl.keystore.password", "ssl.key.password", "ssl.truststore.password",
                                 "basic.auth.user.info", "my.secret", "oauth.token.endpoint.credentials", "sasl.oauthbearer.token",
                                 "ssl.keystore.key"])
def test_redact_config_hides_credentials(key: str) -> None:
    assert redact_config({key: "s3cr3t", "bootstrap.servers": "h:9092"}) == {key: REDACTED, "bootstrap.servers": "h:9092"}


# --------------------------------------------------------------------------- properties


ALLOWED = {E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_CLUSTER_MIRROR, E.TOPIC_ALREADY_IN_CLUSTER_MIRROR,
           E.TOPIC_NOT_IN_CLUSTER_MIRROR, E.MIRROR_TOPIC_ALREADY_PAUSED, E.MIRROR_TOPIC_NOT_PAUSED,
           E.MIRROR_TOPIC_BEING_STOPPED, E.CLUSTER_MIRROR_NOT_EMPTY, E.INVALID_CLUSTER_MIRROR_STATES,
           E.MIRROR_TOPIC_NOT_STOPPED, E.CLUSTER_MIRROR_ALREADY_EXISTS}
OP = st.tuples(st.sampled_from(["create", "delete", "start", "stop", "pause", "resume"]),
               st.sampled_from(["a-to-b", "c-to-b"]), st.lists(st.sampled_from(["a", "b", "c.x"]), min_size=1, max_size=3))


@settings(max_examples=40, deadline=None)
@given(st.lists(OP, min_size=1, max_size=25))
def test_any_sequence_of_requests_keeps_the_image_consistent(ops: list[tuple[str, str, list[str]]]) -> None:
    img = base()
    for op, mirror, topics in ops:
        if op == "create":
            result = create_cluster_mirror(img, mirror, {"bootstrap.servers": "h:1"})
        elif op == "delete":
            result = delete_cluster_mirror(img, mirror)
        else:
            fn = {"start": start_mirror_topics, "stop": stop_mirror_topics,
                  "pause": pause_mirror_topics, "resume": resume_mirror_topics}[op]
            result = fn(img, mirror, topics)
        code, _ = result.response.first_error()
        assert code in ALLOWED
        if result.response.error_code != E.NONE:
            assert result.records == ()
        img = commit(img, result)  # records always replay cleanly
        for m in img.mirrors.topics.values():  # memberships only point at existing mirrors
            assert img.mirrors.get(m.mirror_name) is not None
