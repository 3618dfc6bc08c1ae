"""What one cluster mirror's workflows observe, as generators of port calls (``streams.runner.driver``).

``MirrorRunner`` decides and acts; ``MirrorObservers`` only asks: the partition workflows'
observations (prepare, stop, a FAILED partition's source probe), a fetch with its position, and
a topic's descriptions. A source call's failure comes back as ``SourceCallFailed``, so the runner
tells a dead source (FAILED, retried once the source answers) from a destination error.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState, Step
from coordinator.ports import (
    Batch,
    DestinationCluster,
    EpochEndOffset,
    FetchResult,
    IsolationLevel,
    OffsetOutOfRange,
    PartitionOffsets,
    PortError,
    SourceCluster,
    TopicMetadata,
    TopicPartition,
    UnknownTopicId,
)
from coordinator.states import DesiredState
from coordinator.workflows.drive import Need, PartitionObservation, needs
from coordinator.workflows.fetcher import MIRROR_FETCH_ISOLATION, FetchPosition, OutOfRange, fetcher_of
from coordinator.workflows.prepare import TOPIC_NOT_READY, PrepareObservation
from coordinator.workflows.stop import FinalSync, StopObservation
from coordinator.workflows.topic import TopicObservation
from streams.runner.driver import Call, Observer, describe_one, latest_epoch, raise_first


class SourceCallFailed(PortError):
    """A call to the source failed with ``cause``: told apart from the destination's failures,
    which are not the source's fault."""

    retriable = True

    def __init__(self, cause: PortError) -> None:
        super().__init__(f"source: {cause}")
        self.cause = cause


