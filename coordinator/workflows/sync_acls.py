"""ACL sync: the source's ACLs, filtered by ``acls.include``, made to hold on the destination.

Rules use the prototype's format ``resourceType;resourceName;operation;permissionType;principal``
(``*`` for any field, trailing fields may be omitted; resourceName and principal are whole-name
Java regular expressions, ``coordinator.java_regex``). ``*`` alone, the default, selects every ACL.

- Source ACLs within scope that the destination lacks are created.
- Destination ACLs within scope that the source lacks are deleted, except CLUSTER_MIRROR ACLs:
  they authorize the mirror itself on this cluster and never come from the source.

How ACLs created on the destination are treated (thread RS16): the ``acls.include`` scope is owned
by the mirror. An ACL created on the destination that falls within that scope is deleted at the
next sync, whether or not it once existed on the source (RS16 cases 1 and 2 both: yes); it has to
be created on the source to last. An ACL outside the scope is the destination's own and is never
touched, so an operator who wants local ACLs (e.g. a DENY for User:Alice on the DR site) narrows
``acls.include`` to leave them out. Stopped mirrors still sync ACLs only while at least one of
their partitions mirrors (the runner's choice): after a full failover the destination owns them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import msgspec

from coordinator.java_regex import JavaPatternError, compile_java
from coordinator.ports import AclBinding
from coordinator.workflows.commands import Command, CreateAcls, DeleteAcls

CLUSTER_MIRROR = "CLUSTER_MIRROR"


class AclRule(msgspec.Struct, frozen=True):
    """One include rule; None fields match anything."""

    resource_type: str | None = None
    resource_name: re.Pattern[str] | None = None
    operation: str | None = None
    permission_type: str | None = None
    principal: re.Pattern[str] | None = None

    @classmethod
    def parse(cls, rule: str) -> AclRule:
        """Raises ValueError, with the reason, for a rule that cannot be used."""
        parts = [p.strip() for p in rule.split(";")]
        if len(parts) > 5:
            raise ValueError(f"ACL rule {rule!r} has more than 5 fields")
        parts += ["*"] * (5 - len(parts))

        def field(v: str) -> str | None:
            return None if v in ("*", "") else v.upper()

        def pattern(v: str) -> re.Pattern[str] | None:
            if v in ("*", ""):
                return None
            try:
                return compile_java(v)
            except JavaPatternError as e:
                raise ValueError(f"ACL rule '{rule}': invalid pattern '{v}': {e.reason}") from None

        return cls(field(parts[0]), pattern(parts[1]), field(parts[2]), field(parts[3]), pattern(parts[4]))

    def matches(self, acl: AclBinding) -> bool:
        return (
            (self.resource_type is None or acl.resource_type.upper() == self.resource_type)
            and (self.resource_name is None or self.resource_name.fullmatch(acl.resource_name) is not None)
            and (self.operation is None or acl.operation.upper() == self.operation)
            and (self.permission_type is None or acl.permission_type.upper() == self.permission_type)
            and (self.principal is None or self.principal.fullmatch(acl.principal) is not None)
        )


def parse_rules(rules: Iterable[str]) -> tuple[AclRule, ...]:
    return tuple(AclRule.parse(r) for r in rules if r.strip())


def in_scope(acl: AclBinding, rules: Sequence[AclRule]) -> bool:
    return any(r.matches(acl) for r in rules)


def plan_acl_sync(source: Iterable[AclBinding], dest: Iterable[AclBinding], include: Iterable[str]) -> tuple[Command, ...]:
    rules = parse_rules(include)
    wanted = {a for a in source if in_scope(a, rules) and a.resource_type.upper() != CLUSTER_MIRROR}
    have = set(dest)
    to_create = tuple(sorted(wanted - have, key=_sort_key))
    to_delete = tuple(
        sorted(
            (a for a in have - wanted if a.resource_type.upper() != CLUSTER_MIRROR and in_scope(a, rules)),
            key=_sort_key,
        )
    )
    commands: list[Command] = []
    if to_create:
        commands.append(CreateAcls(to_create))
    if to_delete:
        commands.append(DeleteAcls(to_delete))
    return tuple(commands)


def _sort_key(a: AclBinding) -> tuple[str, ...]:
    return (a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host, a.operation, a.permission_type)
