"""A small, deterministic, *clean* mirror history: demo data for the CLI, the report and tests.

Two mirrors (``a-to-b``, ``c-to-b``), a few topics each. Every step is one minute, and one
snapshot is taken per step. Along the way: partitions start (UNKNOWN -> PREPARING ->
MIRRORING), source leader epochs are bumped (EPOCH_FENCING and a DLE bump), one topic is
paused and resumed, ``a-to-b`` fails over (STOPPING -> STOPPED) and later fails back
(STOPPED -> PREPARING -> MIRRORING), and group offsets are synced with the SPEC's formula
``synced = max(destLogStart, min(sourceCommitted, destLEO))``. Every transition is legal
and DLE >= SLE holds wherever it must, so all violation queries come back empty: tests
plant violations on top of it by hand.

The mirror configs carry a SASL JAAS secret, so redaction is exercised by every export.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field

from audit.model import AclDriftRow, AuditSnapshot, ConfigDriftRow, GroupSyncRow, PartitionRow, TransitionRow
from coordinator.states import MirrorState as S

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
STEP_MS = 60_000
SAMPLE_SECRET = "s3cr3t-Pa55w0rd-do-not-export"


@dataclass
class _Part:
    mirror: str
    topic: str
    topic_id: str
    partition: int
    state: S = S.UNKNOWN
    previous: S = S.UNKNOWN
    entered_ms: int = 0
    sle: int = 0
    dle: int = 0
    lme: int = -1
    src_start: int = 0
    src_hw: int = 0
    dst_leo: int = 0
    committed: dict[str, int] = field(default_factory=dict)


class _History:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.offset = 100  # metadata-log offset: bumps once per recorded change
        self.parts: list[_Part] = []
        self.transitions: list[TransitionRow] = []

    def move(self, p: _Part, to: S, at_ms: int, reason: str) -> None:
        self.offset += 1
        self.transitions.append(
            TransitionRow(
                mirror=p.mirror, topic=p.topic, topic_id=p.topic_id, partition=p.partition,
                from_state=int(p.state), to_state=int(to), at_ms=at_ms,
                metadata_offset=self.offset, reason=reason,
            )
        )  # fmt: skip
        p.previous, p.state, p.entered_ms = p.state, to, at_ms

    def produce(self, now_ms: int) -> None:
        for p in self.parts:
            p.src_hw += self.rng.randint(50, 400)
            if p.state in (S.MIRRORING, S.PAUSING):  # the fetcher follows, a little behind
                p.dst_leo = max(p.dst_leo, p.src_hw - self.rng.randint(0, 120))
            if p.state is S.STOPPED:  # writable: local producers append after failover
                p.dst_leo += self.rng.randint(0, 50)

    def snapshot(self, now_ms: int) -> AuditSnapshot:
        parts = [
            PartitionRow(
                mirror=p.mirror, topic=p.topic, topic_id=p.topic_id, partition=p.partition,
                state=int(p.state), previous_state=int(p.previous), state_entered_ms=p.entered_ms,
                source_leader_epoch=p.sle, dest_leader_epoch=p.dle, last_mirrored_epoch=p.lme,
                source_log_start=p.src_start, source_lso=p.src_hw, source_hw=p.src_hw,
                dest_log_start=p.src_start if p.state is not S.STOPPED else 0,
                dest_hw=p.dst_leo, dest_leo=p.dst_leo,
            )
            for p in self.parts
        ]  # fmt: skip
        syncs = []
        for p in self.parts:
            if p.state is S.STOPPED:
                continue  # no group sync after failover
            for group, committed in sorted(p.committed.items()):
                dest_start = p.src_start
                synced = max(dest_start, min(committed, p.dst_leo))
                syncs.append(
                    GroupSyncRow(
                        mirror=p.mirror, group_id=group, group_type="consumer", topic=p.topic,
                        topic_id=p.topic_id, partition=p.partition, source_committed=committed,
                        synced_offset=synced, dest_log_start=dest_start, dest_leo=p.dst_leo,
                        leader_epoch=p.dle, synced_at_ms=now_ms - 5_000,
                    )
                )  # fmt: skip
        return AuditSnapshot(
            metadata_offset=self.offset,
            taken_at_ms=now_ms,
            partitions=parts,
            transitions=list(self.transitions),
            group_syncs=syncs,
            config_drift=[
                ConfigDriftRow(mirror="c-to-b", topic="payments", config_name="retention.ms",
                               source_value="604800000", dest_value="86400000", observed_ms=now_ms - 1_000),
            ],
            acl_drift=[
                AclDriftRow(mirror="c-to-b", resource_type="TOPIC", resource_name="payments",
                            pattern_type="LITERAL", principal="User:reporting", host="*", operation="READ",
                            permission_type="ALLOW", drift="missing", observed_ms=now_ms - 1_000),
            ],
            mirror_configs={
                m: {
                    "bootstrap.servers": f"{m.split('-')[0]}-kafka:9092",
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "PLAIN",
                    "sasl.jaas.config": (
                        "org.apache.kafka.common.security.plain.PlainLoginModule required "
                        f'username="mirror" password="{SAMPLE_SECRET}";'
                    ),
                    "groups.include": ".*",
                }
                for m in ("a-to-b", "c-to-b")
            },
        )  # fmt: skip


def sample_history(seed: int = 7, steps: int = 24, partitions: int = 4) -> list[AuditSnapshot]:
    """One snapshot per step (a minute apart), oldest first; each holds the full history so far."""
    h = _History(seed)
    rng = h.rng
    topics = {"a-to-b": ["orders", "clicks", "audit-log"], "c-to-b": ["payments", "refunds"]}
    for mirror, names in topics.items():
        for name in names:
            tid = str(uuid.UUID(int=rng.getrandbits(128)))
            for i in range(partitions):
                p = _Part(mirror, name, tid, i, sle=rng.randint(1, 5))
                p.dle = p.sle + 10  # the proactive bump of the prototype: SLE + 10
                p.committed = {"billing": 0, "analytics": 0}
                h.parts.append(p)

    snaps: list[AuditSnapshot] = []
    failover_step, failback_step, pause_step = steps // 3, (2 * steps) // 3, steps // 4
    for step in range(steps):
        t = START_MS + step * STEP_MS
        for k, p in enumerate(h.parts):
            jitter = (k * 137) % 4_000  # partitions act a few seconds apart
            if step == 0:
                h.move(p, S.PREPARING, t + jitter, "topic started")
                h.move(p, S.MIRRORING, t + jitter + 1_500, "log aligned")
            elif p.state is S.MIRRORING and rng.random() < 0.08:  # a source leader election
                p.sle += 1
                h.move(p, S.EPOCH_FENCING, t + jitter, f"fetched batch epoch {p.sle} > local")
                p.dle = p.sle + 10
                h.move(p, S.MIRRORING, t + jitter + 300, "destination epoch bumped")
            if p.mirror == "a-to-b" and step == failover_step:
                h.move(p, S.STOPPING, t + jitter, "stop requested (failover)")
                p.lme, p.dle = p.sle, p.dle + 1
                h.move(p, S.STOPPED, t + jitter + 2_000 + rng.randint(0, 3_000), "ISR caught up")
            if p.mirror == "a-to-b" and step == failback_step:
                h.move(p, S.PREPARING, t + jitter, "start requested (failback)")
                h.move(p, S.MIRRORING, t + jitter + 2_500 + rng.randint(0, 2_000), "log aligned")
            if p.topic == "refunds" and step == pause_step:
                h.move(p, S.PAUSING, t + jitter, "pause requested")
                h.move(p, S.PAUSED, t + jitter + 200, "fetcher removed")
            if p.topic == "refunds" and step == pause_step + 2:
                h.move(p, S.MIRRORING, t + jitter, "resume requested")
        h.produce(t)
        for p in h.parts:
            for g in p.committed:
                p.committed[g] = max(p.committed[g], p.src_hw - rng.randint(0, 300))
        snaps.append(h.snapshot(t + 30_000))
    return snaps
