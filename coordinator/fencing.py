"""The owner epoch: the token that fences every write a worker makes to a cluster.

A worker decides from its view of the table partitions it owns, and that view is valid for one
generation of the workers' consumer group: the group coordinator moves the generation up at
every rebalance, so at every takeover. A worker paused past its session timeout (a GC pause, a
frozen VM) wakes with decisions taken in an old generation, after another worker took its
table partitions over. So, as Kafka fences a zombie with its producer epoch (KIP-98) and an
offset commit with the group generation (KIP-447):

- every mutating call to a cluster carries an ``OwnerFence``: the workers' group (``scope``) and
  the generation in which the caller's view was loaded (``epoch``);
- the cluster keeps the highest epoch it has seen per scope (``OwnerEpochs``), raised by every
  fenced call and by the claim a worker makes when it takes table partitions on, before it
  observes anything; a call below it is refused (``FencedOwnerEpoch``,
  ``ErrorCode.OWNER_EPOCH_FENCED``) and changes nothing.

A group's generation can start again from 1 (its group coordinator lost the group): a worker
refused while the group coordinator confirms it is in the current generation claims again with a
compare-and-set on the epoch it was refused at (``OwnerEpochs.check``'s ``replace``).

A stale write thus lands before the new owner's claim (then the new owner observes it, as it
observes what a crashed owner left) or is refused. State writes to ``__mirror_state`` are fenced
by the broker itself (a transactional producer per table partition); see docs/architecture.md.
"""

from __future__ import annotations

from typing import NamedTuple

from .errors_ports import FencedOwnerEpoch
from .ports import DESTINATION_MUTATIONS

# The port calls that change a cluster: only these are checked (a read carries no fence).
MUTATING_METHODS: frozenset[str] = frozenset(DESTINATION_MUTATIONS)


class OwnerFence(NamedTuple):
    """What a mutating call carries: whose work it is, and the owner epoch its writer holds."""

    scope: str  # the workers' consumer group (one coordinator deployment)
    epoch: int  # that group's generation when the writer's view was loaded


class OwnerEpochs:
    """The receiver's side: the highest owner epoch seen per scope."""

    __slots__ = ("highest",)

    def __init__(self, highest: dict[str, int] | None = None) -> None:
        self.highest: dict[str, int] = dict(highest or {})

    def check(self, scope: str, epoch: int, replace: int | None = None) -> int:
        """Admit a call of ``epoch`` (raising the scope's highest to it) or raise FencedOwnerEpoch;
        returns the scope's highest epoch after the call.

        ``replace``: a claim's compare-and-set. A group whose generation started again from 1
        (its coordinator lost the group) is refused forever; a worker that has confirmed with
        the group coordinator that it is in the current generation claims with the epoch it was
        refused at, and the scope's epoch is set back to its own, only if it still is that one:
        a stale worker's claim, made with an epoch that has moved on since, is refused."""
        held = self.highest.get(scope, -1)
        if replace is not None and held == replace and epoch < held:
            self.highest[scope] = epoch
            return epoch
        if epoch < held:
            raise FencedOwnerEpoch(scope, epoch, held)
        if epoch > held:
            self.highest[scope] = epoch
            return epoch
        return held
