"""The coordinator's own durable logs: the metadata log (replayed into the image, with snapshots and
a dead-letter queue), ``__mirror_state`` (partition states and LastMirrorEpochs, its codec and the
changelog's reader), the desired-state events (``desired_state``) and the sync-status topic.

Imports ``streams.config`` only; the runner never imports it (states reach the runner through a store).
"""
