"""The admin side: the controller (the metadata log's single writer, serving the KIP's RPCs; its
standbys and their heartbeats: ``election``), its client and ``kafka-cluster-mirrors`` (``cli``;
how ``--describe`` prints: ``describe_output``).

Imports the rooms below it (``config``, ``tls``, ``state``, ``kafka``, ``runner``); the worker's
main starts a controller, nothing else above imports it.
"""
