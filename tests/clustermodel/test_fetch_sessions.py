"""Fetch sessions on the model server: a long poll parks until a watched partition moves."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from clustermodel.client import ClusterClient
from clustermodel.errors import FetchSessionIdNotFound
from coordinator.ports import SourceUnavailable, TopicPartition


def _topic(client: ClusterClient, partitions: int = 2) -> list[TopicPartition]:
    name = f"watch-{uuid.uuid4().hex[:8]}"
    meta = client.add_topic(name, partitions)
    return [TopicPartition(meta.topic_id, p) for p in range(partitions)]


def _caught_up(client: ClusterClient, tp: TopicPartition) -> tuple[TopicPartition, int, int]:
    off = client.list_offsets(tp)
    return tp, off.hw, off.leader_epoch


def test_a_caught_up_partition_parks_until_max_wait(model_server: Any) -> None:
    with ClusterClient(model_server.port) as client, client.open_watch() as watch:
        tps = _topic(client)
        t0 = time.monotonic()
        sid, moved = watch.fetch_wait(0, [_caught_up(client, tp) for tp in tps], [], 300)
        assert moved == [] and sid > 0
        assert time.monotonic() - t0 >= 0.25


def test_an_append_wakes_a_parked_poll_and_only_the_changes_travel(model_server: Any) -> None:
    with ClusterClient(model_server.port) as client, client.open_watch() as watch:
        a, b = _topic(client)
        sid, moved = watch.fetch_wait(0, [_caught_up(client, a), _caught_up(client, b)], [], 0)
        assert moved == []
        name = next(t.name for t in client.describe_topics([a.topic_id]))

        def produce() -> None:
            with ClusterClient(model_server.port) as other:
                other.produce(name, 1, [(b"k", b"v")])

        timer = threading.Timer(0.2, produce)
        t0 = time.monotonic()
        timer.start()
        # An incremental request: nothing added, the session still watches both.
        sid2, moved = watch.fetch_wait(sid, [], [], 10_000)
        took = time.monotonic() - t0
        timer.join()
        assert sid2 == sid and moved == [b]
        assert 0.15 <= took < 5.0  # woken by the append, not by the 10 s max wait
        # b left the session when reported: a second append to it wakes nobody.
        client.produce(name, 1, [(b"k", b"v2")])
        assert watch.fetch_wait(sid, [], [], 200) == (sid, [])


def test_registration_behind_the_log_answers_at_once(model_server: Any) -> None:
    with ClusterClient(model_server.port) as client, client.open_watch() as watch:
        (tp,) = _topic(client, 1)
        name = next(t.name for t in client.describe_topics([tp.topic_id]))
        _, hw, epoch = _caught_up(client, tp)
        client.produce(name, 0, [(b"k", b"v")])
        t0 = time.monotonic()
        assert watch.fetch_wait(0, [(tp, hw, epoch)], [], 10_000)[1] == [tp]
        assert time.monotonic() - t0 < 5.0


def test_a_leader_change_and_a_removed_partition(model_server: Any) -> None:
    with ClusterClient(model_server.port) as client, client.open_watch() as watch:
        a, b = _topic(client)
        name = next(t.name for t in client.describe_topics([a.topic_id]))
        sid, _ = watch.fetch_wait(0, [_caught_up(client, a), _caught_up(client, b)], [], 0)
        sid, moved = watch.fetch_wait(sid, [], [a], 0)  # a is no longer watched
        client.produce(name, 0, [(b"k", b"v")])
        leader = client.describe_topics([b.topic_id])[0].partitions[1].leader
        client.elect_leader(name, 1, next(x for x in (0, 1, 2) if x != leader))
        assert watch.fetch_wait(sid, [], [], 2_000)[1] == [b]


def test_an_unknown_session_is_fetch_session_id_not_found(model_server: Any) -> None:
    with ClusterClient(model_server.port) as client, client.open_watch() as watch:
        sid, _ = watch.fetch_wait(0, [], [], 0)
        with client.open_watch() as other, pytest.raises(FetchSessionIdNotFound):
            other.fetch_wait(sid, [], [], 0)  # sessions belong to their connection
        with pytest.raises(FetchSessionIdNotFound):
            watch.fetch_wait(sid + 1000, [], [], 0)


def test_an_unreachable_source_fails_the_long_poll(server_factory: Any) -> None:
    server = server_factory("--cluster", "default", "--seed", "2")
    with ClusterClient(server.port) as client, client.open_watch() as watch:
        tps = _topic(client)
        client.set_unreachable(True)
        with pytest.raises(SourceUnavailable):
            watch.fetch_wait(0, [(tp, 0, 0) for tp in tps], [], 100)
