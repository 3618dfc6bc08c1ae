"""The model's Kafka listener: one port per modelled broker, real Kafka clients on the model.

listener.py owns sockets and connections, dispatcher.py routes a parsed request to the handler
of its API (handlers_*.py), and the handlers call the model, seeing the listener only as a
ListenerContext (context.py). Envelopes are records.kafka_envelope.
"""

from .listener import ClusterListeners, KafkaListeners

__all__ = ["ClusterListeners", "KafkaListeners"]
