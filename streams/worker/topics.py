"""The topics of a destination cluster's coordinator, as its workers and its controllers create
them at start (whichever comes first). No Faust here: the controller imports it."""

from __future__ import annotations

from typing import Any

from streams.config import WorkerConfig, dlq_topic_spec, metadata_topic_spec
from streams.state.mirror_state_codec import desired_state_topic_spec, mirror_state_topic_spec
from streams.state.stop_reports import stop_reports_topic_spec
from streams.state.sync_status import sync_status_topic_spec


def tick_topic_name(config: WorkerConfig) -> str:
    return config.desired_state_topic_name + ".ticks"


def worker_topic_specs(config: WorkerConfig) -> list[Any]:
    from aiokafka.admin import NewTopic

    ticks = NewTopic(tick_topic_name(config), config.state_partitions, config.replication_factor,
                     topic_configs={"retention.ms": "600000"})  # fmt: skip
    return [metadata_topic_spec(config.metadata_topic_name, config.replication_factor),
            dlq_topic_spec(config.metadata_topic_name, config.replication_factor),
            mirror_state_topic_spec(config), desired_state_topic_spec(config), sync_status_topic_spec(config),
            stop_reports_topic_spec(config),
            ticks]  # fmt: skip
