"""Admin APIs (topics, configs, ACLs, DeleteRecords): not served yet; see docs/kafka-listener.md."""

HANDLERS: dict = {}
