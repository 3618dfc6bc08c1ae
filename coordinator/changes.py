"""``local_changes``: which mirror partitions must start, stop, pause, resume, be added or removed.

As Kafka's ``TopicsDelta.localChanges(brokerId)``: a pure function of the previous image and the
new one (or of the delta that produced it). Given a delta it only looks at the topics the delta
touched, so a mass stop of 1,000 topics costs 1,000 topics of work, whatever the cluster size.
Given two images it diffs them, skipping the parts they share.

A topic's desired state moves the whole topic (every partition):

- start: attached with START, or STOP -> START (first mirror, failback);
- resume: PAUSE -> START (a resume is a start on a paused topic);
- stop / pause: moved to STOP / PAUSE (or attached in that state);
- added: new partitions of a topic whose desired state did not change;
- removed: the topic left its mirror (detached, moved to another mirror, deleted, or its
  mirror was deleted), keyed by the mirror it left, even if it joined that mirror again later
  in the same delta (a mirror deleted and re-created starts from nothing); ``removed_at`` gives
  the metadata offset of each departure: state written before it belongs to the old membership;
- leader_changes: partitions of an attached topic whose leader or leader epoch changed, and
  nothing else did (a new leader restarts the partition's workflow; epochs feed DLE >= SLE).

The workers run the effects in a fixed order, as Kafka's publishers do: removed, stop, pause,
start/resume, added, leader changes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

import msgspec

from coordinator.delta import MetadataDelta
from coordinator.image import MetadataImage, MirrorTopic, PartitionRegistration, TopicImage
from coordinator.states import DesiredState


class MirrorPartitionKey(NamedTuple):
    """The identity of a mirror partition; also the ``__mirror_state`` key fields."""

    mirror_name: str
    topic_id: uuid.UUID
    partition: int


Keys = tuple[MirrorPartitionKey, ...]


class LocalChanges(msgspec.Struct, frozen=True):
    start: Keys = ()
    stop: Keys = ()
    pause: Keys = ()
    resume: Keys = ()
    added: Keys = ()
    removed: Keys = ()
    leader_changes: Keys = ()
    removed_at: dict[tuple[str, uuid.UUID], int] = msgspec.field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.start or self.stop or self.pause or self.resume or self.added or self.removed
                    or self.leader_changes)

    def total(self) -> int:
        return (len(self.start) + len(self.stop) + len(self.pause) + len(self.resume) + len(self.added)
                + len(self.removed) + len(self.leader_changes))


EMPTY_CHANGES = LocalChanges()


def local_changes(
    base: MetadataDelta | MetadataImage,
    new_image: MetadataImage | None = None,
    *,
    owns: Callable[[MirrorPartitionKey], bool] | None = None,
) -> LocalChanges:
    """What the mirror partitions must do between ``base`` (an old image, or the delta built on
    it) and ``new_image`` (default: the delta applied). ``owns`` keeps only the partitions this
    worker is responsible for (hash of the key, as ``__mirror_state`` partitions them)."""
    if isinstance(base, MetadataDelta):
        old = base.image
        new = new_image if new_image is not None else base.apply()
        touched: Iterable[uuid.UUID] = (
            base.mirrors.topics.keys() | base.topics.changed.keys() | base.topics.deleted.keys()
        )
        left = base.mirrors.left
    else:
        old = base
        if new_image is None:
            raise TypeError("local_changes(old_image, new_image) needs the new image")
        new = new_image
        touched = _diff_topic_ids(old, new)
        left = _departures(old, new, touched)
    return _decide(old, new, sorted(touched, key=lambda u: u.int), left, owns)


def _departures(old: MetadataImage, new: MetadataImage, topic_ids: Iterable[uuid.UUID]) -> dict[tuple[str, uuid.UUID], int]:
    """Between two images only the net change shows: a topic left its old mirror by ``new``'s offset."""
    out = {}
    for tid in topic_ids:
        old_m, new_m = old.mirrors.topics.get(tid), new.mirrors.topics.get(tid)
        if old_m is not None and (new_m is None or new_m.mirror_name != old_m.mirror_name):
            out[(old_m.mirror_name, tid)] = new.offset
    return out


def _diff_topic_ids(old: MetadataImage, new: MetadataImage) -> set[uuid.UUID]:
    """Topic IDs whose membership changed, or attached topics whose partitions changed."""
    out: set[uuid.UUID] = set()
    om, nm = old.mirrors.topics, new.mirrors.topics
    if om is not nm:
        for tid, m in om.items():
            if nm.get(tid) != m:
                out.add(tid)
        for tid, m in nm.items():
            if om.get(tid) != m:
                out.add(tid)
    ot, nt = old.topics.by_id, new.topics.by_id
    if ot is not nt:
        for tid in nm.keys() | om.keys():
            if ot.get(tid) is not nt.get(tid):
                out.add(tid)
    return out


_STATE_KIND = {DesiredState.START: "start", DesiredState.STOP: "stop", DesiredState.PAUSE: "pause"}


def _decide(
    old: MetadataImage,
    new: MetadataImage,
    topic_ids: list[uuid.UUID],
    left: Mapping[tuple[str, uuid.UUID], int],
    owns: Callable[[MirrorPartitionKey], bool] | None,
) -> LocalChanges:
    out: dict[str, list[MirrorPartitionKey]] = {
        "start": [], "stop": [], "pause": [], "resume": [], "added": [], "removed": [], "leader_changes": []
    }
    K = MirrorPartitionKey
    old_members, new_members = old.mirrors.topics, new.mirrors.topics
    old_topics, new_topics = old.topics.by_id, new.topics.by_id
    left_by_topic: dict[uuid.UUID, list[tuple[str, int]]] = {}
    for (name, tid), offset in left.items():
        left_by_topic.setdefault(tid, []).append((name, offset))
    for tid in topic_ids:
        old_m: MirrorTopic | None = old_members.get(tid)
        new_m: MirrorTopic | None = new_members.get(tid)
        old_t: TopicImage | None = old_topics.get(tid)
        new_t = new_topics.get(tid)
        for name, _ in sorted(left_by_topic.get(tid, ())):
            known = old_t if old_t is not None else new_t
            if known is not None:
                out["removed"].extend(K(name, tid, p) for p in sorted(known.partitions))
            if old_m is not None and old_m.mirror_name == name:
                old_m = None  # what it holds now is a new membership
        if new_m is None:
            continue
        if new_t is None:
            continue  # cannot happen: removing a topic detaches it
        name = new_m.mirror_name
        if old_m is None or old_m.desired_state != new_m.desired_state:
            if new_m.desired_state is DesiredState.START and old_m is not None and old_m.desired_state is DesiredState.PAUSE:
                kind = "resume"
            else:
                kind = _STATE_KIND[new_m.desired_state]
            out[kind].extend(K(name, tid, p) for p in sorted(new_t.partitions))
            continue
        old_parts = old_t.partitions if old_t is not None else {}
        if new_t is old_t:
            continue
        for p in sorted(new_t.partitions):
            before: PartitionRegistration | None = old_parts.get(p)
            if before is None:
                out["added"].append(K(name, tid, p))
            else:
                after = new_t.partitions[p]
                if after.leader != before.leader or after.leader_epoch != before.leader_epoch:
                    out["leader_changes"].append(K(name, tid, p))
    removed_at = dict(left)
    if owns is not None:
        return LocalChanges(**{kind: tuple(k for k in keys if owns(k)) for kind, keys in out.items()}, removed_at=removed_at)
    return LocalChanges(**{kind: tuple(keys) for kind, keys in out.items()}, removed_at=removed_at)
