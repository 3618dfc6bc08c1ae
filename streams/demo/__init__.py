"""The main job (``python -m streams.demo``): failover and failback between model clusters A and B,
or a migration from a real broker (``--from-kafka``), with aiokafka applications (``clients``)
and a verdict from both clusters' logs. The top room: nothing in ``streams`` imports it.
"""
