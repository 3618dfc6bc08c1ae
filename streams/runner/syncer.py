"""A mirror's periodic syncs beside its fetching: the epoch check (DLE >= SLE), topic configs,
consumer- and share-group offsets, ACLs, and STOPPING's last group offset sync.

The plans are the core's (``coordinator/workflows/sync_*``); this runs them against the ports and
counts each kind's outcome in the mirror's ``MirrorStats`` (read by ``streams.worker.metrics``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from coordinator.partition_state import MirrorPartitionState
from coordinator.ports import (
    DestinationCluster,
    GroupNotEmpty,
    GroupType,
    IsolationLevel,
    PartitionOffsets,
    PortError,
    SourceCluster,
    TopicPartition,
    tp_order,
)
from coordinator.workflows import commands as c
from coordinator.workflows.config import MirrorConfig
from coordinator.workflows.fencing import proactive_bump
from coordinator.workflows.stop import FinalSync
from coordinator.workflows.sync_acls import plan_acl_sync
from coordinator.workflows.sync_configs import plan_config_sync
from coordinator.workflows.sync_groups import (
    DestPartition,
    finish_group_sync,
    group_selected,
    name_pattern,
    plan_group_sync,
)
from streams.runner.driver import Observer, drive_all, drive_one, latest_epoch, raise_first, run_calls

log = logging.getLogger(__name__)

# The sync kinds counted in ``MirrorStats`` (the prototype's <Kind>SyncError / RefreshError meters).
SYNC_KINDS = ("topic_config", "consumer_group_offset", "share_group_offset", "acl", "topic_metadata_refresh")
# Partitions per part of the epoch check, topics per part of the config sync: ``MirrorSyncer.between``
# runs between the parts.
_SYNC_PART = 1000
_SYNC_TOPICS = 25


class MirrorStats:
    """One mirror's fetch and sync counters, read by ``streams.worker.metrics`` at scrape time.

    Plain ints: only the mirror's one running job writes them, and a scrape reads whole ints.
    They outlive the runner (the worker keeps one per mirror), so counters never go back.
    """

    def __init__(self) -> None:
        self.fetch_bytes = 0
        self.fetch_records = 0
        self.fetch_requests = 0  # one per pipelined wave: the batched request a fetcher sends
        self.fetch_errors = 0  # partitions whose fetch failed
        self.sync_errors = dict.fromkeys(SYNC_KINDS, 0)
        self.sync_success_ms = dict.fromkeys(SYNC_KINDS, -1)  # clock of the last sync that ran clean
        self.sync_error_reasons: dict[str, str] = {}  # kind -> why its last sync failed, until one runs clean

    def synced(self, kind: str, now_ms: int, error: bool | str | None) -> None:
        """One sync of ``kind`` ended: clean, or failed (``error`` True or the reason)."""
        if error:
            self.sync_errors[kind] += 1
            if isinstance(error, str) or kind not in self.sync_error_reasons:
                self.sync_error_reasons[kind] = error if isinstance(error, str) else "failed"
        else:
            self.sync_success_ms[kind] = now_ms
            self.sync_error_reasons.pop(kind, None)


class MirrorSyncer:
    """Runs one mirror's syncs; commands go through the runner's ``executor`` (in order with the
    rest of its writes), notes through ``note``, topic names come from ``topic_name``."""

    def __init__(self, mirror_name: str, source: SourceCluster, dest: DestinationCluster, config: MirrorConfig,
                 executor: Any, stats: MirrorStats, topic_name: Callable[[uuid.UUID], str],
                 note: Callable[[str], None], warnings: list[str]) -> None:  # fmt: skip
        self.mirror_name = mirror_name
        self.source = source
        self.dest = dest
        self.config = config
        self.executor = executor
        self.stats = stats
        self.topic_name = topic_name
        self.note = note
        self.warnings = warnings  # the runner's: config sync warnings join them
        # the last final sync's group positions per partition (group, offset): a stop's outcome
        self.final_positions: dict[TopicPartition, list[tuple[str, int]]] = {}
        # The destination's ListOffsets the last final sync read, per partition: that step's stop
        # observation takes them instead of asking again (``MirrorObservers.dest_offsets``).
        self.final_dest: dict[TopicPartition, PartitionOffsets] = {}
        self.now_ms = 0
        self._warned: tuple[tuple[str, str], ...] = ()
        # Called between the parts of a sync (on the sync's thread): the worker's copy path goes
        # on meanwhile (``streams.worker.mirror_jobs.run_copy``) rather than wait seconds for it.
        self.between: Callable[[], Any] | None = None

    def run(self, live: dict[TopicPartition, MirrorPartitionState], now_ms: int) -> None:
        """The periodic syncs of the live mirror partitions ``live``: the epoch check, topic
        configs, group offsets and ACLs; a failure is noted and the next kind goes on."""
        self.now_ms = now_ms
        if self.config.problems != self._warned:  # once per config, not at every sync
            self._warned = self.config.problems
            for _, why in self._warned:
                log.warning("mirror %s: a stored config it cannot use is left out (--describe shows it): %s",
                            self.mirror_name, why)  # fmt: skip
        ordered = list(live)  # in key order (``MirrorRunner._live``)
        checked: dict[TopicPartition, Any] = {}
        for i in range(0, len(ordered), _SYNC_PART):
            checked.update(self._all_epochs(ordered[i : i + _SYNC_PART]))
            self._between()
        for tp in ordered:
            got = checked[tp]
            try:
                if isinstance(got, PortError):
                    raise got
                bump = proactive_bump(tp, got[1], got[0], self.config)
                if bump is not None:
                    self.executor.run_one(bump)
            except PortError as e:
                self.note(f"epoch check {tp}: {e}")
        config_failed: str | None = None
        topics = sorted({tp.topic_id for tp in live})
        # Both clusters' configs of every topic in one pipelined wave: one by one, 1,000 topics
        # were 2,000 round trips that held the mirror's job (and so its copying) for seconds.
        described: dict[uuid.UUID, Any] = {}
        for i in range(0, len(topics), _SYNC_TOPICS):
            part = topics[i : i + _SYNC_TOPICS]
            try:
                described.update(drive_all({t: self._configs(t) for t in part}))
            except Exception as e:  # noqa: BLE001 - not a port error: every topic's sync failed with it
                described.update(dict.fromkeys(part, e))
            self._between()
        for topic_id in topics:
            try:
                got = described[topic_id]
                if isinstance(got, BaseException):
                    raise got
                self._sync_configs(topic_id, *got)
            except Exception as e:  # noqa: BLE001 - counted and shown; the other syncs go on
                config_failed = config_failed or f"{type(e).__name__}: {e}"
                self.note(f"config sync {topic_id}: {e}")
        if live:
            self.stats.synced("topic_config", self.now_ms, config_failed or self._unusable("topic_config"))
        for step in (self._sync_groups, self._sync_acls):
            if not live:
                break
            try:
                step(live)
            except Exception as e:  # noqa: BLE001 - counted by the step; the next kind goes on
                self.note(f"{step.__name__}: {e}")
                if not isinstance(e, PortError):
                    log.error("mirror %s: %s failed: %r", self.mirror_name, step.__name__, e)

    def _between(self) -> None:
        if self.between is not None:
            try:
                self.between()
            except Exception:  # noqa: BLE001 - the copy's partitions stay hot for their steps
                log.exception("mirror %s: copy between sync parts failed", self.mirror_name)

    def _unusable(self, kind: str) -> str | None:
        """Why ``kind`` ran with settings left out (stored values it could not use), or None: such
        a sync still runs for what the rest selects, and counts as failed."""
        why = self.config.problems_of(kind)
        return "; ".join(why) if why else None


    def _all_epochs(self, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
        """(SLE, DLE) of each partition, or the PortError that kept it: from one metadata request
        per cluster (every topic's partitions' leader epochs), not two ListOffsets per partition
        (100,000 calls every sync at 50,000 partitions were most of an idle worker's CPU). A
        partition the metadata does not show led (missing, offline) is asked one by one, as before."""
        topics = sorted({tp.topic_id for tp in tps})
        asks = [(self.source, "describe_topics", (topics,), None), (self.dest, "describe_topics", (topics,), None)]
        got = run_calls(asks) if tps else []
        epochs: list[dict[TopicPartition, int]] = []
        for answer in got:
            if isinstance(answer, PortError):
                epochs = []  # a topic gone on one side, say: every partition asked one by one
                break
            epochs.append({TopicPartition(t.topic_id, p.partition): p.leader_epoch for t in answer
                           for p in t.partitions if p.leader >= 0})  # fmt: skip
        out: dict[TopicPartition, Any] = {}
        rest = []
        for tp in tps:
            if epochs and tp in epochs[0] and tp in epochs[1]:
                out[tp] = (epochs[0][tp], epochs[1][tp])
            else:
                rest.append(tp)
        out.update(drive_all({tp: self._epochs(tp) for tp in rest}))
        return out

    def _epochs(self, tp: TopicPartition) -> Observer:
        """(SLE, DLE)."""
        got = yield [(self.source, "list_offsets", (tp,), None), (self.dest, "list_offsets", (tp,), None)]
        raise_first(got)
        return got[0].leader_epoch, got[1].leader_epoch

    def periodic_epoch_check(self, tp: TopicPartition) -> None:
        """DLE >= SLE at each metadata sync (the third mechanism, after reactive and proactive)."""
        sle, dle = drive_one(self._epochs(tp))
        bump = proactive_bump(tp, dle, sle, self.config)
        if bump is not None:
            self.executor.run_one(bump)

    def _configs(self, topic_id: uuid.UUID) -> Observer:
        """(the source's configs, the destination's)."""
        got = yield [(self.source, "describe_configs", (topic_id,), None),
                     (self.dest, "describe_configs", (topic_id,), None)]  # fmt: skip
        raise_first(got)
        return got[0], got[1]

    def _sync_configs(self, topic_id: uuid.UUID, source: dict[str, str], dest: dict[str, str]) -> None:
        plan = plan_config_sync(topic_id, self.topic_name(topic_id), source, dest, self.config.topic_properties_exclude)
        self.warnings.extend(w for w in plan.warnings if w not in self.warnings)
        if plan.command is not None:
            self.executor.run_one(plan.command)

    def final_group_sync(self, stopping: dict[TopicPartition, MirrorPartitionState], now_ms: int) -> FinalSync:
        """STOPPING's last group offset sync for ``stopping`` (one sync for all of them, whichever
        topics they belong to); how it went is for each partition's next stop observation."""
        self.now_ms = now_ms
        error: PortError | None = None
        tps = list(stopping)
        self.final_positions = {}
        self.final_dest = {}
        try:
            self._sync_groups(stopping, final=True)
            outcome = FinalSync.RAN
        except PortError as e:
            outcome, error = FinalSync.FAILED, e
        if error is None:
            if log.isEnabledFor(logging.INFO):  # the topics' names: a walk over every partition, for the log only
                log.info("mirror %s: last group offset sync before the stop ran for %d partition(s) of %s",
                         self.mirror_name, len(tps), self._topic_names(tps))  # fmt: skip
        else:
            topics = self._topic_names(tps)
            log.warning("mirror %s: last group offset sync before the stop failed for %d partition(s) of %s "
                        "(tried until stop.group.sync.timeout.ms, %d ms after the stop began): %s: %s",
                        self.mirror_name, len(tps), topics, self.config.stop_group_sync_timeout_ms,
                        type(error).__name__, error)  # fmt: skip
        return outcome

    def _topic_names(self, tps: list[TopicPartition]) -> str:
        return ", ".join(sorted({self.topic_name(tp.topic_id) for tp in tps}))

    def _sync_groups(self, live: dict[TopicPartition, MirrorPartitionState], final: bool = False) -> None:
        """Consumer- and share-group offsets; counted per kind (a failure before the commits, a
        list of groups say, fails both kinds)."""
        failed: dict[str, str] = {}
        try:
            self._sync_group_offsets(live, final, failed)
        except Exception as e:
            if not failed:  # it failed before any commit
                failed.update(dict.fromkeys(("consumer_group_offset", "share_group_offset"), f"{type(e).__name__}: {e}"))
            raise
        finally:
            for kind in ("consumer_group_offset", "share_group_offset"):
                self.stats.synced(kind, self.now_ms, failed.get(kind) or self._unusable(kind))

    def _sync_group_offsets(self, live: dict[TopicPartition, MirrorPartitionState], final: bool,
                            failed: dict[str, str]) -> None:  # fmt: skip
        inc, exc = name_pattern(self.config.groups_include), name_pattern(self.config.groups_exclude)
        groups = [g for g in self.source.list_groups() if group_selected(g.group_id, inc, exc)]
        if not groups:
            return
        source_offsets = {g.group_id: self.source.group_offsets(g.group_id) for g in groups}
        dest_groups = {g.group_id: g for g in self.dest.list_groups()}
        active = [g for g, d in dest_groups.items() if d.active]
        dest_committed = {g.group_id: self.dest.group_offsets(g.group_id) for g in groups if g.group_id in dest_groups}
        wanted = {TopicPartition(o.topic_id, o.partition) for offs in source_offsets.values() for o in offs}
        partitions = {}
        for tp in sorted(wanted & live.keys(), key=tp_order):
            off = self.dest.list_offsets(tp)
            if final:
                self.final_dest[tp] = off
            partitions[tp] = DestPartition(live[tp].state, off.log_start, off.leo, final=final)
        plan = plan_group_sync(groups, source_offsets, active, dest_committed, partitions,
                               self.config.groups_include, self.config.groups_exclude)
        if final:  # where each group resumes, rewritten or already there: the stop's outcome (issue #26)
            for p in plan_group_sync(groups, source_offsets, active, {}, partitions, self.config.groups_include,
                                     self.config.groups_exclude).offsets:  # fmt: skip
                self.final_positions.setdefault(p.tp, []).append((p.group_id, p.offset))
        epochs = {(tp, o): self._epoch_before(tp, o) for tp, o in plan.epoch_lookups()}
        for cmd in finish_group_sync(plan, epochs):
            try:
                self.executor.run_one(cmd)
            except GroupNotEmpty:
                pass  # a member joined meanwhile: its group is its own now
            except PortError as e:
                share = isinstance(cmd, c.CommitGroupOffsets) and cmd.group_type is GroupType.SHARE
                failed["share_group_offset" if share else "consumer_group_offset"] = f"{type(e).__name__}: {e}"
                raise

    def _epoch_before(self, tp: TopicPartition, offset: int) -> int:
        """The epoch a consumer would commit with ``offset``: that of the record before it, from the
        destination's epoch cache (the record at the log start when nothing precedes it)."""
        off = self.dest.list_offsets(tp)
        at = max(offset - 1, off.log_start)
        if at < off.leo:
            got = self.dest.fetch(tp, at, 1, IsolationLevel.READ_UNCOMMITTED).batches
            if got:
                return got[0].leader_epoch
        latest = drive_one(latest_epoch(self.dest, tp, off.leader_epoch))
        return -1 if latest is None else latest

    def _sync_acls(self, live: dict[TopicPartition, MirrorPartitionState]) -> None:
        try:
            self.executor.run(plan_acl_sync(self.source.describe_acls(), self.dest.describe_acls(), self.config.acls_include))
        except Exception as e:
            self.stats.synced("acl", self.now_ms, f"{type(e).__name__}: {e}")
            raise
        self.stats.synced("acl", self.now_ms, self._unusable("acl") or False)
