"""Kafka's topic config defaults, asked of a real Apache Kafka broker: the source of the committed
table clustermodel/kafka/topic_config_defaults.json, and the yardstick that keeps it true
(tests/clustermodel/test_kafka_tools_yardstick.py compares the two).

    .venv/bin/python tests/kafka_config_table.py          # starts a fresh node, rewrites the table
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "clustermodel" / "kafka" / "topic_config_defaults.json"
TOPIC_RESOURCE = 2


def _call(bootstrap: str, api_key: int, version: int, body: Any) -> Any:
    from records.kafka_envelope import decode_response, encode_request

    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(encode_request(api_key, version, 1, "kafka-config-table", body))
        (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
        return decode_response(s.recv(size, socket.MSG_WAITALL), api_key, version)[1]


def describe_topic_configs(bootstrap: str, topic: str, keys: list[str] | None = None, synonyms: bool = True,
                           documentation: bool = True) -> list[dict[str, Any]]:  # fmt: skip
    """DescribeConfigs v4 of one topic, as JSON-able dicts in the broker's order."""
    from records.registry import default_schemas

    S = default_schemas()
    resource = S.nested("DescribeConfigsRequest", "DescribeConfigsResource")(
        resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=keys)
    body = S.struct("DescribeConfigsRequest")(resources=[resource], include_synonyms=synonyms,
                                              include_documentation=documentation)  # fmt: skip
    (result,) = _call(bootstrap, 32, 4, body).results
    if result.error_code:
        raise RuntimeError(f"DescribeConfigs {topic}: error {result.error_code} {result.error_message}")
    return [
        {"name": c.name, "value": c.value, "source": c.config_source, "read_only": c.read_only,
         "sensitive": c.is_sensitive, "type": c.config_type, "documentation": c.documentation,
         "synonyms": [[s.name, s.value, s.source] for s in c.synonyms]}
        for c in result.configs
    ]  # fmt: skip


def kafka_topic_defaults(bootstrap: str) -> list[dict[str, Any]]:
    """What the broker says of a new topic created with no configs: its defaults, in its order."""
    from kafka.admin import KafkaAdminClient, NewTopic

    name = f"config-defaults-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kafka-config-table")
    try:
        admin.create_topics([NewTopic(name, 1, 1)])
        try:
            return describe_topic_configs(bootstrap, name)
        finally:
            admin.delete_topics([name])
    finally:
        admin.close()


def write_table(version: str, table: list[dict[str, Any]]) -> None:
    """One config a line, so a new Kafka version's changes read as a short diff."""
    lines = ",\n".join(json.dumps(c) for c in table)
    TABLE.write_text(f'{{"kafka": {json.dumps(version)}, "configs": [\n{lines}\n]}}\n')


def main() -> None:
    import tempfile

    sys.path.insert(0, str(ROOT / "tests"))
    from kafka_fixtures import start_session_cluster

    with tempfile.TemporaryDirectory(prefix="kip1279-config-table-") as tmp:
        cluster = start_session_cluster(Path(tmp) / "kafka")
        try:
            table = kafka_topic_defaults(cluster.bootstrap)
        finally:
            cluster.stop()
    write_table(cluster.version, table)
    print(f"wrote {TABLE}: {len(table)} topic configs of Apache Kafka {cluster.version}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
