"""The worker's metrics (issue 14, section 1), read from state the workflows really produced.

A ``WorkerMirror`` (the worker's state store and round in phases, on model clusters) runs the
workflows; ``WorkerMetrics`` reads its state and counters the way a scrape does, and every
figure is checked against the clusters: lag is source HW - destination LEO, fetched bytes and
records are what the destination's log holds, FAILED partitions and retries follow an outage,
STOPPING -> STOPPED is timed per partition.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from workflow_harness import World, all_in, batches, run_until

from coordinator.ports import SourceUnavailable
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.config import MirrorConfig
from streams.config import WorkerConfig
from streams.worker.metrics import MetricsServer, WorkerMetrics

# Sync every second of model time; one batch per partition and fetch, so catching up takes rounds.
CONFIG = MirrorConfig(metadata_refresh_interval_ms=1_000, fetch_backoff_ms=0, failed_retry_initial_backoff_ms=100,
                      failed_retry_max_backoff_ms=1_000, fetch_partition_max_bytes=1,
                      source_unavailable_timeout_ms=1_000)  # fmt: skip
PARTITIONS = 3


def samples(registry: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, parsed back from the exposition format."""
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}  # fmt: skip


def value(got: dict[Any, float], name: str, **labels: str) -> float:
    return got[(name, tuple(sorted(labels.items())))]


class Rig:
    """One mirror a -> b driven as the worker drives it, and its metrics."""

    def __init__(self, stored: dict[str, str] | None = None, **metrics_args: Any) -> None:
        """``stored``: the mirror's configs as the metadata log holds them (default: ``CONFIG``)."""
        self.w = World("a", "b", worker=True)
        self.a, self.b = self.w["a"], self.w["b"]
        self.topic = self.a.add_topic("orders", partitions=PARTITIONS)
        self.tps = [self.a.tp("orders", p) for p in range(PARTITIONS)]
        self.m = self.w.mirror("a", "b", CONFIG if stored is None else MirrorConfig.from_properties(stored))
        name = self.m.name
        mirror_image = None if stored is None else SimpleNamespace(configs=stored)
        worker = SimpleNamespace(
            config=WorkerConfig(), store=self.m.store, stats={}, mirrors={}, clock_ms=lambda: self.w.now, loader=None,
            image=SimpleNamespace(mirrors=SimpleNamespace(mirrors={name: mirror_image}), offset=41,
                                  topics={self.topic.topic_id: SimpleNamespace(name="orders")}))  # fmt: skip
        self.worker = worker
        self.metrics = WorkerMetrics(worker, **metrics_args)  # type: ignore[arg-type]
        self.m.store.on_landed = self.metrics.on_landed  # type: ignore[attr-defined]
        self.bind()

    def bind(self) -> None:
        """The worker's view of the current runner (rebuilt on a restart, its stats kept by the worker)."""
        self.worker.stats[self.m.name] = self.m.runner.stats
        self.worker.mirrors[self.m.name] = SimpleNamespace(runner=self.m.runner)

    def produce(self, n: int) -> None:
        for i in range(n):
            self.a.produce("orders", i % PARTITIONS, [(b"k", b"v" * 40)])

    def scrape(self) -> dict[Any, float]:
        return samples(self.metrics.registry)


