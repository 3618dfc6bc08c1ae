"""How ``kafka-cluster-mirrors --describe`` prints: the prototype's PartitionInfo rows and tables
(``ClusterMirrorCommand``), then our columns and the failover-readiness table."""

from __future__ import annotations

from typing import Any, TextIO

from coordinator.states import MirrorState


# The prototype's default when the retry limit is not known (ClusterMirrorCommand.getMaxRetryAttempts).
_DEFAULT_RETRY_MAX = 10


def describe_rows(response: Any, failed_only: bool, metadata_offset: int) -> tuple[list[dict[str, Any]], list[Any]]:
    """The prototype's PartitionInfo rows, sorted as it sorts them (mirror, topic, partition), its
    keys first and then ours; and the mirrors that answered with an error."""
    rows, refused = [], []
    for m in response.mirrors:
        if m.error_code:
            refused.append(m)
            continue
        readiness = {"ready": None if m.failover_ready < 0 else bool(m.failover_ready), "reasons": list(m.not_ready_reasons)}
        for t in m.topics:
            for p in t.partitions:
                if failed_only and p.state_value != MirrorState.FAILED.name:
                    continue
                rows.append({
                    "mirror": m.mirror_name, "topic": t.topic_name, "partition": p.partition_index,
                    "sourceOffset": p.source_offset, "destinationOffset": p.destination_offset, "lag": p.lag,
                    "state": p.state_value, "retryAttempt": p.retry_attempt, "errorMessage": p.error_message,
                    # ours, after the prototype's:
                    "offsetsAgeMs": p.offsets_age_ms, "retryMaxAttempts": m.failed_retry_max_attempts,
                    "metadataOffset": metadata_offset, "failoverReadiness": readiness,
                })  # fmt: skip
    rows.sort(key=lambda r: (r["mirror"], r["topic"], r["partition"]))
    return rows, refused


def truncate_left(text: str, width: int) -> str:
    """The prototype's truncateLeft: keeps the rightmost characters behind '...'."""
    return text if len(text) <= width else "..." + text[len(text) - (width - 3):]


def _offset(value: int) -> str:
    return "-" if value == -1 else str(value)


def print_partitions(out: TextIO, rows: list[dict[str, Any]]) -> None:
    """The prototype's printPartitions, then our columns: how old the offsets are, and the error."""
    line = "%-30s %-40s %-10s %-15s %-18s %-10s %-12s %-14s %s"
    out.write((line % ("MIRROR", "TOPIC", "PARTITION", "SOURCE-OFFSET", "DESTINATION-OFFSET", "LAG", "STATE",
                       "OFFSETS-AGE-MS", "ERROR")).rstrip() + "\n")  # fmt: skip
    for r in rows:
        out.write((line % (truncate_left(r["mirror"], 30), truncate_left(r["topic"], 40), r["partition"],
                           _offset(r["sourceOffset"]), _offset(r["destinationOffset"]), _offset(r["lag"]), r["state"],
                           _offset(r["offsetsAgeMs"]), r["errorMessage"] or "")).rstrip() + "\n")  # fmt: skip


def print_failed(out: TextIO, rows: list[dict[str, Any]]) -> None:
    """The prototype's printFailedPartitions (errors cut at 80 characters)."""
    out.write("%-30s %-40s %-10s %-7s %s\n" % ("MIRROR", "TOPIC", "PARTITION", "RETRY", "ERROR"))
    for r in rows:
        error = r["errorMessage"] or ""
        if len(error) > 80:
            error = error[:77] + "..."
        limit = r["retryMaxAttempts"] if r["retryMaxAttempts"] >= 0 else _DEFAULT_RETRY_MAX
        retry = "NonRetryable" if r["retryAttempt"] == -1 else f"{r['retryAttempt']}/{limit}"
        out.write("%-30s %-40s %-10d %-7s %s\n" % (truncate_left(r["mirror"], 30), truncate_left(r["topic"], 40),
                                                   r["partition"], retry, error))  # fmt: skip


def print_readiness(out: TextIO, mirrors: list[Any]) -> None:
    """Ours, after the prototype's table: a line per mirror, ready for a failover or why not."""
    out.write("\n%-30s %-14s %s\n" % ("MIRROR", "FAILOVER-READY", "REASONS"))
    for m in sorted(mirrors, key=lambda m: m.mirror_name):
        ready = {1: "yes", 0: "no"}.get(m.failover_ready, "unknown")
        out.write(("%-30s %-14s %s" % (truncate_left(m.mirror_name, 30), ready, "; ".join(m.not_ready_reasons))).rstrip() + "\n")
