"""End to end, real processes: a mirror config stored by an older version that this one cannot use
(issue #24 item 5). ``groups.exclude=ops-g1,(unclosed`` is written straight into the metadata log,
past today's validation. The worker must not fail its step over it: the group offset sync goes on
for the groups the rest of the settings select, each sync counts as failed in
``kip1279_mirror_sync_errors_total``, the key shows in ``kip1279_mirror_config_errors``, and
``--describe`` says why, from the controller (the stored value) and from the worker (the sync)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_streams_e2e_metrics import scrape, value
from worker_harness import Rig

from coordinator.image import ConfigResourceType
from coordinator.states import MirrorState
from records.framing import ApiMessageAndVersion
from records.registry import default_schemas
from streams.brokers.noida import LocalBroker
from streams.state.metadata_log import MetadataLogWriter

MIRROR = "a-to-b"
S = default_schemas()


async def _write_as_an_older_version(bootstrap: str, topic: str, key: str, value: str) -> None:
    record = ApiMessageAndVersion(S.struct("ConfigRecord")(resource_type=int(ConfigResourceType.CLUSTER_MIRROR),
                                                           resource_name=MIRROR, name=key, value=value),
                                  0, S.spec("ConfigRecord").api_key)  # type: ignore[arg-type]  # fmt: skip
    async with MetadataLogWriter(bootstrap, topic, transactional_id="an-older-version") as w:
        await w.append([record])


@pytest.mark.slow
def test_a_stored_groups_exclude_it_cannot_use_fails_only_what_it_touches(
        broker: LocalBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("KIP1279_METRICS_LISTENER", "127.0.0.1:0")
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 1}, tick=0.1, seed=61)
    try:
        rig.start(("B",))
        rig.printed("controller-B", "METRICS")
        worker_name = rig.spawn_worker("B")
        worker = rig.printed("worker-B", "METRICS")
        a, b = rig.clients["A"], rig.clients["B"]
        rig.create_mirror("B", MIRROR, "A")
        rig.produce("A", 0.5, 61)
        rig.start_topics("B", MIRROR)
        rig.wait("every partition MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING))
        rig.wait("B to match A", lambda: rig.in_sync("A", "B"))

        asyncio.run(_write_as_an_older_version(broker.bootstrap, rig.config("B").metadata_topic_name,
                                               "groups.exclude", "ops-g1,(unclosed"))  # fmt: skip
        rig.wait("the worker to take the stored config",
                 lambda: scrape(worker).get(("kip1279_mirror_config_errors",
                                             (("config", "groups.exclude"), ("mirror", MIRROR)))) == 1, 30)  # fmt: skip
        (tp,) = rig.tps
        upto = min(3, a.list_offsets(tp).hw)
        assert upto > 0
        a.commit_offset("app", "orders", 0, upto)
        a.commit_offset("ops-g1", "orders", 0, upto)
        rig.wait("the group offset sync to go on for app",
                 lambda: [(o.partition, o.offset) for o in b.group_offsets("app")] == [(0, upto)], 30)  # fmt: skip
        assert b.group_offsets("ops-g1") == [], "the usable part of groups.exclude still holds"

        got = scrape(worker)
        assert value(got, "kip1279_mirror_sync_errors_total", mirror=MIRROR, kind="consumer_group_offset") > 0
        assert value(got, "kip1279_mirror_sync_errors_total", mirror=MIRROR, kind="acl") == 0, "untouched"

        def reasons() -> str:
            return next(ln for ln in rig.cli("B", "--describe").splitlines()[::-1] if ln.startswith(MIRROR))

        rig.wait("--describe to say why, from the stored config and from the worker's sync",
                 lambda: "unusable config: Invalid value ops-g1,(unclosed for configuration groups.exclude" in (r := reasons())
                 and "consumer group offset" in r and r.count("unterminated subpattern") >= 2, 30)  # fmt: skip
        assert rig.worker_alive(worker_name)
        log = rig.worker_log(worker_name)
        assert "step failed" not in log and "Traceback" not in log, log[-3000:]
        # Said once, not at every sync.
        assert log.count("a stored config it cannot use is left out") == 1, log[-3000:]
    finally:
        rig.close()
