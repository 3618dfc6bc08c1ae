"""Admin APIs: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, IncrementalAlterConfigs,
DescribeAcls, CreateAcls, DeleteAcls, DeleteRecords. Any live broker answers them (KRaft forwards
to the controller; the model has one state)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.image import AclOperation, AclPermissionType, AclResourceType, PatternType
from coordinator.ports import AclBinding
from records.kafka_envelope import Request
from records.registry import default_schemas

from . import errors as E
from .batches import to_wire
from .handlers_fetch import _leader_partition
from .topic_configs import DEFAULT_CONFIG, describe_topic_configs
from .topic_views import internal_topic_configs

if TYPE_CHECKING:
    from .context import ListenerContext

S = default_schemas()
CONFIG_TOPIC, CONFIG_BROKER = 2, 4
SOURCE_TOPIC_CONFIG = 1  # DYNAMIC_TOPIC_CONFIG
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DEFAULT_PARTITIONS = 1  # num.partitions


def _n(message: str, struct: str) -> type:
    return S.nested(message, struct)


def create_topics(cluster: ListenerContext, broker: int, req: Request) -> object:
    model = cluster.model
    Result = _n("CreateTopicsResponse", "CreatableTopicResult")
    Config = _n("CreateTopicsResponse", "CreatableTopicConfigs")
    out = []
    for t in req.body.topics:
        partitions = DEFAULT_PARTITIONS if t.num_partitions == -1 else t.num_partitions
        rf = min(3, len(model.brokers)) if t.replication_factor == -1 else t.replication_factor
        configs = {c.name: c.value for c in t.configs if c.value is not None}
        code, message = E.NONE, None
        if t.name in model.topic_ids:
            code, message = E.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists."
        elif t.assignments:
            code, message = E.INVALID_REQUEST, "manual replica assignments are not supported by the model"
        elif partitions < 1:
            code, message = E.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
        elif not 1 <= rf <= len(model.brokers):
            code, message = E.INVALID_REPLICATION_FACTOR, f"Replication factor {rf} is larger than the {len(model.brokers)} brokers"
        if code:
            out.append(Result(name=t.name, error_code=code, error_message=message, num_partitions=-1, replication_factor=-1))
            continue
        if req.body.validate_only:
            out.append(Result(name=t.name, error_code=E.NONE, num_partitions=partitions, replication_factor=rf))
            continue
        meta = model.add_topic(t.name, partitions, rf, configs)
        out.append(Result(
            name=t.name, topic_id=meta.topic_id, error_code=E.NONE, num_partitions=partitions, replication_factor=rf,
            configs=[Config(name=k, value=v, read_only=False, config_source=SOURCE_TOPIC_CONFIG, is_sensitive=False)
                     for k, v in sorted(configs.items())],
        ))
    return S.struct("CreateTopicsResponse")(topics=out)


def delete_topics(cluster: ListenerContext, broker: int, req: Request) -> object:
    model = cluster.model
    Result = _n("DeleteTopicsResponse", "DeletableTopicResult")
    if req.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in req.body.topics]
    else:
        wanted = [(n, None) for n in req.body.topic_names]
    out = []
    for name, topic_id in wanted:
        if name is None and topic_id is not None and topic_id in model.topics:
            name = model.topics[topic_id].name
        if name is None or name not in model.topic_ids:
            code = E.UNKNOWN_TOPIC_ID if name is None else E.UNKNOWN_TOPIC_OR_PARTITION
            out.append(Result(name=name, topic_id=topic_id, error_code=code))
            continue
        tid = model.topic_ids[name]
        model.delete_topic(name)
        out.append(Result(name=name, topic_id=tid, error_code=E.NONE))
    return S.struct("DeleteTopicsResponse")(responses=out)


def create_partitions(cluster: ListenerContext, broker: int, req: Request) -> object:
    model = cluster.model
    Result = _n("CreatePartitionsResponse", "CreatePartitionsTopicResult")
    out = []
    for t in req.body.topics:
        if t.name not in model.topic_ids:
            out.append(Result(name=t.name, error_code=E.UNKNOWN_TOPIC_OR_PARTITION, error_message=None))
            continue
        current = len(model.topic(t.name).partitions)
        if t.count <= current:
            out.append(Result(name=t.name, error_code=E.INVALID_PARTITIONS,
                              error_message=f"Topic currently has {current} partitions, which is higher than or equal to the requested {t.count}."))
            continue
        if t.assignments:
            out.append(Result(name=t.name, error_code=E.INVALID_REQUEST, error_message="manual assignments are not supported"))
            continue
        if not req.body.validate_only:
            model.create_partitions(model.topic_ids[t.name], t.count)
        out.append(Result(name=t.name, error_code=E.NONE, error_message=None))
    return S.struct("CreatePartitionsResponse")(results=out)


def _unserved_resource(model: object, r: object, Result: type) -> object | None:
    """The config APIs' answer for a resource that is not an existing topic; None for one that is."""
    if r.resource_type != CONFIG_TOPIC:
        return Result(error_code=E.INVALID_REQUEST, error_message=f"resource type {r.resource_type} is not served",
                      resource_type=r.resource_type, resource_name=r.resource_name)  # fmt: skip
    if r.resource_name not in model.topic_ids:
        return Result(error_code=E.UNKNOWN_TOPIC_OR_PARTITION, resource_type=r.resource_type, resource_name=r.resource_name)
    return None


