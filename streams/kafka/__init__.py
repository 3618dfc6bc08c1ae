"""The source port over the Kafka protocol: connections (``connection``, ``wire``), the partition
reads with read-ahead (``partition_reads``, ``read_ahead``) and the cluster reads (topics,
configs, groups, ACLs) behind ``source.KafkaSourceCluster``.

Imports ``streams.config`` and ``streams.tls`` only; the runner, admin and worker use it through
the ports of ``coordinator.ports``.
"""
