"""The Faust worker: the app and its table partitions, the metadata follower, the reports, the
audit export, group membership, liveness, exits, metrics, and ``main`` (``kip1279-worker``).

Imports every room below it; only ``streams.demo``, tests and benchmarks import it.
"""