def describe_configs(cluster: ListenerContext, broker: int, req: Request) -> object:
    model = cluster.model
    Result = _n("DescribeConfigsResponse", "DescribeConfigsResult")
    Entry = _n("DescribeConfigsResponse", "DescribeConfigsResourceResult")
    Synonym = _n("DescribeConfigsResponse", "DescribeConfigsSynonym")
    out = []
    for r in req.body.resources:
        if r.resource_type == CONFIG_BROKER:
            out.append(Result(error_code=E.NONE, resource_type=r.resource_type, resource_name=r.resource_name, configs=[]))
            continue
        internal = internal_topic_configs(cluster, r.resource_name) if r.resource_type == CONFIG_TOPIC else None
        refused = None if internal is not None else _unserved_resource(model, r, Result)
        if refused is not None:
            out.append(refused)
            continue
        explicit = internal if internal is not None else model.topic(r.resource_name).configs
        entries = describe_topic_configs(explicit, r.configuration_keys)
        out.append(Result(error_code=E.NONE, resource_type=r.resource_type, resource_name=r.resource_name, configs=[
            Entry(name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                  is_default=e.source == DEFAULT_CONFIG, is_sensitive=e.sensitive, config_type=e.config_type,
                  documentation=e.documentation if req.body.include_documentation else None,
                  synonyms=[Synonym(name=n, value=v, source=s) for n, v, s in e.synonyms] if req.body.include_synonyms else [])
            for e in entries
        ]))
    return S.struct("DescribeConfigsResponse")(results=out)


def incremental_alter_configs(cluster: ListenerContext, broker: int, req: Request) -> object:
    model = cluster.model
    Result = _n("IncrementalAlterConfigsResponse", "AlterConfigsResourceResponse")
    out = []
    for r in req.body.resources:
        refused = _unserved_resource(model, r, Result)
        if refused is not None:
            out.append(refused)
            continue
        configs = model.topic(r.resource_name).configs
        updates: dict[str, str | None] = {}
        bad = None
        for c in r.configs:
            current = [v for v in (updates.get(c.name, configs.get(c.name)) or "").split(",") if v]
            if c.config_operation == SET:
                updates[c.name] = c.value
            elif c.config_operation == DELETE:
                updates[c.name] = None
            elif c.config_operation == APPEND:
                updates[c.name] = ",".join(current + [v for v in (c.value or "").split(",") if v and v not in current])
            elif c.config_operation == SUBTRACT:
                drop = set((c.value or "").split(","))
                updates[c.name] = ",".join(v for v in current if v not in drop)
            else:
                bad = f"unknown config operation {c.config_operation}"
        if bad:
            out.append(Result(error_code=E.INVALID_REQUEST, error_message=bad, resource_type=r.resource_type, resource_name=r.resource_name))
            continue
        if not req.body.validate_only:
            for k, v in updates.items():
                model.set_topic_config(r.resource_name, k, v)
        out.append(Result(error_code=E.NONE, resource_type=r.resource_type, resource_name=r.resource_name))
    return S.struct("IncrementalAlterConfigsResponse")(responses=out)


# ---------------------------------------------------------------- ACLs


def _name(enum: type, value: int) -> str | None:
    try:
        return enum(value).name
    except ValueError:
        return None


def _binding(resource_type: int, resource_name: str, pattern: int, principal: str, host: str,
             operation: int, permission: int) -> AclBinding | None:
    names = (_name(AclResourceType, resource_type), _name(PatternType, pattern), _name(AclOperation, operation),
             _name(AclPermissionType, permission))
    if None in names or any(n in ("UNKNOWN", "ANY", "MATCH") for n in names):
        return None
    rt, pt, op, perm = names
    return AclBinding(rt, resource_name, pt, principal, host, op, perm)


def _matches(acl: AclBinding, f: object) -> bool:
    def enum_ok(enum: type, wanted: int, actual: str) -> bool:
        return wanted == enum.ANY or _name(enum, wanted) == actual

    pattern_ok = f.pattern_type_filter in (PatternType.ANY, PatternType.MATCH) or _name(PatternType, f.pattern_type_filter) == acl.pattern_type
    return (enum_ok(AclResourceType, f.resource_type_filter, acl.resource_type)
            and (f.resource_name_filter is None or f.resource_name_filter == acl.resource_name)
            and pattern_ok
            and (f.principal_filter is None or f.principal_filter == acl.principal)
            and (f.host_filter is None or f.host_filter == acl.host)
            and enum_ok(AclOperation, f.operation, acl.operation)
            and enum_ok(AclPermissionType, f.permission_type, acl.permission_type))


