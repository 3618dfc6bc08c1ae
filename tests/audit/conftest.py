"""The exported sample history of the audit suite (its Spark session, ``spark``, is the test
session's: tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (the `audit` extra)")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (the `audit` extra)")

from pyspark.sql import SparkSession  # noqa: E402

from audit.export import export_snapshot  # noqa: E402
from audit.model import AuditSnapshot, ConfigDriftRow, PartitionRow  # noqa: E402
from audit.sample import sample_history  # noqa: E402
from coordinator.states import MirrorState  # noqa: E402


@pytest.fixture(scope="session")
def sample() -> list[AuditSnapshot]:
    return sample_history()


@pytest.fixture(scope="session")
def sample_store(tmp_path_factory: pytest.TempPathFactory, sample: list[AuditSnapshot]) -> Path:
    """The clean sample history, exported snapshot by snapshot. Read-only for tests."""
    root = tmp_path_factory.mktemp("sample-store")
    for snap in sample:
        export_snapshot(snap, root)
    return root


# ---------------------------------------------------------------------------------------------
# A store with violations and secrets planted by hand, and its HTML report (built once).
# ---------------------------------------------------------------------------------------------

SECRETS = {
    "sasl.jaas.config": "JaasSecretValue-111",
    "ssl.truststore.password": "TrustPw-222",
    "ssl.key.password": "KeyPw-333",
    "basic.auth.credentials.source": "CredSource-444",
    "sasl.oauthbearer.token.endpoint.secret": "OauthSecret-555",
    "remote.api.key": "ApiKey-666",
    "my.custom.token": "Token-777",
}
HARMLESS = "harmless-marker-value-8888"  # the control: proves a grep finds plain values


@dataclass(frozen=True)
class Planted:
    root: Path
    snapshot: AuditSnapshot  # the latest, as handed to the export
    leaks: list[str]  # secret values that must appear nowhere
    harmless: str
    dle_victim: PartitionRow
    stuck_victim: PartitionRow


def _plant(snap: AuditSnapshot) -> tuple[AuditSnapshot, list[str], PartitionRow, PartitionRow]:
    configs = {
        m: {**cfg, **SECRETS, "client.id": HARMLESS,
            "sasl.jaas.config": f'x.y.PlainLoginModule required password="{SECRETS["sasl.jaas.config"]}";'}
        for m, cfg in snap.mirror_configs.items()
    }  # fmt: skip
    mirroring = [p for p in snap.partitions if p.state == MirrorState.MIRRORING]
    dle, stuck = mirroring[0], mirroring[1]
    parts = []
    for p in snap.partitions:
        if p is dle:
            p = msgspec.structs.replace(p, dest_leader_epoch=p.source_leader_epoch - 1)
        elif p is stuck:
            p = msgspec.structs.replace(
                p, state=int(MirrorState.PREPARING), previous_state=int(MirrorState.STOPPED),
                state_entered_ms=snap.taken_at_ms - 900_000,
                error_message='SASL auth failed: password="ErrPw-999" for o.a.ScramLoginModule required p="JaasErr-000";',
            )  # fmt: skip
        parts.append(p)
    t0 = snap.transitions[0]
    transitions = [msgspec.structs.replace(t0, reason="restarted with token=ReasonToken-121"), *snap.transitions[1:]]
    drift = [
        *snap.config_drift,
        ConfigDriftRow(mirror="a-to-b", topic="orders", config_name="ssl.keystore.password",
                       source_value="DriftSrcPw-131", dest_value="DriftDstPw-141"),
    ]  # fmt: skip
    leaks = [*SECRETS.values(), "ErrPw-999", "JaasErr-000", "ReasonToken-121", "DriftSrcPw-131", "DriftDstPw-141"]
    out = msgspec.structs.replace(
        snap, mirror_configs=configs, partitions=parts, transitions=transitions, config_drift=drift
    )
    return out, leaks, dle, stuck


@pytest.fixture(scope="session")
def planted(tmp_path_factory: pytest.TempPathFactory, sample: list[AuditSnapshot]) -> Planted:
    root = tmp_path_factory.mktemp("planted-store")
    for snap in sample[:-1]:
        export_snapshot(snap, root, compression="none")
    last, leaks, dle, stuck = _plant(sample[-1])
    # Uncompressed, so that a leaked secret would be visible bytes for the grep.
    export_snapshot(last, root, compression="none")
    return Planted(root, last, leaks, HARMLESS, dle, stuck)


@pytest.fixture(scope="session")
def planted_report(spark: SparkSession, planted: Planted) -> str:
    from audit.queries import AuditParams
    from audit.report import build_report
    from audit.spark import SnapshotStore

    return build_report(spark, SnapshotStore(planted.root), AuditParams())
