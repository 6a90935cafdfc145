"""Retention: prune what only grows (processed event ids, published outbox rows, decisions, latency windows, deleted
pods), a small batch per transaction, in the background of the placement service and never in its path.

Rules of this module:
- a batch is one short transaction (RetentionStore.prune: `batch_rows` rows at most, rows a placement holds
  skipped, not waited for), and the pruner yields to the event loop between batches, so a placement never queues
  behind it; a round does at most `max_batches` batches per kind, and the next round goes on where it stopped;
- one replica prunes at a time: each batch first takes the pruning turn (a lock in the store, held until the
  batch's transaction ends); a replica that does not get it leaves the round to the one that did. Whichever
  replica holds the turn is the leader for that batch: no election is needed, and a replica that dies frees it;
- ages are the store's: the cut-off is computed by the clock that stamped the rows.

Why pruning processed event ids cannot make a consumer apply an old event again: an id is claimed when its record
is processed, so its processed_at is no earlier than the record's append to Kafka (less clock skew). Kafka can
deliver that record again only while it is in the log: after a restart from the committed offset, or from the
earliest offset when the group's offsets expired (`auto_offset_reset="earliest"`, adapters/kafka). A record leaves
the log once the newest record of its segment is older than the topic's retention.ms, so it stays at most
retention.ms + segment.ms (7 + 7 days by Kafka's defaults) after its append. An id pruned at age > that bound
therefore names a record no broker holds any more: nothing can deliver it again, and the claim it guarded
is not needed. Hence the default of 15 days (settings.retention_processed_events_days), and the rule in
docs/retention.md: keep ids longer than the topics' retention.ms + segment.ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuplace.usecases.ports import Retained
from gpuplace.usecases.repositories import UnitOfWorkFactory

log = logging.getLogger(__name__)
DAY_S = 86_400.0


@dataclass(frozen=True)
class RetentionPolicy:
    """How long each kind of row is kept (seconds; a kind absent or at 0 is kept for ever) and how pruning runs."""

    keep_s: Mapping[Retained, float] = field(default_factory=dict)
    interval_s: float = 300.0  # between rounds; 0: never prune
    batch_rows: int = 1000  # rows per transaction
    max_batches: int = 100  # per kind and round: a round stays bounded however far behind it is
    pause_s: float = 0.0  # between batches: 0 still yields to the event loop

    @classmethod
    def in_days(cls, *, processed_events: float, outbox: float, decisions: float, latency_windows: float,
                **how: float) -> RetentionPolicy:
        """The policy from days per kind (the settings' units); deleted pods are kept as long as decisions, the
        story `gpuplace explain` tells of them."""
        days = {Retained.PROCESSED_EVENTS: processed_events, Retained.OUTBOX: outbox, Retained.DECISIONS: decisions,
                Retained.LATENCY_WINDOWS: latency_windows, Retained.DELETED_PODS: decisions}
        return cls(keep_s={kind: d * DAY_S for kind, d in days.items() if d > 0}, **how)  # type: ignore[arg-type]


async def prune_round(uow_factory: UnitOfWorkFactory, policy: RetentionPolicy) -> dict[Retained, int] | None:
    """One round over every kind kept for a limited time: the rows pruned per kind, or None when another replica
    held the pruning turn (this one leaves the round to it)."""
    pruned: dict[Retained, int] = {}
    for kind, keep_s in policy.keep_s.items():
        if keep_s <= 0:
            continue
        pruned[kind] = 0
        for _ in range(policy.max_batches):
            async with uow_factory() as uow:
                if not await uow.retention.take_pruning_turn():
                    return None
                gone = await uow.retention.prune(kind, keep_s, policy.batch_rows)
                await uow.commit()
            pruned[kind] += gone
            await asyncio.sleep(policy.pause_s)  # placements waiting for the event loop go first
            if gone < policy.batch_rows:
                break
    return pruned


class Pruner:
    """Rounds of prune_round every `policy.interval_s` until stopped; a failed round (the database away, a lock not
    granted in time) is logged and tried again at the next, never fatal to the service that runs it."""

    def __init__(self, uow_factory: UnitOfWorkFactory, policy: RetentionPolicy) -> None:
        self._uow_factory = uow_factory
        self.policy = policy
        self.rounds = 0  # rounds this replica completed with the turn (tests, logs)

    async def run(self, stop: asyncio.Event) -> None:
        if self.policy.interval_s <= 0 or not self.policy.keep_s:
            return
        while not await _stopped(stop, self.policy.interval_s):
            try:
                pruned = await prune_round(self._uow_factory, self.policy)
            except Exception as exc:  # noqa: BLE001 - pruning must never take the placement service down
                log.warning("retention: pruning failed, trying again in %.0f s: %s", self.policy.interval_s, exc)
                continue
            if pruned is None:
                continue
            self.rounds += 1
            if any(pruned.values()):
                log.info("retention: pruned %s", ", ".join(f"{n} {kind.value}" for kind, n in pruned.items() if n))


async def _stopped(stop: asyncio.Event, wait_s: float) -> bool:
    """Wait up to `wait_s` for `stop`; whether it came."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), wait_s)
    return stop.is_set()


__all__ = ["DAY_S", "Pruner", "RetentionPolicy", "prune_round"]
