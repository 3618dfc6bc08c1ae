"""The shell around the pure core: the Faust worker, the mirror runner and the ports' Kafka side.

Rooms, from the bottom up (a room imports only rooms before it; ``tests/test_layout.py``):
``config`` and ``tls`` (settings and TLS contexts), ``brokers`` (launchers), ``state`` (the
coordinator's own logs), ``kafka`` (the source port over the Kafka protocol), ``runner``,
``admin``, ``worker``, ``demo``. ``docs/architecture.md`` draws how they fit together.
"""
