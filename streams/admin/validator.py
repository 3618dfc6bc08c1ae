"""The admin requests as the controller validates them: ``(request, image, states) -> (records,
response)``. The default validator (``coordinator_validator``) wires the pure
``coordinator.admin``; the controller appends what it returns (``streams.admin.controller``).
``StatusSource`` is where the controller reads the partitions' states from."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import msgspec

from coordinator import admin
from coordinator.image import MetadataImage
from coordinator.readiness import SyncReport
from coordinator.state_counts import StateTally
from coordinator.states import ErrorCode
from records.framing import ApiMessageAndVersion
from records.registry import SchemaSet, default_schemas
from streams.admin.client import RequestHeader, secret_values
from streams.admin.responses import alter_configs_response, describe_response, error_response, list_response, names, topic_response
from streams.state.changelog_view import PartitionStatus, StateKey


class AdminRequest(NamedTuple):
    header: RequestHeader
    api: str  # e.g. "StopMirrorTopics"
    body: msgspec.Struct
    principal: admin.Principal
    # Describe only: the workers' sync reports per mirror (None: not known to this controller).
    syncs: Mapping[str, Sequence[SyncReport]] | None = None
    # A StateCountsOnly describe: the counts per state kept as the changelog is read (None: walk the states).
    tally: StateTally | None = None
    # List only: the cluster ID each mirror's source last answered, by mirror.
    source_cluster_ids: Mapping[str, str] | None = None


Validator = Callable[[AdminRequest, MetadataImage, Mapping[StateKey, PartitionStatus]],
                     tuple[Sequence[ApiMessageAndVersion], msgspec.Struct]]  # fmt: skip


class StatusSource(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...

    async def statuses(self, offsets: bool = True, mirrors: Collection[str] | None = None,
                       max_age: float = 0.0) -> Mapping[StateKey, PartitionStatus]:  # fmt: skip
        """Every partition's status; source HW / destination LEO only with ``offsets``, and then
        only for ``mirrors`` (None: all) -- the others keep -1. Offsets are looked up for this
        call unless ones at most ``max_age`` seconds old are at hand."""
        ...


# -------------------------------------------------------------------- the default validator


def coordinator_validator(schemas: SchemaSet | None = None, ready_max_lag: int = 1000) -> Validator:
    """``coordinator.admin`` behind the controller's validator interface; ``ready_max_lag`` is
    the lag a describe still calls ready for a failover (``metrics.failover.ready.max.lag``)."""
    s = schemas or default_schemas()

    def validate(req: AdminRequest, image: MetadataImage, statuses: Mapping[StateKey, PartitionStatus]):  # noqa: ANN202
        b: Any = req.body
        states = {k: v.state for k, v in statuses.items()}
        who = req.principal
        svo = getattr(b, "state_validation_offset", -1)
        api = req.api
        if api == "CreateClusterMirror":
            config = {c.name: c.value for c in b.config}
            r = admin.create_cluster_mirror(image, b.mirror_name, config, principal=who, schemas=s)
            return r.records, topic_response(s, api, r.response, secret_values(config))
        if api == "DeleteClusterMirror":
            r = admin.delete_cluster_mirror(image, b.mirror_name, states=states, state_validation_offset=svo, principal=who, schemas=s)
        elif api == "StartMirrorTopics":
            r = admin.start_mirror_topics(image, b.mirror_name, names(b), include_patterns=b.include_patterns,
                                          exclude_patterns=b.exclude_patterns, states=states,
                                          state_validation_offset=svo, principal=who, schemas=s)  # fmt: skip
        elif api == "StopMirrorTopics":
            r = admin.stop_mirror_topics(image, b.mirror_name, names(b), patterns=b.patterns, states=states,
                                         state_validation_offset=svo, principal=who, schemas=s)  # fmt: skip
        elif api == "PauseMirrorTopics":
            r = admin.pause_mirror_topics(image, b.mirror_name, names(b), states=states, state_validation_offset=svo, principal=who, schemas=s)
        elif api == "ResumeMirrorTopics":
            r = admin.resume_mirror_topics(image, b.mirror_name, names(b), states=states, state_validation_offset=svo, principal=who, schemas=s)
        elif api == "AlterClusterMirrorConfigs":
            changes = [(c.name, admin.ConfigOp(c.config_operation) if c.config_operation in (0, 1) else c.config_operation,
                        c.value) for c in b.configs]  # fmt: skip
            r = admin.alter_cluster_mirror_configs(image, b.mirror_name, changes, validate_only=b.validate_only,
                                                   principal=who, schemas=s)  # fmt: skip
            return r.records, alter_configs_response(s, r.response, secret_values({c.name: c.value for c in b.configs}))
        elif api == "DescribeClusterMirrorConfigs":
            code, message, configs = admin.describe_cluster_mirror_configs(image, b.mirror_name, principal=who)
            ccls = s.nested(f"{api}Response", "DescribeConfigsResourceResult")
            return (), s.struct(f"{api}Response")(throttle_time_ms=0, error_code=int(code), error_message=message,
                                                  configs=[ccls(name=c.name, value=c.value, is_sensitive=c.sensitive)
                                                           for c in configs])  # fmt: skip
        elif api == "ListClusterMirrors":
            return (), list_response(s, admin.list_cluster_mirrors(image, b.include_topic_names, principal=who,
                                                                   source_cluster_ids=req.source_cluster_ids))  # fmt: skip
        elif api == "DescribeClusterMirrors":
            counts_only = getattr(b, "state_counts_only", False)
            tally = req.tally if counts_only else None
            described = admin.describe_cluster_mirrors(image, list(b.mirror_names or ()), states=states, principal=who,
                                                       tally=tally)  # fmt: skip
            return (), describe_response(s, described, statuses, ready_max_lag, req.syncs, counts_only=counts_only)
        else:
            return (), error_response(s, api, ErrorCode.INVALID_REQUEST, f"unsupported API {api}")
        return r.records, topic_response(s, api, r.response, ())

    return validate
