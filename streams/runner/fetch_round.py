"""A mirror's fetch round: what the KIP's mirror fetcher threads do, one round at a time.

Each fetcher (``MirrorRunner.sessions``) serves its MIRRORING partitions in rotation order, in
pipelined waves (``streams.runner.driver.drive_all``), until its response byte budget is spent, as a
broker fills a fetch response partition by partition. The decisions are the pure core's
(``coordinator.workflows.fetcher.decide_fetch``); the runner appends, persists and backs off.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState, stamp_applied
from coordinator.ports import FetchResult, PortError, TopicPartition
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows import commands as c
from coordinator.workflows.fetcher import FetchPosition, decide_fetch, partition_max_bytes, round_order
from streams.runner.driver import drive_all

if TYPE_CHECKING:
    from coordinator.workflows.config import MirrorConfig
    from streams.runner.executor import Executor
    from streams.runner.interest import Interest
    from streams.runner.observers import MirrorObservers
    from streams.runner.syncer import MirrorStats

_FETCH_WAVE = 256  # partitions fetched per pipelined wave; the round's byte budget is checked between waves
STARTED = (DesiredState.START, -1)  # a topic without a desired-state record mirrors as started


class FetchHost(Protocol):
    """What a fetch round reads and changes of the runner that owns the fetchers
    (``streams.runner.runner.MirrorRunner``)."""

    config: MirrorConfig
    executor: Executor
    observers: MirrorObservers
    stats: MirrorStats
    now_ms: int
    sessions: list[set[TopicPartition]]  # the fetchers' partitions
    rotation: list[int]  # where each fetcher's next round starts
    backoff_until: dict[TopicPartition, int]
    idle_until: dict[TopicPartition, int]
    progress: dict[TopicPartition, tuple[int, int]]
    source_errors: dict[TopicPartition, tuple[int, int]]  # (first failure ms, failures in a row)
    peak_round_bytes: int
    interest: Interest  # parked partitions: caught up, waiting on the source's long poll

    def key(self, tp: TopicPartition) -> MirrorPartitionKey: ...

    def state(self, tp: TopicPartition) -> MirrorPartitionState: ...

    def persist(self, key: MirrorPartitionKey, state: MirrorPartitionState) -> bool: ...

    def on_port_error(self, key: MirrorPartitionKey, state: MirrorPartitionState, e: PortError, offset: int) -> None: ...


def fetch_round(r: FetchHost, desired: dict[uuid.UUID, tuple[DesiredState, int]],
                only: set[TopicPartition] | None = None) -> None:
    """One round per fetcher: its partitions in rotation order, in pipelined waves, until the
    response byte budget is spent (as a broker fills a fetch response partition by partition).
    A partition caught up with an empty fetch parks on the source's long poll (``Interest.park``)
    until the source moves, or without one waits ``fetch_max_wait_ms`` before the next fetch."""
    now = r.now_ms
    for i, members in enumerate(r.sessions):
        # A topic being stopped or paused is not fetched: its partitions leave MIRRORING at their next step.
        # From the smaller side: ``only`` is one table partition's share of every fetcher's members.
        candidates = members if only is None or len(only) >= len(members) else [tp for tp in only if tp in members]
        parked = r.interest.parked
        # The state and the desired state's offset, read once per partition per round (a topic ID
        # is hashed and compared in Python).
        states: dict[TopicPartition, tuple[MirrorPartitionState, int]] = {}
        for tp in candidates:
            if ((only is None or tp in only) and tp not in parked
                    and r.backoff_until.get(tp, -1) <= now and r.idle_until.get(tp, -1) <= now):  # fmt: skip
                want, offset = desired.get(tp.topic_id, STARTED)
                if want is DesiredState.START:
                    state = r.state(tp)
                    if state.state is MirrorState.MIRRORING:
                        states[tp] = (state, offset)
        eligible = list(states)
        positions, expected = r.executor.positions, r.executor.expected_leo
        threshold = r.config.epoch_bump_threshold
        remaining = r.config.fetch_response_max_bytes
        used = served = 0
        order = round_order(eligible, r.rotation[i])
        for w in range(0, len(order), _FETCH_WAVE):
            if remaining <= 0:
                break
            wave = order[w : w + _FETCH_WAVE]
            cap = partition_max_bytes(remaining, r.config)
            fetched = drive_all({tp: r.observers.fetch(tp, cap, known_position(positions, tp, states[tp][0]), threshold)
                                 for tp in wave})  # fmt: skip
            r.stats.fetch_requests += 1
            commands: dict[TopicPartition, Sequence[c.Command]] = {}
            decided = []
            for tp in wave:
                got = fetched[tp]
                state, offset = states[tp]
                if isinstance(got, PortError):
                    positions.pop(tp, None)
                    served += 1
                    r.stats.fetch_errors += 1
                    r.on_port_error(r.key(tp), state, got, offset)
                    continue
                r.source_errors.pop(tp, None)
                pos, result, local_end = got
                size = sum(b.size_in_bytes for b in result.batches) if isinstance(result, FetchResult) else 0
                if size > remaining and used > 0:
                    remaining = 0  # the response is full: the rest is not served this round
                    break  # (the first data of a response goes in whatever its size, as in Kafka)
                served += 1
                remaining -= size
                used += size
                if isinstance(result, FetchResult):
                    r.stats.fetch_bytes += size
                    r.stats.fetch_records += sum(b.record_count for b in result.batches)
                decision = decide_fetch(state, tp, pos, result, now, r.config, local_end)
                commands[tp] = decision.commands
                if len(decision.commands) == 1 and type(decision.commands[0]) is c.AppendBatches:
                    expected[tp] = pos.fetch_offset  # the LEO this append was fetched for
                decided.append((tp, state, offset, pos, result, decision, size))
            try:
                failed = r.executor.run_many(commands)
            finally:
                expected.clear()
            for tp, state, offset, pos, result, decision, size in decided:
                if tp in failed:
                    positions.pop(tp, None)
                    r.on_port_error(r.key(tp), state, failed[tp], offset)
                    continue
                if isinstance(result, FetchResult):
                    appended = [b for cmd in decision.commands if isinstance(cmd, c.AppendBatches) for b in cmd.batches]
                    leo = appended[-1].next_offset if appended else pos.fetch_offset
                    if (decision.state is state and result.diverging_epoch is None
                            and len(decision.commands) == (1 if appended else 0)):  # fmt: skip
                        # Only our append moved the destination: its next fetch starts where it ended.
                        positions[tp] = (state, FetchPosition(leo, appended[-1].leader_epoch, pos.log_start, pos.dle)
                                         if appended else pos)  # fmt: skip
                    else:
                        positions.pop(tp, None)
                    r.progress[tp] = (result.hw, leo)
                    if leo >= result.hw and decision.state is state:
                        # Caught up (with this fetch's batches appended, if any): on the source's
                        # long poll if it has one, else not fetched for a while.
                        if appended:
                            # No empty fetch first: one round less per record.
                            r.interest.park(tp, leo, result.leader_epoch)
                        elif size == 0 and not r.interest.park(tp, leo, result.leader_epoch):
                            r.idle_until[tp] = now + r.config.fetch_max_wait_ms
                else:
                    positions.pop(tp, None)
                if decision.state is not state:
                    r.persist(r.key(tp), stamp_applied(decision.state, offset))
        r.rotation[i] += served
        r.peak_round_bytes = max(r.peak_round_bytes, used)


def known_position(positions: dict[TopicPartition, tuple[MirrorPartitionState, FetchPosition]],
                   tp: TopicPartition, state: MirrorPartitionState) -> FetchPosition | None:
    """The destination's position our last append left, while the state it was made under is
    the one read now (any write, ours or another worker's, forgets it)."""
    got = positions.get(tp)
    return got[1] if got is not None and (got[0] is state or got[0] == state) else None

