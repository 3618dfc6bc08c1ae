"""The KIP RPCs' responses as the controller builds them from the core's admin results (secrets scrubbed)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
import msgspec
from coordinator import admin
from coordinator.readiness import SyncReport, combined_sync_errors, combined_sync_times, failover_readiness
from coordinator.workflows.fetcher import lag as fetch_lag
from coordinator.states import MirrorState
from records.redact import redact_config
from records.registry import SchemaSet
from streams.admin.client import (
    scrub,
)
from streams.state.changelog_view import PartitionStatus, StateKey
from coordinator.workflows.config import MirrorConfig, stored_config_problems


def error_response(schemas: SchemaSet, api: str, code: int, message: str | None) -> msgspec.Struct:
    cls = schemas.struct(f"{api}Response")
    fields = {"throttle_time_ms": 0, "error_code": int(code), "error_message": message}
    if api == "ListClusterMirrors":
        fields["mirrors"] = []
    elif api == "DescribeClusterMirrors":
        fields["mirrors"] = []
    elif api in ("AlterClusterMirrorConfigs", "DescribeClusterMirrorConfigs"):
        fields["configs"] = []
    elif api not in ("CreateClusterMirror", "DeleteClusterMirror"):
        fields["topics"] = []
    return cls(**fields)


def topic_response(schemas: SchemaSet, api: str, result: admin.AdminResponse, secrets: Sequence[str]) -> msgspec.Struct:
    cls = schemas.struct(f"{api}Response")
    if api in ("CreateClusterMirror", "DeleteClusterMirror"):
        code, message = result.first_error()
        return cls(throttle_time_ms=0, error_code=int(code), error_message=scrub(message, secrets))
    topic_cls = schemas.nested(f"{api}Response", "TopicResult")
    topics = [topic_cls(name=t.name, error_code=int(t.error_code), error_message=scrub(t.error_message, secrets))
              for t in result.topics]  # fmt: skip
    extra: dict[str, Any] = {}
    if result.skipped:  # only StartMirrorTopics has them
        skipped_cls = schemas.nested(f"{api}Response", "SkippedTopic")
        extra["skipped_topics"] = [skipped_cls(name=n, reason=scrub(why, secrets)) for n, why in result.skipped]
    return cls(throttle_time_ms=0, error_code=int(result.error_code),
               error_message=scrub(result.error_message, secrets), topics=topics, **extra)  # fmt: skip


def names(body: Any) -> list[str]:
    return [t.topic_name for t in body.topics]


def alter_configs_response(s: SchemaSet, result: admin.AdminResponse, secrets: Sequence[str]) -> msgspec.Struct:
    name = "AlterClusterMirrorConfigsResponse"
    rcls = s.nested(name, "ConfigResult")
    configs = [rcls(name=c.name, error_code=int(c.error_code), error_message=scrub(c.error_message, secrets))
               for c in result.topics]  # fmt: skip
    return s.struct(name)(throttle_time_ms=0, error_code=int(result.error_code),
                          error_message=scrub(result.error_message, secrets), configs=configs)  # fmt: skip


def list_response(s: SchemaSet, mirrors: Sequence[admin.ListedMirror]) -> msgspec.Struct:
    cls = s.nested("ListClusterMirrorsResponse", "ListedMirror")
    listed = [cls(mirror_name=m.name, source_bootstrap=m.source_bootstrap, source_cluster_id=m.source_cluster_id,
                  topic_count=m.topic_count, topic_names=list(m.topic_names)) for m in mirrors]  # fmt: skip
    return s.struct("ListClusterMirrorsResponse")(throttle_time_ms=0, error_code=0, error_message=None, mirrors=listed)


def describe_response(s: SchemaSet, described: Sequence[admin.DescribedMirror],
                       statuses: Mapping[StateKey, PartitionStatus], ready_max_lag: int = 1000,
                       syncs: Mapping[str, Sequence[SyncReport]] | None = None,
                       counts_only: bool = False) -> msgspec.Struct:  # fmt: skip
    """``counts_only``: each topic with its partitions' counts per state and no details (a
    progress poll of 50k partitions then costs a few thousand counts, not 50k rows)."""
    name = "DescribeClusterMirrorsResponse"
    mcls, tcls, pcls = s.nested(name, "DescribedMirror"), s.nested(name, "TopicPartitions"), s.nested(name, "PartitionDetail")
    ccls = s.nested(name, "StateCount")
    now = time.monotonic()
    now_ms = int(time.time() * 1000)
    mirrors = []
    for m in described:
        topics = []
        counts = dict.fromkeys(MirrorState, 0)
        lags: dict[tuple[uuid.UUID, int], int] = {}
        for t in m.topics:
            if counts_only:
                per_state: dict[MirrorState, int] = dict(t.state_counts or {})
                for p, state in t.partitions:  # none when counted by a StateTally
                    st = statuses.get((m.name, t.topic_id, p))
                    state = state if st is None else st.state
                    per_state[state] = per_state.get(state, 0) + 1
                for state, n in per_state.items():
                    counts[state] += n
                topics.append(tcls(topic_name=t.name, partitions=[],
                                   state_counts=[ccls(state=int(k), count=n) for k, n in sorted(per_state.items())]))  # fmt: skip
                continue
            parts = []
            for p, state in t.partitions:
                st = statuses.get((m.name, t.topic_id, p), PartitionStatus(state))
                known = st.source_hw >= 0 and st.destination_leo >= 0
                lag = st.source_hw - st.destination_leo if known else -1
                age = int((now - st.offsets_at) * 1000) if st.offsets_at >= 0 else -1
                counts[st.state] += 1
                if known and st.state is MirrorState.MIRRORING:
                    lags[(t.topic_id, p)] = fetch_lag(st.source_hw, st.destination_leo)
                parts.append(pcls(partition_index=p, source_offset=st.source_hw, destination_offset=st.destination_leo,
                                  lag=lag, state_value=st.state.name, retry_attempt=st.retry_attempt,
                                  error_message=st.error_message, error_code=0, state=int(st.state),
                                  offsets_age_ms=max(age, 0) if age >= 0 else -1))  # fmt: skip
            topics.append(tcls(topic_name=t.name, partitions=parts))
        extra: dict[str, Any] = {}
        if not m.error_code:
            # The workers' rule, over the sync times the workers report (streams.state.sync_status).
            interval = sync_interval_ms(m.configs)
            times = None if syncs is None else combined_sync_times(syncs.get(m.name, ()), interval, now_ms)
            errors = None if syncs is None else combined_sync_errors(syncs.get(m.name, ()), interval, now_ms)
            ready = failover_readiness(counts, lags, ready_max_lag, times, interval, now_ms, errors)
            # Stored configs the mirror cannot use (an older version let them in): never silent.
            unusable = [f"unusable config: {why}" for _, why in sorted(stored_config_problems(m.configs).items())]
            if unusable:
                ready = ready._replace(ready=False, reasons=(*unusable, *ready.reasons))
            extra = {"failover_ready": -1 if ready.ready is None else int(ready.ready),
                     "not_ready_reasons": list(ready.reasons),
                     "failed_retry_max_attempts": retry_max_attempts(m.configs)}  # fmt: skip
        mirrors.append(mcls(error_code=int(m.error_code), mirror_name=m.name, topics=topics, error_message=m.error_message,
                            **extra))  # fmt: skip
    return s.struct(name)(throttle_time_ms=0, error_code=0, error_message=None, mirrors=mirrors)


def describe_config(body: Any) -> str:
    config = getattr(body, "config", None) or getattr(body, "configs", None)
    if not config:
        return ""
    return f", config {redact_config({c.name: c.value for c in config})}"


def retry_max_attempts(configs: Mapping[str, str | None]) -> int:
    try:
        return MirrorConfig.from_properties({k: v for k, v in configs.items() if v is not None}).failed_retry_max_attempts
    except Exception:  # noqa: BLE001 - a config the mirror could not parse: the CLI shows its default
        return -1


def sync_interval_ms(configs: Mapping[str, str | None]) -> int:
    try:
        return MirrorConfig.from_properties({k: v for k, v in configs.items() if v is not None}).metadata_refresh_interval_ms
    except Exception:  # noqa: BLE001 - as the worker, which would not run such a mirror, falls back
        return MirrorConfig().metadata_refresh_interval_ms
