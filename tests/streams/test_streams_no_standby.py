"""Two workers share the table partitions and keep no standby replica of each other's.

A standby made each worker apply every write to the other's table partitions, as it happened,
to its own RocksDB (Faust's changelog reader): in a 50,000-partition failover shared by two
workers that was ~3 of each worker's ~11 CPU-seconds, for state that a worker given those
table partitions reads from the changelog anyway (``WorkerTable.sync_ownership``).

Faust's own assignor, as the worker's app makes it, splits the co-partitioned topics (the
desired-state, tick and changelog topics) between two members: no member gets a standby.
"""

from __future__ import annotations

from pathlib import Path

from faust.assignor.client_assignment import CopartitionedAssignment
from faust.assignor.copartitioned_assignor import CopartitionedAssignor

from streams import config as wc
from streams.state.mirror_state import make_app
from streams.worker.topics import tick_topic_name


def test_two_workers_get_no_standby_of_each_others_table_partitions(tmp_path: Path) -> None:
    cfg = wc.WorkerConfig(bootstrap_servers="127.0.0.1:1", data_dir=str(tmp_path))
    app = make_app(cfg)  # nothing is started or connected
    topics = {cfg.desired_state_topic_name, tick_topic_name(cfg), cfg.mirror_state_topic_name}
    members = {m: CopartitionedAssignment(topics=set(topics)) for m in ("worker-1", "worker-2")}
    got = CopartitionedAssignor(topics=topics, cluster_asgn=members, num_partitions=cfg.state_partitions,
                                replicas=app.assignor.replicas).get_assignment()  # fmt: skip
    actives = [sorted(a.actives) for a in got.values()]
    assert sorted(p for ps in actives for p in ps) == list(range(cfg.state_partitions)) and all(actives)
    assert [sorted(a.standbys) for a in got.values()] == [[], []]
