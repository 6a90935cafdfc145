"""Which running pods may move for a beneficiary, and how many evictions the limits leave.

The rule (DESIGN.md §6, "Defragmentation"): never sacrifice a tighter deadline for a looser one. A pod
may move only if its priority is not above the beneficiary's and its deadline is not tighter (a pod
without a deadline has infinite slack; equal is allowed). Then the limits, over the hour ending at
`now_s`: a pod moved within its cool-down or already moved `max_moves_per_pod_per_hour` times stays;
an owner's and the fleet's evictions in the hour, plus the plan's own, stay within their caps.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuplace.core.arrays import BoolArray
from gpuplace.core.defrag.model import Limits, PastMove, slack_ms
from gpuplace.core.model import Pod

if TYPE_CHECKING:
    from gpuplace.core.defrag.occupancy import Occupancy

HOUR_S = 3600.0


def outranks(victim: Pod, beneficiary: Pod) -> bool:
    """True when moving `victim` for `beneficiary` would sacrifice a higher priority or tighter deadline."""
    return victim.priority > beneficiary.priority or slack_ms(victim) < slack_ms(beneficiary)


@dataclass(frozen=True)
class Quotas:
    """Evictions one plan may still make: in all, and per owner (owners not listed: the full cap)."""

    victims_left: int
    owner_left: dict[str, int]
    owner_cap: int

    def owner_allows(self, owners: Sequence[str | None]) -> bool:
        """Whether evicting pods of these owners (one entry per pod) keeps every owner within its cap."""
        counts = Counter(o for o in owners if o is not None)
        return all(n <= self.owner_left.get(o, self.owner_cap) for o, n in counts.items())


def eligible(occupancy: Occupancy, beneficiary: Pod, limits: Limits, history: Sequence[PastMove],
             now_s: float) -> BoolArray:
    """Per occupancy slot: may that pod move for `beneficiary` now (rule, cool-down, per-pod cap)?"""
    n = len(occupancy.pods)
    ok = ((occupancy.node[:n] >= 0) & (occupancy.priority[:n] <= beneficiary.priority)
          & (occupancy.slack_ms[:n] >= slack_ms(beneficiary)))  # (n_slots,)
    for uid in resting(limits, history, now_s):
        slot = occupancy.slot_of(uid)
        if slot is not None:
            ok[slot] = False
    return ok


def resting(limits: Limits, history: Sequence[PastMove], now_s: float) -> set[str]:
    """Pods that may not move now: within their cool-down, or at their cap of moves in the hour."""
    last_s: dict[str, float] = {}
    recent: Counter[str] = Counter()
    for move in history:
        if move.at_s > now_s:
            continue  # not yet, on this clock
        last_s[move.uid] = max(last_s.get(move.uid, -math.inf), move.at_s)
        if now_s - move.at_s < HOUR_S:
            recent[move.uid] += 1
    cooling = {uid for uid, at_s in last_s.items() if now_s - at_s < limits.pod_cooldown_s}
    capped = {uid for uid, n in recent.items() if n >= limits.max_moves_per_pod_per_hour}
    return cooling | capped


def quotas(limits: Limits, history: Sequence[PastMove], now_s: float) -> Quotas:
    """Evictions left to one plan under the per-plan cap, the hourly cap on all of `history` and the per-owner caps."""
    window = [m for m in history if 0 <= now_s - m.at_s < HOUR_S]
    fleet_left = max(0, limits.max_evictions_per_hour - len(window))
    by_owner = Counter(m.owner for m in window if m.owner is not None)
    cap = limits.max_evictions_per_owner_per_hour
    return Quotas(min(limits.max_victims_per_plan, fleet_left),
                  {o: max(0, cap - n) for o, n in by_owner.items()}, cap)


__all__ = ["HOUR_S", "Quotas", "eligible", "outranks", "quotas", "resting"]
