"""The leader-epoch cache against Kafka's LeaderEpochFileCache semantics."""

from __future__ import annotations

from clustermodel.epochs import LeaderEpochCache
from coordinator.ports import EpochEndOffset


def test_end_offset_for_matches_kafka() -> None:
    cache = LeaderEpochCache([(2, 10), (4, 20), (5, 30)])
    leo = 42
    assert cache.end_offset_for(5, leo) == EpochEndOffset(5, 42)  # latest epoch ends at the LEO
    assert cache.end_offset_for(4, leo) == EpochEndOffset(4, 30)
    assert cache.end_offset_for(3, leo) == EpochEndOffset(2, 20)  # unknown epoch: floor epoch, next start
    assert cache.end_offset_for(1, leo) == EpochEndOffset(1, 10)  # below the first: requested, first start
    assert cache.end_offset_for(6, leo).undefined  # above every epoch
    assert cache.end_offset_for(-1, leo).undefined
    assert LeaderEpochCache().end_offset_for(0, 0).undefined


def test_assign_keeps_epochs_and_offsets_monotonic() -> None:
    cache = LeaderEpochCache()
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)  # same epoch later: nothing to record
    assert cache.assign(3, 10)
    # An older epoch at a later offset (a follower copying a diverged leader) drops what it contradicts.
    assert cache.assign(2, 12)
    assert cache.entries() == [(1, 0), (2, 12)]
    assert cache.assign(4, 5)  # new epoch at a lower offset removes entries at or above it
    assert cache.entries() == [(1, 0), (4, 5)]


def test_truncation_from_both_ends() -> None:
    cache = LeaderEpochCache([(0, 0), (1, 10), (2, 20)])
    cache.truncate_from_end(20)
    assert cache.entries() == [(0, 0), (1, 10)]
    cache.truncate_from_start(15)
    assert cache.entries() == [(1, 15)]
    assert cache.epoch_for_offset(16) == 1
    assert cache.epoch_for_offset(3) is None


def test_noop_truncation_trims_epoch_entries_at_the_leo() -> None:
    """As Kafka's UnifiedLog.truncateTo, for followers and for the coordinator's cut alike: an
    epoch assigned at the LEO with nothing appended would otherwise be the mirror fetcher's
    last fetched epoch, which the source reports as diverging at the LEO, forever."""
    from clustermodel.log import PartitionLog
    from coordinator.ports import Batch

    log = PartitionLog()
    log.append(Batch(base_offset=0, last_offset=3, leader_epoch=1))
    log.epochs.assign(2, 4)  # became leader of epoch 2 at LEO 4, appended nothing
    assert log.epochs.entries() == [(1, 0), (2, 4)]
    log.truncate_to(5, hw=4)  # above the LEO: nothing to cut, the empty epoch goes all the same
    assert log.epochs.entries() == [(1, 0)]
    assert log.leo == 4
