"""A mirror's altered config: settings apply to the running runner, new connections or fetchers
rebuild it.

A failover's ``--stop`` alters ``mirror.topics.exclude``; rebuilding the runner then re-adopted
every mirror partition at the very start of the failover (seconds at 200,000 partitions) and
forgot which partitions were settled. Settings only now reach the runner from its next round;
``bootstrap.servers``, the client's security settings and ``num.replica.fetchers`` still build a
new runner (``test_streams_e2e_config_update`` follows one through a dead source and back).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest

from coordinator.workflows.config import MirrorConfig
from streams.worker.app import CoordinatorWorker
from streams.worker.mirror_jobs import MirrorJob
from streams.runner.runner import MirrorRunner

BASE = {"bootstrap.servers": "model://A", "fetch.backoff.ms": "500"}


class Port:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def worker(configs: dict[str, str]) -> Any:
    built: list[dict[str, str]] = []

    def ports(name: str, image: Any) -> tuple[Any, Any]:
        built.append(dict(image.configs))
        return Port(), Port()

    w = SimpleNamespace(mirrors={}, image=None, pool=concurrent.futures.ThreadPoolExecutor(1), ports=ports,
                        store=None, stats={}, built=built,
                        ticks=SimpleNamespace(watch=lambda name, runner, loop: None))  # fmt: skip
    w.set_image = lambda c: setattr(w, "image", SimpleNamespace(mirrors={"m": SimpleNamespace(configs=dict(c))}))
    w._close_mirror = lambda name, m: CoordinatorWorker._close_mirror(w, name, m)  # type: ignore[arg-type]
    w.set_image(configs)
    runner = MirrorRunner("m", Port(), Port(), MirrorConfig.from_properties(configs))  # type: ignore[arg-type]
    runner._settled["marker"] = ("kept",)  # type: ignore[index]
    w.mirrors["m"] = MirrorJob(runner, (runner.source, runner.dest), dict(configs))
    return w


def mirror(w: Any) -> Any:
    return asyncio.run(CoordinatorWorker._mirror_locked(w, "m"))  # type: ignore[arg-type]


def test_settings_only_reach_the_running_runner() -> None:
    w = worker(BASE)
    before = w.mirrors["m"]
    w.set_image({**BASE, "fetch.backoff.ms": "2000", "mirror.topics.exclude": "orders.*"})
    got = mirror(w)
    assert got is before and not got.retired and w.built == []
    assert got.runner.config.fetch_backoff_ms == 2000 and got.runner.syncer.config.fetch_backoff_ms == 2000
    assert got.runner._settled == {"marker": ("kept",)}, "a settings change keeps what the runner knows"
    assert got.configs["mirror.topics.exclude"] == "orders.*"
    assert mirror(w) is before and got.runner.config.fetch_backoff_ms == 2000  # applied once, stays


@pytest.mark.parametrize("change", [{"bootstrap.servers": "model://C"}, {"security.protocol": "SSL"},
                                    {"sasl.mechanism": "PLAIN"}, {"num.replica.fetchers": "4"}])  # fmt: skip
def test_new_connections_or_fetchers_rebuild_the_runner(change: dict[str, str]) -> None:
    w = worker(BASE)
    before = w.mirrors["m"]
    w.set_image({**BASE, **change, "fetch.backoff.ms": "2000"})
    got = mirror(w)
    assert got is not before and before.retired and all(p.closed for p in before.ports)
    assert w.built == [{**BASE, **change, "fetch.backoff.ms": "2000"}]
    assert got.runner.config.fetch_backoff_ms == 2000 and got.runner._settled == {}


def test_a_busy_runner_is_reconfigured_once_its_job_is_done() -> None:
    w = worker(BASE)
    before = w.mirrors["m"]
    before.busy = concurrent.futures.Future()
    w.set_image({**BASE, "fetch.backoff.ms": "2000"})
    assert mirror(w) is before and before.runner.config.fetch_backoff_ms == 500  # not under a running job
    before.busy = None
    assert mirror(w) is before and before.runner.config.fetch_backoff_ms == 2000
