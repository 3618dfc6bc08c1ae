"""Errors of the model's own control operations (producers, elections), beside the port errors.

Port errors (coordinator.ports) are what the coordinator sees; these are what a workload or a
test driving the model sees. The server carries both kinds back by class name.
"""

from __future__ import annotations

from .producers import InvalidProducerEpoch, InvalidTxnState, OutOfOrderSequence, ProducerError


class ModelError(Exception):
    """A control operation on the model was refused."""


class UnknownTopicName(ModelError):
    """No topic has this name."""


class ElectionError(ModelError):
    """No eligible replica for the requested election (clean needs a live ISR member)."""


class NotEnoughReplicas(ModelError):
    """acks=all produce while the ISR is smaller than min.insync.replicas."""


class BrokerError(ModelError):
    """Unknown broker, or crashing one that is down / restarting one that is up."""


class TransactionError(ModelError):
    """A transactional call out of order (commit without begin, unknown transactional id)."""


class FetchSessionIdNotFound(ModelError):
    """A long poll named a fetch session the server does not know (Kafka's FETCH_SESSION_ID_NOT_FOUND, 70)."""


MODEL_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (
        ModelError,
        UnknownTopicName,
        ElectionError,
        NotEnoughReplicas,
        BrokerError,
        TransactionError,
        FetchSessionIdNotFound,
        ProducerError,
        InvalidProducerEpoch,
        OutOfOrderSequence,
        InvalidTxnState,
    )
}
