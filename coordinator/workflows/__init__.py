"""Workflow decisions: pure functions from (state, observations, now_ms, config) to a Decision.

One module per workflow: ``prepare`` (start and failback), ``fetcher`` (MIRRORING), ``fencing``
(DLE >= SLE), ``pause``, ``stop`` (failover), ``topic`` (source changes), ``sync_groups``,
``sync_configs``, ``sync_acls``; ``drive`` routes a partition to the one its state and desired
state call for. ``commands`` is the vocabulary of effects the shell executes.
"""
