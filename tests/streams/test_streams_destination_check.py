"""A coordinator whose destination is a cluster without KIP-1279 refuses to start, naming what it lacks.

``destination.bootstrap.servers`` (``--destination-bootstrap-server``) gives a destination over
the Kafka protocol; the worker and the controller ask each of its brokers for ApiVersions at
start-up. A real noida-db (no KIP-1279 APIs, like any Kafka without the KIP) is refused: exit 2,
the error naming the missing capabilities (mirror appends, truncation, leader-epoch bump, mirror
states, mirror topics) and their APIs. This is also what makes a failback onto such a cluster
fail fast: the reverse mirror's destination is the old source.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from records.kafka_envelope import MODEL_LISTENER_VERSIONS
from records.kip1279_apis import KIP1279_APIS, describe_missing, missing_capabilities
from streams.brokers.noida import LocalBroker, free_port
from streams.runner.destination_check import DestinationError, check_destination, require_kip1279

NAMES = ("mirror appends", "truncation", "leader-epoch bump", "mirror partition states", "mirror topics")
APIS = ("WriteMirrorStates (101)", "ReadMirrorStates (100)", "BumpLeaderEpochs (105)", "CreateClusterMirror (94)",
        "StartMirrorTopics (95)", "StopMirrorTopics (96)")  # fmt: skip


def test_missing_capabilities_from_an_api_versions_table() -> None:
    full = {**MODEL_LISTENER_VERSIONS, **{k: (0, 0) for k in KIP1279_APIS}}
    assert missing_capabilities(full) == []
    plain = missing_capabilities(MODEL_LISTENER_VERSIONS)  # a plain Kafka table: none of the KIP's APIs
    assert [c.name for c, _ in plain] == list(NAMES)
    text = describe_missing(plain)
    assert all(api in text for api in APIS)
    no_bump = missing_capabilities({k: v for k, v in full.items() if k != 105})
    assert [(c.name, apis) for c, apis in no_bump] == [("leader-epoch bump", ["BumpLeaderEpochs (105)"])]


def test_a_real_broker_without_kip1279_is_refused(broker: LocalBroker) -> None:
    with pytest.raises(DestinationError) as e:
        require_kip1279(broker.bootstrap)
    text = str(e.value)
    assert f"destination.bootstrap.servers={broker.bootstrap} is not a KIP-1279 cluster" in text
    assert all(n in text for n in NAMES) and all(api in text for api in APIS)
    check_destination({})  # no destination over the Kafka protocol: the model, nothing to check
    with pytest.raises(DestinationError, match="cannot reach the destination cluster"):
        check_destination({"destination.bootstrap.servers": f"127.0.0.1:{free_port()}",
                           "destination.client.id": "probe"})  # fmt: skip
    with pytest.raises(DestinationError, match="destination.security.protocol=BOGUS"):
        check_destination({"destination.bootstrap.servers": broker.bootstrap, "destination.security.protocol": "BOGUS"})


def _run(argv: list[str]) -> tuple[int, str, float]:
    t0 = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - t0


def test_worker_and_controller_fail_fast_on_such_a_destination(broker: LocalBroker, tmp_path: Path) -> None:
    common = ["--bootstrap-server", broker.bootstrap, "--cluster-name", "K", "--data-dir", str(tmp_path / "data"),
              "--model-port", "1"]  # fmt: skip
    for role in ([], ["--controller", "--listener", "127.0.0.1:0"]):
        code, text, took = _run([sys.executable, "-m", "streams.worker.main", *role, *common,
                                 "--destination-bootstrap-server", broker.bootstrap])  # fmt: skip
        assert code == 2, text
        assert f"error: destination.bootstrap.servers={broker.bootstrap} is not a KIP-1279 cluster" in text, text
        assert all(api in text for api in APIS), text
        assert "LISTENING" not in text and took < 30
    props = tmp_path / "controller.properties"
    props.write_text(f"bootstrap.servers={broker.bootstrap}\ncluster.name=K\ndestination.bootstrap.servers={broker.bootstrap}\n")
    controller = Path(sys.executable).parent / "kip1279-controller"
    code, text, _ = _run([str(controller), "--config", str(props), "--listener", "127.0.0.1:0"])
    assert code == 2 and "is not a KIP-1279 cluster" in text and "truncation" in text, text
