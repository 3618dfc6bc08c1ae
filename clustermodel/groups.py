"""Consumer and share groups of a model cluster: members and committed offsets with leader epochs."""

from __future__ import annotations

import msgspec

from coordinator.ports import GroupDescription, GroupOffset, GroupType, TopicPartition


class GroupState(msgspec.Struct):
    """One group; it is active while it has members."""

    group_id: str
    group_type: GroupType = GroupType.CONSUMER
    members: list[str] = []
    offsets: dict[str, GroupOffset] = {}  # keyed by "topic_id-partition" so the struct encodes flat

    def describe(self) -> GroupDescription:
        return GroupDescription(self.group_id, self.group_type, bool(self.members), len(self.members))

    def commit(self, offset: GroupOffset) -> None:
        self.offsets[str(TopicPartition(offset.topic_id, offset.partition))] = offset

    def sorted_offsets(self) -> list[GroupOffset]:
        return sorted(self.offsets.values(), key=lambda o: (str(o.topic_id), o.partition))
