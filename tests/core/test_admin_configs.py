"""Altering and describing a cluster mirror's configs (issue 14, section 4): per-key validation,
all or nothing, records only for the keys that change, ALTER_CONFIGS / DESCRIBE_CONFIGS ACLs."""

from __future__ import annotations

from coordinator.admin import (
    REDACTED,
    ConfigOp,
    Principal,
    alter_cluster_mirror_configs,
    create_cluster_mirror,
    describe_cluster_mirror_configs,
    start_mirror_topics,
    stop_mirror_topics,
)
from coordinator.delta import MetadataDelta
from coordinator.image import AclOperation
from coordinator.states import ErrorCode as E
from coordinator.workflows.config import MirrorConfig
from test_admin import acl, base, commit

SET, DELETE = ConfigOp.SET, ConfigOp.DELETE


def test_alter_writes_records_for_the_changed_keys_only_and_replays_into_the_image() -> None:
    img = base()
    r = alter_cluster_mirror_configs(img, "a-to-b", [("bootstrap.servers", SET, "src:9092"),  # unchanged
                                                     ("num.replica.fetchers", SET, "3"),
                                                     ("mirror.topics.include", SET, "a,c\\..*"),
                                                     ("sasl.jaas.config", DELETE, None)])  # fmt: skip
    assert r.ok and [t.error_code for t in r.response.topics] == [E.NONE] * 4
    assert [(x.message.name, x.message.value) for x in r.records] == [
        ("mirror.topics.include", "a,c\\..*"), ("num.replica.fetchers", "3"), ("sasl.jaas.config", None)]
    after = commit(img, r)
    configs = dict(after.mirrors.mirrors["a-to-b"].configs)
    assert configs == {"bootstrap.servers": "src:9092", "num.replica.fetchers": "3", "mirror.topics.include": "a,c\\..*"}
    assert MirrorConfig.from_properties(configs).num_fetchers == 3
    # Again: nothing changes, so nothing is written.
    again = alter_cluster_mirror_configs(after, "a-to-b", [("num.replica.fetchers", SET, "3"), ("sasl.jaas.config", DELETE, None)])
    assert again.ok and again.records == ()


def test_an_invalid_key_refuses_the_whole_request_with_invalid_config_per_key() -> None:
    img = base()
    r = alter_cluster_mirror_configs(img, "a-to-b", [("num.replica.fetchers", SET, "2"), ("no.such.key", SET, "1"),
                                                     ("fetch.backoff.ms", SET, "soon"),
                                                     ("support.unclean.leader.election", SET, "yes"),
                                                     ("mirror.topics.include", SET, "("),
                                                     ("bootstrap.servers", DELETE, None)])  # fmt: skip
    assert r.records == ()
    got = {t.name: (t.error_code, t.error_message) for t in r.response.topics}
    assert got["num.replica.fetchers"] == (E.NONE, None)
    for key in ("no.such.key", "fetch.backoff.ms", "support.unclean.leader.election", "mirror.topics.include", "bootstrap.servers"):
        assert got[key][0] == E.INVALID_CONFIG and key in got[key][1]
    assert "Unknown" in got["no.such.key"][1] and "soon" in got["fetch.backoff.ms"][1]
    assert commit(img, r) == img
    # A secret's value is never quoted back.
    bad = alter_cluster_mirror_configs(img, "a-to-b", [("sasl.jaas.config", SET, "pw"), ("x.password", SET, "hunter2")])
    assert all("hunter2" not in (t.error_message or "") for t in bad.response.topics)
    assert alter_cluster_mirror_configs(img, "a-to-b", [("num.replica.fetchers", SET, "2")], validate_only=True).records == ()


def test_create_refuses_what_alter_refuses_and_writes_nothing() -> None:
    img = base()
    r = create_cluster_mirror(img, "c-to-b", {"bootstrap.servers": "src:9092", "no.such.key": "1",
                                              "fetch.backoff.ms": "soon", "sasl.jaas.config": "hunter2"})  # fmt: skip
    assert r.records == ()
    code, message = r.response.first_error()
    assert code == E.INVALID_CONFIG and "no.such.key" in message and "fetch.backoff.ms" in message
    assert "hunter2" not in message
    ok = create_cluster_mirror(img, "c-to-b", {"bootstrap.servers": "src:9092", "fetch.backoff.ms": "250"})
    assert ok.ok and "c-to-b" in commit(img, ok).mirrors.mirrors


