"""Kafka error codes for the model's errors (what a Kafka broker answers in their place)."""

from __future__ import annotations

from coordinator.ports import (
    FencedLeaderEpoch,
    NotLeader,
    OffsetOutOfRange,
    ReadOnlyTopic,
    SourceUnavailable,
    TopicAlreadyExists,
    UnknownLeaderEpoch,
    UnknownTopicId,
)

from ..errors import NotEnoughReplicas, TransactionError, UnknownTopicName
from ..producers import InvalidProducerEpoch, InvalidTxnState, OutOfOrderSequence

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
NOT_ENOUGH_REPLICAS = 19
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_GROUP_ID = 24
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
TOPIC_AUTHORIZATION_FAILED = 29
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
CONCURRENT_TRANSACTIONS = 51
INVALID_CONFIG = 40
GROUP_ID_NOT_FOUND = 69
NON_EMPTY_GROUP = 68
FENCED_LEADER_EPOCH = 74
UNSTABLE_OFFSET_COMMIT = 88
UNKNOWN_LEADER_EPOCH = 75
UNKNOWN_TOPIC_ID = 100
PRODUCER_FENCED = 90
READ_ONLY_TOPIC = 134

_BY_CLASS: tuple[tuple[type[BaseException], int], ...] = (
    (FencedLeaderEpoch, FENCED_LEADER_EPOCH),
    (UnknownLeaderEpoch, UNKNOWN_LEADER_EPOCH),
    (NotLeader, NOT_LEADER_OR_FOLLOWER),
    (OffsetOutOfRange, OFFSET_OUT_OF_RANGE),
    (UnknownTopicId, UNKNOWN_TOPIC_OR_PARTITION),
    (UnknownTopicName, UNKNOWN_TOPIC_OR_PARTITION),
    (ReadOnlyTopic, READ_ONLY_TOPIC),
    (NotEnoughReplicas, NOT_ENOUGH_REPLICAS),
    (InvalidProducerEpoch, INVALID_PRODUCER_EPOCH),
    (OutOfOrderSequence, OUT_OF_ORDER_SEQUENCE_NUMBER),
    (InvalidTxnState, INVALID_TXN_STATE),
    (TransactionError, INVALID_TXN_STATE),
    (TopicAlreadyExists, TOPIC_ALREADY_EXISTS),
    (SourceUnavailable, REQUEST_TIMED_OUT),
)


def code_of(exc: BaseException) -> int:
    for cls, code in _BY_CLASS:
        if isinstance(exc, cls):
            return code
    return UNKNOWN_SERVER_ERROR
