"""End to end, real processes: changing a mirror's configs through ``kafka-cluster-mirrors --alter``
(issue 14, section 4), after the prototype's ``test_config_update`` (cluster_mirroring_test.py,
aiven/inkless inkless-linking): an invalid config is refused with INVALID_CONFIG and changes
nothing, ``bootstrap.servers`` is pointed at another source and mirroring continues.

The model server, B's controller and a ``kip1279-worker``; the CLI runs as a process, as in a
shell. Re-pointing: first at a cluster the model server does not have (the partitions fail with
its error, so the runner did reconnect), then back at A under another spelling
(``model://A/``): the partitions mirror again and B ends equal to A, nothing lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_streams_e2e_source_outage import BACKOFF, MIRROR
from worker_harness import Rig, history_problems

from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker

SECRET = "s3cr3t-pw"


def configs(rig: Rig) -> dict[str, str]:
    text = rig.cli("B", "--describe-config", "--mirror", MIRROR)
    lines = text.splitlines()
    assert lines[0] == f"Dynamic configs for cluster-mirror {MIRROR} are:", text
    out = {}
    for line in lines[1:]:
        kv, _, sensitive = line.strip().rpartition(" sensitive=")
        key, _, value = kv.partition("=")
        out[key] = value
        assert sensitive == ("true" if "jaas" in key else "false"), line
    return out


@pytest.mark.slow
def test_alter_refuses_invalid_configs_redacts_secrets_and_repoints_the_source(
        broker: LocalBroker, tmp_path: Path) -> None:  # fmt: skip
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 2, "audit": 1}, tick=0.1, seed=51)
    rig.cli_process = True
    rig.loglevel = "info"  # the worker says when it rebuilds a runner
    try:
        rig.start(("B",))
        worker = rig.spawn_worker("B")
        a, b = rig.clients["A"], rig.clients["B"]
        jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="{SECRET}";'
        rig.create_mirror("B", MIRROR, "A", BACKOFF + f"sasl.jaas.config={jaas}\n")
        rig.produce("A", 0.5, 51)
        rig.start_topics("B", MIRROR)
        rig.wait("every partition MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING))
        rig.wait("B to match A", lambda: rig.in_sync("A", "B"))

        # describe-config: every key, the secret redacted and never printed.
        before = configs(rig)
        assert before["bootstrap.servers"] == "model://A" and before["sasl.jaas.config"] == "(redacted)"
        assert SECRET not in rig.cli("B", "--describe-config", "--mirror", MIRROR, "--json")

        # Invalid: an unknown key and a value that does not parse, each refused; the valid key
        # of the same request is not applied either.
        code, text = rig.run_cli("B", "--alter", "--mirror", MIRROR,
                                 "--add-config", "num.replica.fetchers=many,no.such.config=1,fetch.backoff.ms=200")  # fmt: skip
        assert code == 2, text  # refused input: a usage error
        errors = [ln for ln in text.splitlines() if ln.startswith("Error: INVALID_CONFIG")]
        assert len(errors) == 2 and "num.replica.fetchers" in errors[0] + errors[1] and "no.such.config" in text, text
        assert configs(rig) == before
        code, text = rig.run_cli("B", "--alter", "--mirror", MIRROR, "--delete-config", "bootstrap.servers")
        assert code == 2 and "INVALID_CONFIG" in text and configs(rig) == before, text

        # ACLs: a principal with no ALTER_CONFIGS / DESCRIBE_CONFIGS ACL is refused, nothing changes.
        props = tmp_path / "mallory.properties"
        props.write_text("principal=User:mallory\n")
        for argv in (("--alter", "--add-config", "fetch.backoff.ms=200"), ("--describe-config",)):
            code, text = rig.run_cli("B", *argv, "--mirror", MIRROR, "--command-config", str(props))
            assert code == 1 and "CLUSTER_MIRROR_AUTHORIZATION_FAILED" in text and "User:mallory" in text, text
        assert configs(rig) == before

        # Re-point the source at a cluster that does not exist: the runner is rebuilt on it, and
        # what A takes meanwhile is not copied.
        out = rig.cli("B", "--alter", "--mirror", MIRROR, "--add-config", "bootstrap.servers=model://C,fetch.backoff.ms=200")
        assert out == f"Completed updating config for cluster-mirror {MIRROR}.\n"
        after = configs(rig)
        assert after == {**before, "bootstrap.servers": "model://C", "fetch.backoff.ms": "200"}
        rig.wait("every partition FAILED on the unknown source",
                 lambda: all(r["state"] == "FAILED" and "'C'" in (r["errorMessage"] or "") for r in rig.describe("B", MIRROR)), 60)  # fmt: skip
        b_hw = {tp: b.list_offsets(tp).hw for tp in rig.tps}
        rig.produce("A", 0.5, 52)
        assert {tp: b.list_offsets(tp).hw for tp in rig.tps} == b_hw
        assert "config changed (bootstrap.servers, fetch.backoff.ms): rebuilding its runner" in rig.worker_log(worker)

        # Back to A under another spelling: the partitions retry on it and mirroring continues.
        rig.cli("B", "--alter", "--mirror", MIRROR, "--add-config", "bootstrap.servers=model://A/", "--delete-config", "fetch.backoff.ms")
        assert configs(rig) == {**before, "bootstrap.servers": "model://A/"}
        rig.wait("every partition MIRRORING again", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING), 60)
        rig.wait("B to match A", lambda: rig.in_sync("A", "B"), 60)
        assert rig.log_problems("A", "B") == []
        assert any(a.list_offsets(tp).hw > b_hw[tp] for tp in rig.tps), "A's records of the detour were copied after"
        assert rig.describe("B", MIRROR, "--failed") == []
        assert history_problems(rig.history("B")) == []
        listed = rig.cli("B", "--list").splitlines()[1].split()
        assert listed[:2] == [MIRROR, "2"] and listed[-1] == "model://A/"
    finally:
        rig.close()