def test_state_counts_lag_and_fetch_figures_match_the_clusters():
    r = Rig(ready_max_lag=5)
    r.produce(30)
    r.m.set_desired(r.topic.topic_id, DesiredState.START)
    run_until(r.w, lambda: all_in(r.m, MirrorState.MIRRORING))
    r.produce(60)
    r.w.step()  # one fetch round, one batch per partition: far from caught up
    got = r.scrape()
    name = r.m.name
    for s in MirrorState:  # every state, zeros too
        want = PARTITIONS if s is MirrorState.MIRRORING else 0
        assert value(got, "kip1279_mirror_partitions", mirror=name, state=s.name) == want
    lags = {}
    for tp in r.tps:
        lags[tp.partition] = r.a.list_offsets(tp).hw - r.b.list_offsets(tp).leo
        assert value(got, "kip1279_mirror_partition_lag_offsets", mirror=name, topic="orders",
                     partition=str(tp.partition)) == lags[tp.partition]  # fmt: skip
    assert min(lags.values()) > 5, "one batch per fetch leaves lag behind"
    assert value(got, "kip1279_mirror_max_lag_offsets", mirror=name) == max(lags.values())
    copied = [b for tp in r.tps for b in batches(r.b, tp)]
    assert value(got, "kip1279_mirror_fetch_bytes_total", mirror=name) == sum(b.size_in_bytes for b in copied)
    assert value(got, "kip1279_mirror_fetch_records_total", mirror=name) == sum(b.record_count for b in copied)
    assert value(got, "kip1279_mirror_fetch_requests_total", mirror=name) > 0
    assert value(got, "kip1279_mirror_fetch_errors_total", mirror=name) == 0
    assert value(got, "kip1279_mirror_failover_ready", mirror=name) == 0, "lag above the threshold"
    assert value(got, "kip1279_metadata_log_applied_offset") == 41

    run_until(r.w, lambda: all(r.b.list_offsets(tp).leo == r.a.list_offsets(tp).hw for tp in r.tps), 200)
    r.w.step(1000)  # a sync round
    got = r.scrape()
    assert value(got, "kip1279_mirror_max_lag_offsets", mirror=name) == 0
    assert value(got, "kip1279_mirror_failover_ready", mirror=name) == 1
    for kind in ("topic_config", "consumer_group_offset", "share_group_offset", "acl", "topic_metadata_refresh"):
        assert value(got, "kip1279_mirror_sync_errors_total", mirror=name, kind=kind) == 0
        assert 0 < value(got, "kip1279_mirror_sync_last_success_timestamp_seconds", mirror=name, kind=kind) <= r.w.now / 1000


def test_lag_series_are_capped_to_the_largest():
    r = Rig(lag_max_series=1)
    r.m.set_desired(r.topic.topic_id, DesiredState.START)
    run_until(r.w, lambda: all_in(r.m, MirrorState.MIRRORING))
    for _ in range(20):
        r.a.produce("orders", 1, [(b"k", b"v" * 40)])
    r.w.step()
    got = r.scrape()
    series = {k: v for k, v in got.items() if k[0] == "kip1279_mirror_partition_lag_offsets"}
    assert len(series) == 1
    ((_, labels), lag), = series.items()
    assert dict(labels)["partition"] == "1" and lag == r.a.list_offsets(r.tps[1]).hw - r.b.list_offsets(r.tps[1]).leo > 0
    assert value(got, "kip1279_mirror_max_lag_offsets", mirror=r.m.name) == lag


def test_an_acl_sync_failure_counts_and_blocks_readiness():
    r = Rig()
    r.m.set_desired(r.topic.topic_id, DesiredState.START)
    run_until(r.w, lambda: all_in(r.m, MirrorState.MIRRORING))
    r.w.step(1000)
    assert value(r.scrape(), "kip1279_mirror_failover_ready", mirror=r.m.name) == 1

    def down(*_: Any) -> Any:
        raise SourceUnavailable("b", "describe_acls refused")

    r.b.describe_acls = down  # type: ignore[method-assign]
    for _ in range(3):
        r.w.step(1000)
    got = r.scrape()
    assert value(got, "kip1279_mirror_sync_errors_total", mirror=r.m.name, kind="acl") == 3
    assert value(got, "kip1279_mirror_sync_errors_total", mirror=r.m.name, kind="topic_config") == 0
    assert value(got, "kip1279_mirror_sync_last_success_timestamp_seconds", mirror=r.m.name, kind="acl") < (r.w.now - 2000) / 1000
    assert value(got, "kip1279_mirror_failover_ready", mirror=r.m.name) == 0


