"""Workload helpers: keyed records, transactions left open or aborted, elections, at a rate."""

from __future__ import annotations

from typing import Any

from clustermodel import ClusterModel, filter_aborted
from clustermodel.client import ClusterClient
from clustermodel.reference_fetcher import mirror_partition
from clustermodel.workload import Workload
from coordinator.ports import IsolationLevel


def test_workload_rate_transactions_and_elections() -> None:
    m = ClusterModel("w", seed=8)
    m.add_topic("orders", 3)
    wl = Workload(m, ["orders"], seed=1, records_per_s=2000, election_rate=0.2,
                  transactional_ratio=0.5, abort_ratio=0.3, leave_open_ratio=0.2)
    stats = wl.run(5_000)
    assert 9_000 <= stats.records <= 11_000  # 2000 records/s for 5 logical seconds
    assert stats.committed and stats.aborted and stats.left_open and stats.elections
    assert m.now() == 5_000
    open_ids = m.open_transactional_ids()
    assert open_ids and all(
        any(m.open_transactions(m.tp("orders", p)) for p in range(3)) for _ in open_ids
    )
    wl.finish_open_transactions(commit=False)
    assert m.open_transactional_ids() == []
    for p in range(3):
        offs = m.list_offsets(m.tp("orders", p))
        assert offs.lso == offs.hw == offs.leo


def test_mirror_of_workload_matches_source_up_to_its_hw() -> None:
    src = ClusterModel("a", seed=21)
    src.add_topic("t", 2)
    dst = ClusterModel("b", seed=22)
    wl = Workload(src, ["t"], seed=5, election_rate=0.3, transactional_ratio=0.6)
    wl.run(3_000)
    tps = [src.tp("t", p) for p in range(2)]
    dst.create_topic("t", tps[0].topic_id, 2, mirror_name="a-to-b")
    assert any(src.open_transactions(tp) for tp in tps), "the workload leaves transactions open"

    def same_committed_view(tp: Any) -> None:
        source = src.fetch(tp, 0, 1 << 30, IsolationLevel.READ_COMMITTED)
        dst_rc = dst.fetch(tp, 0, 1 << 30, IsolationLevel.READ_COMMITTED)
        assert dst_rc.batches == source.batches
        # The destination rebuilt its own transaction index: the same aborted transactions.
        assert dst_rc.aborted_transactions == source.aborted_transactions
        assert filter_aborted(dst_rc.batches, dst_rc.aborted_transactions) == filter_aborted(
            source.batches, source.aborted_transactions
        )

    for tp in tps:
        offs = src.list_offsets(tp)
        assert mirror_partition(src, dst, tp, max_bytes=4096) == offs.hw
        mirrored = dst.fetch(tp, 0, 1 << 30, IsolationLevel.READ_UNCOMMITTED)
        assert mirrored.batches == src.fetch(tp, 0, 1 << 30, IsolationLevel.READ_UNCOMMITTED).batches
        # Open transactions were copied open: the LSO is rebuilt, equal to the source's.
        assert dst.list_offsets(tp).lso == offs.lso
        assert dst.open_transactions(tp) == src.open_transactions(tp)
        same_committed_view(tp)
    wl.finish_open_transactions(commit=False)
    for tp in tps:
        assert mirror_partition(src, dst, tp, max_bytes=4096) == src.list_offsets(tp).leo
        assert dst.list_offsets(tp).lso == src.list_offsets(tp).lso
        same_committed_view(tp)


def test_workload_drives_a_server_cluster(model_server: Any) -> None:
    with ClusterClient(model_server.port) as admin:
        admin.add_cluster("wl", 4)
    with ClusterClient(model_server.port, "wl") as client:
        client.add_topic("t", 2)
        stats = Workload(client, ["t"], seed=3, records_per_s=500, election_rate=0.1).run(1_000)
        assert stats.records >= 400
        assert sum(client.list_offsets(client.tp("t", p)).leo for p in range(2)) >= stats.records
