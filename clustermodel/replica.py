"""A partition's replicas: leader, followers with their own logs, ISR, HW, elections, follower truncation.

Followers replicate as Kafka's do: before copying, a follower checks its latest epoch against
the leader with OffsetsForLeaderEpoch and truncates to ``min(leader end offset, own end offset
for that epoch, own LEO)``, repeating while it does not know the epoch the leader answered
(AbstractFetcherThread.getOffsetTruncationState). The HW is the minimum LEO over the ISR and
only moves up, except when the leader's own log is cut (truncate_to, unclean election).
"""

from __future__ import annotations

from collections.abc import Collection

from coordinator.ports import NO_LEADER, Batch, IsrStatus, ReplicaState, TopicPartition

from .log import PartitionLog

# Enough for any real divergence: each round removes at least one epoch from the follower.
_MAX_TRUNCATION_ROUNDS = 10_000


class Partition:
    """One partition across brokers. The cluster decides liveness and when replication runs."""

    __slots__ = ("tp", "replicas", "logs", "leader", "leader_epoch", "isr", "hw", "caught_up_ms", "known_leo")

    def __init__(self, tp: TopicPartition, replicas: tuple[int, ...], leader_epoch: int = 0) -> None:
        self.tp = tp
        self.replicas = replicas
        self.logs: dict[int, PartitionLog] = {b: PartitionLog() for b in replicas}
        self.leader = replicas[0]
        self.leader_epoch = leader_epoch
        self.isr: list[int] = list(replicas)
        self.hw = 0
        # Last logical time each follower had the leader's LEO (replica.lag.time.max.ms).
        self.caught_up_ms: dict[int, int] = {}
        # Each follower's LEO as the current leader learnt it from the follower's fetches. A new
        # leader knows none (Kafka resets remote replica state), so the HW waits for them to fetch.
        self.known_leo: dict[int, int] = dict.fromkeys(replicas, 0)

    # ---------------------------------------------------------------- views

    @property
    def online(self) -> bool:
        return self.leader != NO_LEADER

    @property
    def leader_log(self) -> PartitionLog:
        return self.logs[self.leader]

    def lso(self) -> int:
        return self.leader_log.lso(self.hw)

    def isr_status(self, live: Collection[int]) -> IsrStatus:
        leader, logs, isr, known_leo = self.leader, self.logs, self.isr, self.known_leo
        replicas = []
        for b in self.replicas:
            # The leader's own LEO, or what it learnt of a follower's (its real log if not fetched yet).
            known = None if b == leader else known_leo.get(b)
            replicas.append(ReplicaState(b, logs[b].leo if known is None else known, b in isr, b in live))
        return IsrStatus(
            topic_id=self.tp.topic_id,
            partition=self.tp.partition,
            leader=leader,
            leader_epoch=self.leader_epoch,
            leo=logs[leader].leo if leader != NO_LEADER else -1,
            hw=self.hw,
            replicas=tuple(replicas),
        )

    def needs_replication(self, live: Collection[int]) -> bool:
        """True when some live follower is behind the leader or not in the ISR."""
        if not self.online:
            return False
        leo = self.leader_log.leo
        return any(
            b != self.leader
            and b in live
            and (self.logs[b].leo != leo or self.known_leo.get(b) != leo or b not in self.isr)
            for b in self.replicas
        )

    # ---------------------------------------------------------------- leader-side changes

    def append_leader(self, batch: Batch) -> None:
        """Append on the leader (validation is the caller's); followers copy it on replication."""
        self.leader_log.append(batch)
        if len(self.isr) == 1:
            self.update_hw()

    def update_hw(self) -> bool:
        """HW = min LEO over the ISR, never moving down here; returns whether it moved."""
        if not self.online:
            return False
        new_hw = self.leader_log.leo
        for b in self.isr:
            if b != self.leader:
                known = self.known_leo.get(b)
                if known is None:
                    return False  # an ISR member has not fetched from this leader yet
                new_hw = min(new_hw, known)
        if new_hw > self.hw:
            self.hw = new_hw
            return True
        return False

    def truncate_leader(self, offset: int) -> None:
        """The coordinator cut the leader's log: the HW comes down with it; followers follow on fetch."""
        log = self.leader_log
        log.truncate_to(offset, self.hw)
        self.hw = min(self.hw, log.leo)
        # Followers above the new LEO are unknown until they fetch (and truncate) again.
        for b, known in list(self.known_leo.items()):
            if known > log.leo:
                del self.known_leo[b]

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The leader restarts empty at ``offset``; followers follow on their next fetch."""
        self.leader_log.truncate_fully_and_start_at(offset)
        self.hw = offset
        self.known_leo.clear()

    def advance_log_start(self, offset: int) -> bool:
        """DeleteRecords/retention: never past the HW; followers learn the new log start at once."""
        offset = min(offset, self.hw)
        moved = False
        for log in self.logs.values():
            moved = log.advance_log_start(min(offset, log.leo)) or moved
        return moved

    # ---------------------------------------------------------------- elections

    def elect(self, new_leader: int, unclean: bool, now_ms: int, assign_epoch: bool) -> None:
        """Make ``new_leader`` leader with a bumped epoch; unclean elections reset the ISR to it alone.

        ``assign_epoch`` is Kafka's maybeAssignEpochStartOffset on becoming leader; read-only
        mirror partitions skip it so their epoch cache stays the one their mirrored batches built.
        """
        self.leader = new_leader
        self.leader_epoch += 1
        if unclean or new_leader not in self.isr:
            self.isr = [new_leader]
        log = self.logs[new_leader]
        self.known_leo.clear()
        # An unclean leader may lack data below the old HW: that data is lost.
        self.hw = min(self.hw, log.leo)
        if assign_epoch:
            log.epochs.assign(self.leader_epoch, log.leo)
        for b in self.replicas:
            if b != new_leader:
                self.caught_up_ms[b] = now_ms

    def bump_epoch(self, min_epoch: int, assign_epoch: bool) -> int:
        """Raise the leader epoch to ``min_epoch`` keeping the leader (a PartitionChangeRecord)."""
        if self.leader_epoch < min_epoch:
            self.leader_epoch = min_epoch
            if assign_epoch and self.online:
                self.leader_log.epochs.assign(self.leader_epoch, self.leader_log.leo)
        return self.leader_epoch

    def go_offline(self) -> None:
        """No eligible leader: the partition is unavailable; the ISR keeps the last leader."""
        if self.leader != NO_LEADER:
            self.isr = [self.leader]
        self.leader = NO_LEADER

    def remove_from_isr(self, broker: int) -> None:
        if broker in self.isr and len(self.isr) > 1:
            self.isr.remove(broker)
            self.update_hw()

    # ---------------------------------------------------------------- replication

    def replicate(self, live: Collection[int], now_ms: int, paused: Collection[int] = ()) -> None:
        """One fetch round by every live, unpaused follower; then ISR expansion and the HW."""
        if not self.online:
            return
        leader_log = self.leader_log
        for b in self.replicas:
            if b == self.leader or b not in live or b in paused:
                continue
            follower = self.logs[b]
            self._truncate_divergence(follower)
            if follower.leo > leader_log.leo:
                follower.truncate_to(leader_log.leo, self.hw)
            if follower.leo < leader_log.log_start:
                # Fell below the leader's log start: OffsetOutOfRange, start over there.
                follower.truncate_fully_and_start_at(leader_log.log_start)
            if follower.log_start < leader_log.log_start:
                follower.advance_log_start(leader_log.log_start)
            pending = leader_log.batches_from(follower.leo)
            if pending and pending[0].base_offset < follower.leo:
                follower.truncate_to(pending[0].base_offset, self.hw)
            for batch in pending:
                follower.append(batch)
            self.known_leo[b] = follower.leo
            if follower.leo == leader_log.leo:
                self.caught_up_ms[b] = now_ms
                if b not in self.isr and follower.leo >= self.hw:
                    self.isr.append(b)
                    self.isr.sort(key=self.replicas.index)
        self.update_hw()

    def _truncate_divergence(self, follower: PartitionLog) -> None:
        """Kafka follower truncation by OffsetsForLeaderEpoch, repeated for diverging epochs."""
        leader_log = self.leader_log
        for _ in range(_MAX_TRUNCATION_ROUNDS):
            f_epoch = follower.latest_epoch()
            if f_epoch is None:
                return
            answer = leader_log.end_offset_for_epoch(f_epoch)
            if answer.epoch == f_epoch and answer.end_offset >= follower.leo:
                return
            before = (follower.leo, len(follower.epochs))
            if answer.undefined:
                # The leader knows no epoch this old or this new: fall back to the HW, as Kafka does.
                if not leader_log.batches:
                    follower.truncate_fully_and_start_at(leader_log.log_start)
                else:
                    follower.truncate_to(min(self.hw, follower.leo), self.hw)
                return
            own = follower.end_offset_for_epoch(answer.epoch)
            if own.epoch != answer.epoch:
                # We never had the leader's epoch: cut to where our older epochs end and ask again.
                follower.truncate_to(min(own.end_offset, follower.leo), self.hw)
                if (follower.leo, len(follower.epochs)) == before:
                    # No progress possible (cannot happen with Kafka's cache rules): be safe, use the HW.
                    follower.truncate_to(min(self.hw, follower.leo), self.hw)
                    return
                continue
            follower.truncate_to(min(own.end_offset, answer.end_offset, follower.leo), self.hw)
            return

    def shrink_isr(self, live: Collection[int], now_ms: int, lag_max_ms: int) -> bool:
        """Drop followers that are offline or have not caught up within ``lag_max_ms``."""
        if not self.online:
            return False
        changed = False
        leader_leo = self.leader_log.leo
        for b in list(self.isr):
            if b == self.leader:
                continue
            known = self.known_leo.get(b)
            if b in live and known == leader_leo:
                # At the leader's LEO right now: in sync whatever the time (Kafka's isCaughtUp).
                self.caught_up_ms[b] = now_ms
                continue
            lagging = now_ms - self.caught_up_ms.get(b, now_ms) > lag_max_ms
            if b not in live or lagging:
                self.isr.remove(b)
                changed = True
        if changed:
            self.update_hw()
        return changed