def test_a_source_outage_shows_failed_partitions_retries_and_errors_then_a_stop_is_timed():
    r = Rig()
    r.produce(9)
    r.m.set_desired(r.topic.topic_id, DesiredState.START)
    run_until(r.w, lambda: all_in(r.m, MirrorState.MIRRORING))
    name = r.m.name
    r.a.set_unreachable(True)
    run_until(r.w, lambda: all(s.state is MirrorState.FAILED and s.retry_attempt >= 2
                               for s in r.m.runner.states().values()), 100)  # fmt: skip
    r.w.step(1000, rounds=2)  # the topic level's periodic refresh asks the source too
    got = r.scrape()
    attempts = sum(s.retry_attempt for s in r.m.runner.states().values())
    assert value(got, "kip1279_mirror_partitions", mirror=name, state="FAILED") == PARTITIONS
    assert value(got, "kip1279_mirror_failed_partitions", mirror=name) == PARTITIONS
    assert value(got, "kip1279_mirror_failed_retries_total", mirror=name) == attempts
    assert value(got, "kip1279_mirror_fetch_errors_total", mirror=name) >= PARTITIONS
    assert value(got, "kip1279_mirror_sync_errors_total", mirror=name, kind="topic_metadata_refresh") > 0
    assert value(got, "kip1279_mirror_failover_ready", mirror=name) == 0
    assert not any(k[0] == "kip1279_mirror_partition_lag_offsets" for k in got), "no lag shown for FAILED partitions"

    # A failover during the outage: each partition's STOPPING -> STOPPED is observed once.
    asked = r.w.now
    r.m.set_desired(r.topic.topic_id, DesiredState.STOP)
    run_until(r.w, lambda: all_in(r.m, MirrorState.STOPPED), 100)
    got = r.scrape()
    assert value(got, "kip1279_mirror_partitions", mirror=name, state="STOPPED") == PARTITIONS
    assert value(got, "kip1279_mirror_failed_partitions", mirror=name) == 0
    assert value(got, "kip1279_mirror_partition_stop_seconds_count", mirror=name) == PARTITIONS
    assert 0 <= value(got, "kip1279_mirror_partition_stop_seconds_sum", mirror=name) <= PARTITIONS * (r.w.now - asked) / 1000
    assert value(got, "kip1279_mirror_failed_retries_total", mirror=name) == attempts, "a stop is no retry"



def test_a_paused_partition_keeps_its_lag_in_max_lag_and_its_pause_is_timed():
    r = Rig()
    r.m.set_desired(r.topic.topic_id, DesiredState.START)
    run_until(r.w, lambda: all_in(r.m, MirrorState.MIRRORING))
    r.produce(60)
    r.w.step()  # one batch per partition and fetch: lag left behind
    lags = {tp.partition: r.a.list_offsets(tp).hw - r.b.list_offsets(tp).leo for tp in r.tps}
    assert min(lags.values()) > 0
    r.m.set_desired(r.topic.topic_id, DesiredState.PAUSE)
    run_until(r.w, lambda: all_in(r.m, MirrorState.PAUSED))
    paused_at = min(s.entered_at_ms for s in r.m.runner.states().values())
    r.produce(30)  # the source moves on; nothing is fetched while paused
    r.w.step(5_000)
    got = r.scrape()
    name = r.m.name
    shown = {int(dict(k[1])["partition"]): v for k, v in got.items() if k[0] == "kip1279_mirror_partition_lag_offsets"}
    leos = {tp.partition: r.b.list_offsets(tp).leo for tp in r.tps}
    assert set(shown) == set(lags) and all(0 < shown[p] <= lags[p] for p in shown), "the lag of the last fetch"
    assert all(shown[p] < r.a.list_offsets(tp).hw - leos[p] for p, tp in enumerate(r.tps)), "a lower bound"
    assert value(got, "kip1279_mirror_max_lag_offsets", mirror=name) == max(shown.values()) > 0
    assert value(got, "kip1279_mirror_partition_state_age_seconds", mirror=name, state="PAUSED") == (r.w.now - paused_at) / 1000 >= 5
    assert value(got, "kip1279_mirror_partition_state_age_seconds", mirror=name, state="MIRRORING") == 0
    assert value(got, "kip1279_mirror_failover_ready", mirror=name) == 0