class MirrorObservers:
    """The observations of one mirror. It shares the runner's live views (fetcher sessions,
    ready topics, source topics, last group syncs) and reads the cluster IDs through
    ``cluster_ids``, as they are learnt later than the runner is built."""

    def __init__(
        self,
        mirror_name: str,
        source: SourceCluster,
        dest: DestinationCluster,
        sessions: list[set[TopicPartition]],
        ready: set[uuid.UUID],
        source_topics: dict[uuid.UUID, TopicMetadata],
        final_sync: dict[TopicPartition, FinalSync],
        cluster_ids: Callable[[], tuple[str | None, str | None]],
    ) -> None:
        self.mirror_name = mirror_name
        self.source = source
        self.dest = dest
        self.sessions = sessions
        self.ready = ready
        self.source_topics = source_topics
        self.final_sync = final_sync
        self.cluster_ids = cluster_ids
        # topic -> (offset of the desired record, the destination topic's mirror source cluster ID):
        # the PID reset's ID, described once per topic and desired record, not per topic and wave.
        # Only a START re-attaches a topic (a new record: asked again); a stop keeps the attachment.
        self.reset_sources: dict[uuid.UUID, tuple[int, str | None]] = {}
        # The destination's offsets the last group sync read in this step (STOP_WAIT_ISR's), set
        # and cleared by the runner around the step's observations: not asked a second time.
        self.dest_offsets: dict[TopicPartition, PartitionOffsets] = {}
        # The destination's topics by name, listed at most once per topic-level pass (``listing_pass``):
        # a topic not on the destination yet is looked up there by name (a same-named topic with
        # another ID). Listed once per part of 25 topics, a 4,000-topic start listed every topic of
        # B 160 times: minutes of the model server's and the worker's CPU, no start made meanwhile.
        self._listing_pass = False
        self._dest_by_name: dict[str, TopicMetadata] | None = None

    # ------------------------------------------------------------------ partition level

    def immediate(self, key: MirrorPartitionKey, state: MirrorPartitionState, want: DesiredState,
                  now_ms: int) -> PartitionObservation | None:
        """The observation of a step that asks no cluster (entering STOPPING, a settled pair), None
        when the step asks one: then ``partition``'s generator."""
        if needs(state, want, now_ms) is not Need.NOTHING:
            return None
        tp = key.topic_partition
        return PartitionObservation(in_fetcher=tp in self.sessions[fetcher_of(tp, len(self.sessions))])

    def partition(self, key: MirrorPartitionKey, state: MirrorPartitionState, want: DesiredState, now_ms: int,
                  offset: int = -1) -> Observer:
        """``offset``: the desired record's (the stop's source cluster ID is kept per record)."""
        tp = key.topic_partition
        in_fetcher = tp in self.sessions[fetcher_of(tp, len(self.sessions))]
        need = needs(state, want, now_ms)
        if need is Need.NOTHING:
            return PartitionObservation(in_fetcher=in_fetcher)
        if need is Need.SOURCE:  # a FAILED partition retries once the source answers for it
            yield from self._ask_source((self.source, "list_offsets", (tp,), None))
            return PartitionObservation(in_fetcher=in_fetcher)
        if need is Need.DEST:
            return PartitionObservation(in_fetcher=in_fetcher, dest=(yield (self.dest, "list_offsets", (tp,), None)))
        if need is Need.PREPARE:
            return PartitionObservation(in_fetcher=in_fetcher, prepare=(yield from self._prepare(tp, state)))
        return PartitionObservation(in_fetcher=in_fetcher, stop=(yield from self._stop(tp, state, in_fetcher, offset)))

    def _prepare(self, tp: TopicPartition, state: MirrorPartitionState) -> Observer:
        ready = tp.topic_id in self.ready
        if state.step is Step.PREPARE_WAIT_ISR:
            asks: list[Call] = [(self.dest, "list_offsets", (tp,), None), (self.source, "list_offsets", (tp,), None),
                                (self.dest, "isr_status", (tp,), None)]  # fmt: skip
            got = yield asks
            self._raise_first(asks, got)
            dest, src, isr = got
            return PrepareObservation(topic_ready=ready, dest=dest, source_leader_epoch=src.leader_epoch, isr=isr)
        if not ready:
            return TOPIC_NOT_READY  # its partition may not exist on the destination yet
        # The source keeps its LME under the mirror that fed it (the one its topic is attached to).
        src_topic = self.source_topics.get(tp.topic_id)
        lme_mirror = (src_topic.mirror_name if src_topic is not None else None) or self.mirror_name
        asks = [(self.dest, "list_offsets", (tp,), None), (self.source, "list_offsets", (tp,), None),
                (self.source, "last_mirrored_epoch", (lme_mirror, tp), None),
                (self.source, "last_mirror_cut", (lme_mirror, tp), None)]  # fmt: skip
        got = yield asks
        if isinstance(got[0], UnknownTopicId):
            return TOPIC_NOT_READY  # described as created, not serving yet (a lagging destination): wait
        self._raise_first(asks, got)
        dest, src, lme, cut = got
        src_end = local_end = None
        if lme is not None:
            src_end = yield from self._ask_source((self.source, "end_offset_for_epoch", (tp, lme), None))
            if not src_end.undefined:
                local_end = yield (self.dest, "end_offset_for_epoch", (tp, src_end.epoch), None)
        return PrepareObservation(topic_ready=ready, dest=dest, source_leader_epoch=src.leader_epoch, source_lme=lme,
                                  source_epoch_end=src_end, local_epoch_end=local_end, source_cut=cut)

    def _stop(self, tp: TopicPartition, state: MirrorPartitionState, in_fetcher: bool, offset: int) -> Observer:
        """Destination only: a failover must work with the source unreachable."""
        step = state.step
        bump = step is Step.STOP_BUMP_EPOCH  # the bump step also aborts and resets (``decide_stop``)
        seen = self.dest_offsets.pop(tp, None) if self.dest_offsets and step is Step.STOP_WAIT_ISR else None
        # The ISR wait decides from the ISR's status alone: its offsets are not asked (those the
        # last group sync read in this step go with it, as they are at hand).
        offsets = step is not Step.STOP_WAIT_ISR
        asks: list[Call] = [(self.dest, "list_offsets", (tp,), None)] if offsets else []
        if step is Step.STOP_ABORT_OPEN or bump:
            asks.append((self.dest, "open_transactions", (tp,), None))
        elif step is Step.STOP_WAIT_ISR or step is Step.STOP_CUT:
            asks.append((self.dest, "isr_status", (tp,), None))
        # A destination that answers ``latest_epoch`` directly is asked it with the offsets:
        # one wave for the LME's step, not two.
        lme_asked = step is Step.STOP_RECORD_LME and getattr(self.dest, "latest_epoch", None) is not None
        if lme_asked:
            asks.append((self.dest, "latest_epoch", (tp,), None))
        # The reset batch names the source cluster the topic mirrored (its destination topic says).
        resets = step is Step.STOP_PID_RESET or bump
        known = self.reset_sources.get(tp.topic_id) if resets else None
        describe = resets and (known is None or known[0] != offset or offset < 0)
        if describe:
            asks.append((self.dest, "describe_topics", ((tp.topic_id,),), None))
        got = yield asks
        if not offsets:
            got.insert(0, seen)
        dest = got[0]
        mirrored = known[1] if resets and not describe and known is not None else None
        if describe:
            described = got[-1]
            if isinstance(described, UnknownTopicId):
                described = got[-1] = []
            if described and not isinstance(described, PortError):
                mirrored = described[0].mirror_source_cluster_id
                self.reset_sources[tp.topic_id] = (offset, mirrored)
        raise_first(got)
        latest = tail = None
        if step is Step.STOP_RECORD_LME:
            if lme_asked:
                epoch = got[-1] if got[-1] >= 0 else None
            else:
                epoch = yield from latest_epoch(self.dest, tp, dest.leader_epoch)
            latest = EpochEndOffset(epoch, dest.leo) if epoch is not None else EpochEndOffset(-1, -1)
        elif step is Step.STOP_PID_RESET and dest.hw >= dest.leo:
            tail = yield from self._read_dest(tp, state.stop_offset, dest.leo)
        cut_tail = None
        recording = step is Step.STOP_CUT and state.given_up_end_offset < 0 and dest.leo > state.cut_offset
        if recording and dest.hw >= dest.leo:  # a fetch reads below the HW
            cut_tail = yield from self._read_dest(tp, state.cut_offset, dest.leo)  # what the cut gives up
        opens = tuple(got[1]) if step is Step.STOP_ABORT_OPEN or bump else ()
        isr = got[1] if step is Step.STOP_WAIT_ISR or step is Step.STOP_CUT else None
        source_id = mirrored or self.cluster_ids()[0] or ""
        final = self.final_sync.get(tp) if step is Step.STOP_WAIT_ISR else None
        return StopObservation(dest=dest, dest_latest_epoch=latest, open_transactions=opens, tail=tail,
                               isr=isr, in_fetcher=in_fetcher, source_cluster_id=source_id, final_sync=final,
                               cut_tail=cut_tail)  # fmt: skip

    def _ask_source(self, call: Call) -> Observer:
        """One source call; its failure raised as SourceCallFailed."""
        try:
            return (yield call)
        except PortError as e:
            raise SourceCallFailed(e) from e

    def _raise_first(self, calls: Sequence[Call], got: Sequence[Any]) -> None:
        """``raise_first``, a source call's failure as SourceCallFailed."""
        for call, value in zip(calls, got):
            if isinstance(value, PortError):
                raise SourceCallFailed(value) if call[0] is self.source else value

    def _read_dest(self, tp: TopicPartition, start: int, end: int) -> Observer:
        out: list[Batch] = []
        offset = start
        while offset < end:
            got = (yield (self.dest, "fetch", (tp, offset, 1 << 20, IsolationLevel.READ_UNCOMMITTED), None)).batches
            if not got:
                break
            out.extend(got)
            offset = got[-1].next_offset
        return tuple(out)

    # ------------------------------------------------------------------ fetching

    def fetch(self, tp: TopicPartition, max_bytes: int, known: FetchPosition | None = None,
              bump_threshold: int = 0) -> Observer:
        """The fetch position from the destination, the source's fetch from there, and on a
        diverging epoch the destination's end offset for it.

        ``known`` is the destination's position as this runner's last append left it: the
        destination is not asked (a third of a copy's round trips). Whenever the answer would
        make a decision that reads more of it than the fetch offset (a batch above its DLE, a
        source epoch near it, a divergence, an out-of-range, a batch below the offset), the
        destination is asked after all, and the source again if the position was not the same."""
        pos = known if known is not None else (yield from self._dest_position(tp))
        result = yield from self._source_fetch(tp, pos, max_bytes)
        if known is not None and not plain_fetch(result, pos, bump_threshold):
            pos = yield from self._dest_position(tp)
            if pos != known:
                result = yield from self._source_fetch(tp, pos, max_bytes)
        local_end = None
        if isinstance(result, FetchResult) and result.diverging_epoch is not None:
            local_end = yield (self.dest, "end_offset_for_epoch", (tp, result.diverging_epoch.epoch), None)
        return pos, result, local_end

    def _dest_position(self, tp: TopicPartition) -> Observer:
        if getattr(self.dest, "latest_epoch", None) is not None:
            # Both in one round trip: a copy runs a wave after another, each waiting on this.
            got = yield [(self.dest, "list_offsets", (tp,), None), (self.dest, "latest_epoch", (tp,), None)]
            raise_first(got)
            dest, epoch = got[0], (got[1] if got[1] >= 0 else None)
        else:
            dest = yield (self.dest, "list_offsets", (tp,), None)
            epoch = yield from latest_epoch(self.dest, tp, dest.leader_epoch)
        return FetchPosition(dest.leo, epoch, dest.log_start, dest.leader_epoch)

    def _source_fetch(self, tp: TopicPartition, pos: FetchPosition, max_bytes: int) -> Observer:
        try:
            return (yield (self.source, "fetch", (tp, pos.fetch_offset, max_bytes, MIRROR_FETCH_ISOLATION),
                           {"last_fetched_epoch": pos.last_fetched_epoch}))  # fmt: skip
        except OffsetOutOfRange as e:
            return OutOfRange(e.log_start, e.leo)
        except PortError as e:
            raise SourceCallFailed(e) from e


    # ------------------------------------------------------------------ topic level

    def listing_pass(self, on: bool) -> None:
        """A topic-level pass begins (True) or ends: the destination's listing is shared by its
        parts. Topics created by an earlier part have names of their own, so the listing from
        before them still answers the same-name check of the later parts."""
        self._listing_pass, self._dest_by_name = on, None

    def topic(self, topic_id: uuid.UUID, want: DesiredState) -> Observer:
        dest_topic = yield from describe_one(self.dest, topic_id)
        source_cluster_id, dest_cluster_id = self.cluster_ids()
        if want is DesiredState.STOP:
            # A failover needs nothing from the source, which may well be gone.
            return TopicObservation(topic_id=topic_id, source_topic=None, dest_topic=dest_topic,
                                    source_cluster_id="", dest_cluster_id=dest_cluster_id or "")
        if source_cluster_id is None or dest_cluster_id is None:
            return None
        source_topic = yield from describe_one(self.source, topic_id)
        if source_topic is not None:
            self.source_topics[topic_id] = source_topic
        same_name = None
        if dest_topic is None and source_topic is not None:
            by_name = self._dest_by_name
            if by_name is None:
                every = yield (self.dest, "describe_topics", (), None)  # asked once per wave, however many topics need it
                by_name = {t.name: t for t in every}
                if self._listing_pass:
                    self._dest_by_name = by_name
            same_name = by_name.get(source_topic.name)
        return TopicObservation(topic_id=topic_id, source_topic=source_topic, dest_topic=dest_topic,
                                dest_same_name=same_name, source_cluster_id=source_cluster_id,
                                dest_cluster_id=dest_cluster_id)


def plain_fetch(result: FetchResult | OutOfRange, pos: FetchPosition, bump_threshold: int) -> bool:
    """Whether ``decide_fetch`` reads nothing of ``pos`` but its fetch offset for ``result``:
    batches from the offset on, none above the DLE, and no proactive bump due (``fencing.needs_bump``)."""
    if not isinstance(result, FetchResult) or result.diverging_epoch is not None:
        return False
    if result.leader_epoch >= 0 and result.leader_epoch + bump_threshold >= pos.dle:
        return False
    batches = result.batches
    return not batches or (batches[0].base_offset >= pos.fetch_offset
                           and all(b.leader_epoch <= pos.dle for b in batches))  # fmt: skip
