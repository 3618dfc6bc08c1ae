"""Launchers of the brokers we run on loopback: noida-db (``noida``) and Apache Kafka in KRaft mode
(``apache_kafka``), with Kafka's own tools on the fetched jars.

Imports nothing else of ``streams``; tests, benchmarks and the main job use it, the coordinator never does.
"""