def test_no_created_series_and_every_lag_says_its_unit():
    r = Rig()
    r.m.set_desired(r.topic.topic_id, DesiredState.START)
    run_until(r.w, lambda: all_in(r.m, MirrorState.MIRRORING))
    r.metrics.changelog_write.observe(0.01)
    r.metrics.retries.labels(r.m.name).inc()
    text = generate_latest(r.metrics.registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "kip1279_changelog_write_seconds" in families and "kip1279_mirror_failed_retries" in families
    assert not [n for n in families if n.endswith("_created")]
    assert "_created" not in text
    lags = [n for n in families if "lag" in n]
    assert lags and all(n.endswith("_offsets") and "offsets" in families[n].documentation for n in lags), lags

@pytest.mark.asyncio
async def test_the_server_answers_health_and_metrics_over_http():
    from aiohttp import ClientSession

    r = Rig()
    state = {"healthy": True}
    server = MetricsServer(("127.0.0.1", 0), r.metrics.registry,
                           health=lambda: (state["healthy"], "ok" if state["healthy"] else "out of group"),
                           ready=lambda: (False, "replaying the metadata log"))  # fmt: skip
    _, port = await server.start()
    try:
        async with ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                assert (resp.status, await resp.text()) == (200, "ok\n")
            state["healthy"] = False
            async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                assert (resp.status, await resp.text()) == (503, "out of group\n")
            async with http.get(f"http://127.0.0.1:{port}/readyz") as resp:
                assert (resp.status, await resp.text()) == (503, "replaying the metadata log\n")
            async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain")
                text = await resp.text()
        names = {f.name for f in text_string_to_metric_families(text)}
        assert {"kip1279_mirror_partitions", "kip1279_changelog_write_seconds", "kip1279_metadata_log_lag_offsets"} <= names
    finally:
        await server.stop()


def test_metrics_listener_is_off_by_default_and_loopback_only():
    from streams.config import ConfigError, from_properties

    assert WorkerConfig().metrics_address is None
    assert from_properties({"metrics.listener": "127.0.0.1:9404"}).metrics_address == ("127.0.0.1", 9404)
    with pytest.raises(ConfigError, match="loopback"):
        from_properties({"metrics.listener": "0.0.0.0:9404"})
    with pytest.raises(ConfigError, match="HOST:PORT"):
        from_properties({"metrics.listener": "9404"})


def test_a_stored_pattern_the_sync_cannot_use_fails_only_what_it_touches():
    """``groups.exclude`` as an older version let it in: the pattern it cannot use is left out,
    the groups the rest selects sync on, and each sync counts once as failed, with the reason."""
    stored = {"bootstrap.servers": "model://a", "metadata.refresh.interval.ms": "1000", "fetch.backoff.ms": "0",
              "groups.exclude": "ops-g1,(unclosed"}  # fmt: skip
    r = Rig(stored)
    r.produce(30)
    r.m.set_desired(r.topic.topic_id, DesiredState.START)
    run_until(r.w, lambda: all_in(r.m, MirrorState.MIRRORING))
    r.a.commit_offset("app", "orders", 0, 4)
    r.a.commit_offset("ops-g1", "orders", 0, 3)
    r.w.step(1000)  # a sync round
    assert [(o.partition, o.offset) for o in r.b.group_offsets("app")] == [(0, 4)], "other groups sync on"
    assert r.b.group_offsets("ops-g1") == [], "the usable part of groups.exclude still holds"
    name, stats = r.m.name, r.m.runner.stats
    got = r.scrape()
    errors = value(got, "kip1279_mirror_sync_errors_total", mirror=name, kind="consumer_group_offset")
    assert errors >= 1 and "groups.exclude" in stats.sync_error_reasons["consumer_group_offset"]
    assert "unterminated subpattern" in stats.sync_error_reasons["consumer_group_offset"]
    assert value(got, "kip1279_mirror_config_errors", mirror=name, config="groups.exclude") == 1
    assert value(got, "kip1279_mirror_sync_errors_total", mirror=name, kind="topic_config") == 0, "untouched"
    for _ in range(3):  # one more sync, one more error per kind it touches: counted once
        r.w.step(1000)
        again = r.scrape()
        assert value(again, "kip1279_mirror_sync_errors_total", mirror=name, kind="consumer_group_offset") == errors + 1
        assert value(again, "kip1279_mirror_sync_errors_total", mirror=name, kind="share_group_offset") == errors + 1
        errors += 1
    assert value(r.scrape(), "kip1279_mirror_failover_ready", mirror=name) == 0, "group offsets never synced clean"