def describe_acls(cluster: ListenerContext, broker: int, req: Request) -> object:
    Resource = _n("DescribeAclsResponse", "DescribeAclsResource")
    Description = _n("DescribeAclsResponse", "AclDescription")
    grouped: dict[tuple[str, str, str], list[AclBinding]] = {}
    for acl in cluster.model.acls:
        if _matches(acl, req.body):
            grouped.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    return S.struct("DescribeAclsResponse")(error_code=E.NONE, resources=[
        Resource(resource_type=AclResourceType[rt], resource_name=rn, pattern_type=PatternType[pt], acls=[
            Description(principal=a.principal, host=a.host, operation=AclOperation[a.operation],
                        permission_type=AclPermissionType[a.permission_type]) for a in acls])
        for (rt, rn, pt), acls in grouped.items()
    ])


def create_acls(cluster: ListenerContext, broker: int, req: Request) -> object:
    Result = _n("CreateAclsResponse", "AclCreationResult")
    out = []
    for c in req.body.creations:
        acl = _binding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host, c.operation, c.permission_type)
        if acl is None:
            out.append(Result(error_code=E.INVALID_REQUEST, error_message="invalid ACL binding"))
            continue
        cluster.model.create_acls([acl])
        out.append(Result(error_code=E.NONE))
    return S.struct("CreateAclsResponse")(results=out)


def delete_acls(cluster: ListenerContext, broker: int, req: Request) -> object:
    FilterResult = _n("DeleteAclsResponse", "DeleteAclsFilterResult")
    Matching = _n("DeleteAclsResponse", "DeleteAclsMatchingAcl")
    out = []
    for f in req.body.filters:
        matched = [a for a in cluster.model.acls if _matches(a, f)]
        cluster.model.delete_acls(matched)
        out.append(FilterResult(error_code=E.NONE, matching_acls=[
            Matching(error_code=E.NONE, resource_type=AclResourceType[a.resource_type], resource_name=a.resource_name,
                     pattern_type=PatternType[a.pattern_type], principal=a.principal, host=a.host,
                     operation=AclOperation[a.operation], permission_type=AclPermissionType[a.permission_type])
            for a in matched
        ]))
    return S.struct("DeleteAclsResponse")(filter_results=out)


# ---------------------------------------------------------------- DeleteRecords


def delete_records(cluster: ListenerContext, broker: int, req: Request) -> object:
    Topic = _n("DeleteRecordsResponse", "DeleteRecordsTopicResult")
    Part = _n("DeleteRecordsResponse", "DeleteRecordsPartitionResult")
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            code, part = _leader_partition(cluster, broker, t.name, p.partition_index)
            low = -1
            if not code:
                offset = part.hw if p.offset == -1 else p.offset
                try:
                    low = cluster.model.delete_records(t.name, p.partition_index, offset)
                except Exception as exc:  # noqa: BLE001
                    code = E.code_of(exc)
            parts.append(Part(partition_index=p.partition_index, low_watermark=low, error_code=code))
        topics.append(Topic(name=t.name, partitions=parts))
    cluster.notify()
    return S.struct("DeleteRecordsResponse")(topics=topics)


# ---------------------------------------------------------------- DescribeLogDirs


def log_dir(cluster: ListenerContext, broker: int) -> str:
    """The one log directory the model gives each broker (it keeps its logs in memory)."""
    return f"/clustermodel/{cluster.name}/broker-{broker}"


def describe_log_dirs(cluster: ListenerContext, broker: int, req: Request) -> object:
    """This broker's replicas: Kafka's ReplicaManager.describeLogDirs over one log directory. A
    partition's size is its batches as Fetch serves them (Kafka's segment bytes; the model stores
    gzip batches inflated); the offset lag is 0, the replica's own HW never passing its LEO. The
    volume's total and usable bytes are unknown (-1)."""
    Result = _n("DescribeLogDirsResponse", "DescribeLogDirsResult")
    Topic = _n("DescribeLogDirsResponse", "DescribeLogDirsTopic")
    Part = _n("DescribeLogDirsResponse", "DescribeLogDirsPartition")
    model = cluster.model
    if req.body.topics is None:
        wanted = {name: None for name in sorted(model.topic_ids)}
    else:
        wanted = {t.topic: set(t.partitions) for t in req.body.topics}
    topics = []
    for name, indexes in wanted.items():
        if name not in model.topic_ids:
            continue
        parts = [Part(partition_index=i, partition_size=sum(len(to_wire(b)) for b in p.logs[broker].batches),
                      offset_lag=0, is_future_key=False)
                 for i, p in enumerate(model.topic(name).partitions)
                 if broker in p.replicas and (indexes is None or i in indexes)]  # fmt: skip
        if parts:
            topics.append(Topic(name=name, partitions=parts))
    return S.struct("DescribeLogDirsResponse")(error_code=E.NONE, results=[
        Result(error_code=E.NONE, log_dir=log_dir(cluster, broker), topics=topics, total_bytes=-1, usable_bytes=-1)])


HANDLERS = {19: create_topics, 20: delete_topics, 37: create_partitions, 32: describe_configs,
            44: incremental_alter_configs, 29: describe_acls, 30: create_acls, 31: delete_acls, 21: delete_records,
            35: describe_log_dirs}
