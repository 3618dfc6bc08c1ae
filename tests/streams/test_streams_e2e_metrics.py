"""End to end, real processes: /metrics, /healthz and /readyz of a worker and a controller (issue 14).

The model server, B's controller and a ``kip1279-worker`` on the session's broker, each with
``metrics.listener`` on (port 0: each prints where it listens). The test scrapes both over real
HTTP, parses the text with prometheus-client's parser and checks the figures against what the
clusters and the ``__mirror_state`` changelog say: after a start (mirroring, caught up), during
a source outage (FAILED, retried), and after a failover (--stop) during that outage.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_streams_e2e_source_outage import BACKOFF, MIRROR
from worker_harness import Rig

from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker
from streams.demo.harness import log_batches

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get(address: str, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(address: str) -> Samples:
    status, text = get(address, "/metrics")
    assert status == 200, text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}  # fmt: skip


def value(got: Samples, name: str, **labels: str) -> float:
    return got[(name, tuple(sorted(labels.items())))]


def states(got: Samples) -> dict[str, float]:
    return {dict(k[1])["state"]: v for k, v in got.items()
            if k[0] == "kip1279_mirror_partitions" and dict(k[1])["mirror"] == MIRROR}  # fmt: skip


def lag_series(got: Samples) -> dict[tuple[str, str], float]:
    return {(dict(k[1])["topic"], dict(k[1])["partition"]): v for k, v in got.items()
            if k[0] == "kip1279_mirror_partition_lag_offsets"}  # fmt: skip


@pytest.mark.slow
def test_metrics_and_health_over_http_after_a_start_an_outage_and_a_failover(
        broker: LocalBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("KIP1279_METRICS_LISTENER", "127.0.0.1:0")  # both processes read metrics.listener from it
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 2, "audit": 1}, tick=0.1, seed=41)
    try:
        rig.start(("B",))
        controller = rig.printed("controller-B", "METRICS")
        rig.spawn_worker("B")
        worker = rig.printed("worker-B", "METRICS")
        assert get(worker, "/healthz") == (200, "ok\n")
        rig.wait("the worker ready", lambda: get(worker, "/readyz") == (200, "ok\n"), 60)
        assert get(controller, "/healthz") == (200, "ok\n") and get(controller, "/readyz")[0] == 200
        n = len(rig.tps)
        names = {tid: name for name, tid in rig.ids.items()}

        # 1. A start: every partition MIRRORING, caught up; the fetched figures are B's log.
        a, b = rig.clients["A"], rig.clients["B"]
        rig.create_mirror("B", MIRROR, "A", BACKOFF)
        rig.produce("A", 0.8, 41)
        rig.start_topics("B", MIRROR)
        rig.wait("every partition MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING))
        rig.wait("B to match A", lambda: rig.in_sync("A", "B"))
        rig.wait("lag 0 on every partition", lambda: (ls := lag_series(scrape(worker))) and len(ls) == n
                 and set(ls.values()) == {0}, 30)  # fmt: skip
        got = scrape(worker)
        assert states(got) == {s.name: (n if s is MirrorState.MIRRORING else 0) for s in MirrorState}
        assert set(lag_series(got)) == {(names[tp.topic_id], str(tp.partition)) for tp in rig.tps}
        assert value(got, "kip1279_mirror_max_lag_offsets", mirror=MIRROR) == 0
        copied = [x for tp in rig.tps for x in log_batches(b, tp)]
        assert value(got, "kip1279_mirror_fetch_records_total", mirror=MIRROR) == sum(x.record_count for x in copied)
        assert value(got, "kip1279_mirror_fetch_bytes_total", mirror=MIRROR) == sum(x.size_in_bytes for x in copied)
        assert value(got, "kip1279_mirror_fetch_requests_total", mirror=MIRROR) > 0
        assert value(got, "kip1279_mirror_fetch_errors_total", mirror=MIRROR) == 0
        assert value(got, "kip1279_mirror_failed_partitions", mirror=MIRROR) == 0
        assert value(got, "kip1279_changelog_write_seconds_count") > 0
        assert not [k for k in got if k[0].endswith("_created")], "no _created series"
        assert value(got, "kip1279_healthy") == 1 == value(got, "kip1279_ready")
        # Before the first stop: the stop histograms' series are there at 0 (rate() sees the first stop).
        assert value(got, "kip1279_mirror_partition_stop_seconds_count", mirror=MIRROR) == 0
        assert value(scrape(controller), "kip1279_mirror_stop_request_seconds_count", mirror=MIRROR) == 0
        assert value(got, "kip1279_mirror_failed_retries_total", mirror=MIRROR) == 0
        rig.wait("a clean sync of every kind, then ready for a failover",
                 lambda: value(scrape(worker), "kip1279_mirror_failover_ready", mirror=MIRROR) == 1, 30)  # fmt: skip
        rig.wait("both replayed the metadata log to its end",
                 lambda: (c := scrape(controller), w := scrape(worker))
                 and value(c, "kip1279_metadata_log_lag_offsets") == 0 == value(w, "kip1279_metadata_log_lag_offsets")
                 and value(c, "kip1279_metadata_log_applied_offset")
                 == value(w, "kip1279_metadata_log_applied_offset") > 0, 30)  # fmt: skip

        # 2. A unreachable: FAILED, retried; the retries counted are the changelog's FAILED -> FAILED writes.
        rig.start_producers("A", 42)
        a.set_unreachable(True)
        rig.wait("every partition FAILED, retried twice",
                 lambda: all(len(h) > 2 and h[-1].state is MirrorState.FAILED and h[-1].retry_attempt >= 2
                             for h in rig.history("B").values()) and len(rig.history("B")) == n, 60)  # fmt: skip
        got = scrape(worker)
        retried = sum(1 for h in rig.history("B").values() for x, y in zip(h, h[1:])
                      if x.state is y.state is MirrorState.FAILED)  # fmt: skip
        assert states(got)["FAILED"] == n == value(got, "kip1279_mirror_failed_partitions", mirror=MIRROR)
        assert 2 * n <= value(got, "kip1279_mirror_failed_retries_total", mirror=MIRROR) <= retried
        assert value(got, "kip1279_mirror_fetch_errors_total", mirror=MIRROR) >= n
        assert lag_series(got) == {}, "a FAILED partition has no lag to show"
        assert value(got, "kip1279_mirror_failover_ready", mirror=MIRROR) == 0
        assert get(worker, "/healthz") == (200, "ok\n"), "a dead source is no reason to restart the worker"

        # 3. --stop during the outage: each partition's STOPPING -> STOPPED timed, and the request.
        asked = time.monotonic()
        rig.stop_topics("B", MIRROR)
        rig.wait("every partition STOPPED", lambda: rig.all_in("B", MIRROR, MirrorState.STOPPED), 60)
        rig.wait("the stop request timed by the controller",
                 lambda: scrape(controller).get(("kip1279_mirror_stop_request_seconds_count", (("mirror", MIRROR),))) == 1,
                 30)  # fmt: skip
        took = time.monotonic() - asked
        c = scrape(controller)
        assert value(c, "kip1279_mirror_stop_request_seconds_count", mirror=MIRROR) == 1
        assert value(c, "kip1279_healthy") == 1 == value(c, "kip1279_ready")
        assert 0 < value(c, "kip1279_mirror_stop_request_seconds_sum", mirror=MIRROR) <= took
        rig.wait("the worker saw every STOPPED land", lambda: states(scrape(worker))["STOPPED"] == n, 30)
        got = scrape(worker)
        assert value(got, "kip1279_mirror_partition_stop_seconds_count", mirror=MIRROR) == n
        assert 0 <= value(got, "kip1279_mirror_partition_stop_seconds_sum", mirror=MIRROR) <= n * took
        assert value(got, "kip1279_mirror_failed_partitions", mirror=MIRROR) == 0
        assert get(worker, "/healthz") == (200, "ok\n") and get(worker, "/readyz") == (200, "ok\n")
    finally:
        rig.close()  # the model server goes with it, A's cut link too
