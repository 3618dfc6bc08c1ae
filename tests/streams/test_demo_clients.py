"""The main job's client-side checks: the gap and duplicate accounting (pure), the verdict line
that fails on a gap or on a produce the mirror topic accepted before the stop, and the job's
aiokafka clients against a real clustermodel-server."""

from __future__ import annotations

import io
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from model_server import ServerProcess

from clustermodel.client import ClusterClient
from streams.demo.harness import GROUP, REFUSED_AS
from streams.demo.job import Demo
from streams.demo.clients import (ClientLoop, Consumed, Produced, account, committed_offsets, consume_group,
                                  create_topics, leave_open, produce_mix, refused_produce)  # fmt: skip

T = "orders"


def produced(n: int, status: str = "plain", start: int = 0, partition: int = 0) -> list[Produced]:
    return [Produced(T, partition, o, f"v{o}".encode(), status) for o in range(start, start + n)]


def read(offsets: range | list[int], partition: int = 0) -> list[Consumed]:
    return [Consumed(T, partition, o, f"v{o}".encode()) for o in offsets]


def test_clean_switch_with_duplicates_within_the_last_commit() -> None:
    # A read 0..7 and last committed 6: B resumes at 6 and reads 6..9 (6 and 7 twice).
    r = account(produced(10), read(range(8)), read(range(6, 10)), {(T, 0): 6}, {(T, 0): 6}, {(T, 0): 10})
    assert r.problems == []
    assert (r.produced, r.committed, r.consumed_a, r.consumed_b) == (10, 10, 8, 4)
    assert (r.duplicates, r.duplicate_bound, r.gaps, r.held) == (2, 2, 0, 0)


def test_a_committed_record_never_read_is_a_gap() -> None:
    # The group's offset on B skips record 8: B resumes past what A read.
    r = account(produced(10), read(range(8)), read([9]), {(T, 0): 8}, {(T, 0): 8}, {(T, 0): 10})
    assert r.gaps == 1 and any("never read (gaps): orders-0@8" in p for p in r.problems), r.problems


def test_records_past_the_read_committed_end_are_held_not_gaps() -> None:
    # 0..4 committed, 5 open (holds the LSO at 5), 6..7 committed behind it.
    recs = produced(5) + produced(1, "open", 5) + produced(2, "committed", 6)
    r = account(recs, read(range(5)), [], {(T, 0): 5}, {(T, 0): 5}, {(T, 0): 5})
    assert r.problems == [] and (r.gaps, r.held, r.left_open) == (0, 2, 1)


def test_duplicates_beyond_the_last_commit_fail() -> None:
    # The offsets on B are the last commit on A (4), but B reads from 0 again: 4 duplicates, bound 2.
    r = account(produced(6), read(range(6)), read(range(6)), {(T, 0): 4}, {(T, 0): 4}, {(T, 0): 6})
    assert r.duplicates == 6 and r.duplicate_bound == 2
    assert any("below the synced offset 4" in p for p in r.problems), r.problems
    assert any("6 duplicate(s), more than the 2" in p for p in r.problems), r.problems


def test_offsets_on_b_that_are_not_the_last_commit_fail() -> None:
    # A stale sync (offset 2, the last commit was 4): B rereads 2..3 as well.
    r = account(produced(6), read(range(6)), read(range(2, 6)), {(T, 0): 4}, {(T, 0): 2}, {(T, 0): 6})
    assert any("offset on B at the switch is 2, its last commit on A 4" in p for p in r.problems), r.problems
    assert any("4 duplicate(s), more than the 2" in p for p in r.problems), r.problems


def test_read_committed_must_not_show_aborted_or_unknown_or_changed_records() -> None:
    recs = produced(2) + produced(2, "aborted", 2)
    bad = read(range(4)) + [Consumed(T, 0, 9, b"x"), Consumed(T, 0, 1, b"changed")]
    r = account(recs, bad, [], {(T, 0): 4}, {(T, 0): 4}, {(T, 0): 4})
    text = "\n".join(r.problems)
    assert "orders-0@2, a record of an aborted transaction" in text
    assert "orders-0@9, which no producer wrote" in text
    assert "orders-0@1 = b'changed', produced b'v1'" in text


