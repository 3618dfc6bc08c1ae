"""Topic selection for starts and discovery."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.states import DesiredState
from coordinator.topic_filter import (
    EXCLUDE_CONFIG,
    INCLUDE_CONFIG,
    InvalidPattern,
    TopicFilter,
    discover_topics,
    is_internal,
    join_patterns,
    literal_pattern,
    select_topics,
    split_patterns,
)
from test_image_delta import R, image_of, tid_

TOPICS = ["orders", "orders.eu", "ordersXeu", "payments", "__consumer_offsets", "__mirror_state", "logs-1"]


def test_literals_and_regexes_are_merged_and_internal_topics_left_out() -> None:
    sel = select_topics(TOPICS, ["payments"], ["orders.*", "__.*"])
    assert sel.topics == ("payments", "orders", "orders.eu", "ordersXeu")
    assert sel.rejected == () and sel.skipped == ()
    assert is_internal("__mirror_state") and not is_internal("_private")


def test_internal_topics_are_refused_by_name_unless_asked_for() -> None:
    sel = select_topics(TOPICS, ["__consumer_offsets", "bad topic"], [])
    assert [n for n, _ in sel.rejected] == ["__consumer_offsets", "bad topic"] and sel.topics == ()
    assert select_topics(TOPICS, ["__consumer_offsets"], [], include_internal=True).topics == ("__consumer_offsets",)


def test_exclude_wins_over_include_but_not_over_an_explicit_name() -> None:
    sel = select_topics(TOPICS, ["orders.eu"], ["orders.*"], ["orders\\..*", "ordersX.*"])
    assert sel.topics == ("orders.eu", "orders")


def test_a_skipped_match_is_reported_with_its_reason() -> None:
    sel = select_topics(TOPICS, [], ["orders.*"], skip=lambda n: "stopped" if n == "orders" else None)
    assert sel.topics == ("orders.eu", "ordersXeu") and sel.skipped == (("orders", "stopped"),)


def test_literal_patterns_match_only_their_topic() -> None:
    f = TopicFilter((literal_pattern("orders.eu"),))
    assert f.matches("orders.eu") and not f.matches("ordersXeu")


@given(st.from_regex(r"[a-zA-Z0-9._-]{1,40}", fullmatch=True))
def test_a_literal_pattern_matches_its_name(name: str) -> None:
    if name in (".", ".."):
        return
    assert TopicFilter((literal_pattern(name),), include_internal=True).matches(name)


@pytest.mark.parametrize("bad", ["(", "a[", "x,y", "*"])
def test_bad_patterns_are_refused(bad: str) -> None:
    with pytest.raises(InvalidPattern):
        select_topics(TOPICS, [], [bad])


def test_pattern_lists_round_trip_through_config_values() -> None:
    assert split_patterns(" a , b,,c ") == ["a", "b", "c"] and split_patterns(None) == []
    assert join_patterns(["a", "b", "a"]) == "a,b"
    f = TopicFilter.from_config({INCLUDE_CONFIG: "orders.*,payments", EXCLUDE_CONFIG: "orders\\.eu"})
    assert [t for t in TOPICS if f.matches(t)] == ["orders", "ordersXeu", "payments"]


def test_discovery_skips_attached_topics_and_follows_the_mirror_configs() -> None:
    a, b = tid_(1), tid_(2)
    img = image_of(R.topic("orders", a) + R.topic("orders.eu", b)
                   + R.mirror("m", **{INCLUDE_CONFIG: "orders.*", EXCLUDE_CONFIG: "ordersX.*"})
                   + [R.state(a, "m", DesiredState.STOP)])
    assert discover_topics(img, "m", TOPICS) == ("orders.eu",)  # orders is stopped: not rediscovered
    assert discover_topics(img, "nope", TOPICS) == ()


def test_discovery_with_a_stored_pattern_it_cannot_use() -> None:
    a, b = tid_(1), tid_(2)
    topics = R.topic("orders", a) + R.topic("orders.eu", b)
    # An include it cannot use is left out; the others still discover.
    img = image_of(topics + R.mirror("m", **{INCLUDE_CONFIG: "ord(ers,orders\\..*"}))
    assert discover_topics(img, "m", TOPICS) == ("orders.eu",)
    # An exclude it cannot use: what it keeps out is unknown, and a start makes the destination's
    # topic read-only, so nothing is discovered (--describe says why).
    img = image_of(topics + R.mirror("m", **{INCLUDE_CONFIG: "orders.*", EXCLUDE_CONFIG: "x++"}))
    assert discover_topics(img, "m", TOPICS) == ()
    # Java's meaning: '.' is any character but a line terminator, \w is ASCII.
    img = image_of(topics + R.mirror("m", **{INCLUDE_CONFIG: r"orders\.\w+"}))
    assert discover_topics(img, "m", TOPICS) == ("orders.eu",)