def test_alter_and_describe_configs_need_their_acls() -> None:
    img = base()
    d = MetadataDelta(img)
    for i, r in enumerate([acl("User:ops", AclOperation.ALTER_CONFIGS), acl("User:viewer", AclOperation.DESCRIBE_CONFIGS),
                           acl("User:alice", AclOperation.ALTER)]):
        d.replay(r, img.offset + 1 + i)
    img = d.apply()
    change = [("fetch.backoff.ms", SET, "500")]
    ops, viewer, alice = Principal("User:ops"), Principal("User:viewer"), Principal("User:alice")
    assert alter_cluster_mirror_configs(img, "a-to-b", change, principal=ops).ok
    for who in (viewer, alice):
        r = alter_cluster_mirror_configs(img, "a-to-b", change, principal=who)
        assert r.records == () and r.response.error_code == E.CLUSTER_MIRROR_AUTHORIZATION_FAILED
    assert describe_cluster_mirror_configs(img, "a-to-b", principal=ops)[0] == E.NONE  # ALTER_CONFIGS implies it
    assert describe_cluster_mirror_configs(img, "a-to-b", principal=viewer)[0] == E.NONE
    assert describe_cluster_mirror_configs(img, "a-to-b", principal=alice)[0] == E.CLUSTER_MIRROR_AUTHORIZATION_FAILED
    assert alter_cluster_mirror_configs(img, "nope", change).response.error_code == E.UNKNOWN_CLUSTER_MIRROR


def test_describe_configs_redacts_secrets() -> None:
    code, _, configs = describe_cluster_mirror_configs(base(), "a-to-b")
    assert code == E.NONE
    assert [(c.name, c.value, c.sensitive) for c in configs] == [
        ("bootstrap.servers", "src:9092", False), ("sasl.jaas.config", REDACTED, True)]


def test_a_pattern_is_refused_under_any_spelling_of_its_key_and_a_stored_one_is_left_out() -> None:
    img = base()
    for key in ("groups.include", "mirror.groups.include", "groups.exclude", "mirror.groups.exclude",
                "topic.properties.exclude", "mirror.topics.include", "mirror.topics.exclude"):
        r = alter_cluster_mirror_configs(img, "a-to-b", [(key, ConfigOp.SET, r"ok.*,\p{Lower}")])
        assert r.records == () and r.response.topics[0].error_code == E.INVALID_CONFIG, key
        assert key in r.response.topics[0].error_message and "\\p{...}" in r.response.topics[0].error_message
    for key in ("acls.include", "acl.include", "mirror.acls.include"):
        r = alter_cluster_mirror_configs(img, "a-to-b", [(key, ConfigOp.SET, "TOPIC;(?<n>x)")])
        assert r.records == () and "(?P<name>" in (r.response.topics[0].error_message or ""), key
    # Read back from a log an older version wrote: the rest is used, the key and why are kept.
    c = MirrorConfig.from_properties({"groups.exclude": "ops-g1,(x", "acls.include": "TOPIC;a.*,TOPIC;(x",
                                      "fetch.backoff.ms": "soon", "groups.include": "app.*"})  # fmt: skip
    assert (c.groups_exclude, c.acls_include, c.fetch_backoff_ms, c.groups_include) == (
        ("ops-g1",), ("TOPIC;a.*",), MirrorConfig().fetch_backoff_ms, ("app.*",))
    assert [k for k, _ in c.problems] == ["acls.include", "fetch.backoff.ms", "groups.exclude"]
    assert len(c.problems_of("consumer_group_offset")) == 1 and c.problems_of("topic_config") == []


def test_a_start_or_stop_pattern_is_refused_by_the_same_rule() -> None:
    img = base()
    for r in (start_mirror_topics(img, "a-to-b", include_patterns=["(?<n>orders)"]),
              start_mirror_topics(img, "a-to-b", include_patterns=["orders"], exclude_patterns=[r"a\z"]),
              stop_mirror_topics(img, "a-to-b", patterns=["ord[a&&b]"])):  # fmt: skip
        code, message = r.response.first_error()
        assert r.records == () and code == E.INVALID_REQUEST and "invalid pattern" in message, message
    r = start_mirror_topics(img, "a-to-b", include_patterns=["orders"], exclude_patterns=["x++"])
    assert "(in ExcludePatterns)" in (r.response.error_message or "")  # the request field it came in