def test_verdict_fails_on_an_accepted_or_wrongly_refused_produce_and_on_gaps(tmp_path: Path) -> None:
    demo = Demo(tmp_path, seed=1, out=io.StringIO(), audit=False)
    demo.clients = account(produced(4), read(range(4)), [], {(T, 0): 4}, {(T, 0): 4}, {(T, 0): 4})
    demo.refused = REFUSED_AS
    assert demo.client_check() == []
    assert f"group {GROUP}: consumed 4 on A, 0 on B" in demo.out.getvalue()
    assert "gaps 0" in demo.out.getvalue() and f"refused ({REFUSED_AS})" in demo.out.getvalue()
    demo.refused = None
    assert demo.client_check() == ["clients: a produce to B's mirror topic was accepted before the stop"]
    demo.refused = "KafkaTimeoutError"
    assert "not UnknownError" in demo.client_check()[0]
    demo.refused = REFUSED_AS
    demo.clients = account(produced(4), read(range(3)), [], {(T, 0): 3}, {(T, 0): 3}, {(T, 0): 4})
    assert demo.client_check() and "gaps 1" in demo.out.getvalue()


@pytest.fixture
def model_port() -> Iterator[int]:
    """A clustermodel-server with clusters A and B and their Kafka listeners."""
    server = ServerProcess("--cluster", "A", "--cluster", "B", "--seed", "5", stderr=subprocess.DEVNULL)
    try:
        yield server.port
    finally:
        server.stop()


def test_the_demo_clients_on_real_listeners(model_port: int) -> None:
    """The job's clients against a real server: a group reading to the LSO while producers run
    sees every committed record once and nothing else; a read-only topic refuses a produce the
    way aiokafka 0.14 reports READ_ONLY_TOPIC, and accepts it once writable."""
    a, b = ClusterClient(model_port, "A"), ClusterClient(model_port, "B")
    boot_a, boot_b = a.bootstrap_servers(), b.bootstrap_servers()
    topics = {"t1": 2, "t2": 1}
    parts = [(t, p) for t, n in topics.items() for p in range(n)]
    apps = ClientLoop()
    try:
        apps.run(create_topics(boot_a, topics))
        stop, drain, seen = threading.Event(), threading.Event(), []  # type: ignore[var-annotated]
        producing = apps.submit(produce_mix(boot_a, "A", list(topics), stop, seed=3, records_per_s=500,
                                            txn_ratio=0.5, abort_ratio=0.5))  # fmt: skip
        group = apps.submit(consume_group(boot_a, "g", list(topics), len(parts), seen, drain, final_commit=True))
        time.sleep(1.5)
        stop.set()
        produced = producing.result(30)
        produced += apps.run(leave_open(boot_a, "A", list(topics), 1, seed=3))
        drain.set()
        ends = group.result(30)
        committed = apps.run(committed_offsets(boot_a, "g", parts))
        assert committed == ends  # the final commit is the read_committed end
        assert "demo-A-open-0" in a.open_transactional_ids()
        r = account(produced, seen, [], committed, committed, ends)
        assert r.problems == [] and (r.gaps, r.duplicates, r.held, r.left_open) == (0, 0, 0, 2)
        assert r.aborted > 0 and r.consumed_a == r.committed > 0

        meta = next(t for t in a.describe_topics() if t.name == "t2")
        b.create_topic("t2", meta.topic_id, 1, read_only=True, mirror_name="m", mirror_source_cluster_id=a.cluster_id())
        assert apps.run(refused_produce(boot_b, "t2")) == REFUSED_AS
        b.set_read_only(meta.topic_id, False)
        assert apps.run(refused_produce(boot_b, "t2")) is None
    finally:
        apps.close()
        a.close()
        b.close()
