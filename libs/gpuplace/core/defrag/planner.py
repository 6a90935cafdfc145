"""plan(): the cheapest set of moves that lets a pod blocked by fragmentation in, or why none does.

1. diagnose the beneficiary (blockers.py); only FRAGMENTATION is planned for, a pod that fits now
   gets a plan without moves, anything else a Refusal with the blocker's reason;
2. keep the running pods that may move for it (eligibility.py: priority and deadline rule,
   cool-downs, per-pod caps) and could land on another node now (landing.py), and the evictions the
   limits leave (per plan, owner, fleet); `running` may be a sequence or an Occupancy the caller
   keeps up to date (no rebuild per call);
3. list the candidate clearings, cheapest first (options.py);
4. take the first whose pods all find new places now (targets.py), after whose moves the policy
   accepts the node, and which applies cleanly in the executor's order (apply.py, on scratch copies),
   trying at most `MAX_ATTEMPTS` of them;
5. with Limits.max_chain_depth >= 1, then options with pods that have nowhere to go now, making room
   for each by moving others first (chains.py), at most `MAX_CHAIN_ATTEMPTS` of them.
Pure and deterministic: the same snapshot, pods, policy state, limits, history and `now_s` give the
same plan. Time is only compared, never read.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuplace.core.defrag.apply import apply_moves, apply_plan
from gpuplace.core.defrag.blockers import diagnose
from gpuplace.core.defrag.chains import rerouter
from gpuplace.core.defrag.eligibility import Quotas, eligible, quotas
from gpuplace.core.defrag.landing import lands_elsewhere
from gpuplace.core.defrag.model import Blocker, Limits, Move, PastMove, Plan, Refusal, RunningPod
from gpuplace.core.defrag.occupancy import Occupancy
from gpuplace.core.defrag.options import Option, options
from gpuplace.core.defrag.targets import Reroute, find_targets
from gpuplace.core.demand import Demand, resolve
from gpuplace.core.framework.interface import Policy
from gpuplace.core.framework.runtime import decide
from gpuplace.core.model import Pod
from gpuplace.core.snapshot import ClusterSnapshot

MAX_ATTEMPTS = 8
"""Options whose targets are searched before giving up (each costs a scratch copy and a cycle per mover)."""
MAX_CHAIN_ATTEMPTS = 4
"""Options with a pod that needs a chain (Limits.max_chain_depth >= 1), tried after the direct ones."""


def plan(snapshot: ClusterSnapshot, beneficiary: Pod, running: Sequence[RunningPod] | Occupancy, policy: Policy,
         limits: Limits, history: Sequence[PastMove], now_s: float) -> Plan | Refusal:
    """The cheapest feasible move set for `beneficiary` under `limits`, or a Refusal saying why not."""
    demand = resolve(beneficiary, snapshot)
    blocker, reason = diagnose(snapshot, demand, policy)
    if blocker is Blocker.NONE:
        return _without_moves(snapshot, demand, policy) or Refusal(blocker, "the policy placed it nowhere")
    if blocker is not Blocker.FRAGMENTATION:
        return Refusal(blocker, reason)
    left = quotas(limits, history, now_s)
    if left.victims_left <= 0:
        return Refusal(blocker, "eviction limits reached: no pod may be moved now")
    occupancy = running if isinstance(running, Occupancy) else Occupancy.of(snapshot, running)
    may_move = eligible(occupancy, beneficiary, limits, history, now_s)  # (n_slots,)
    landing = may_move.copy()
    slots = np.flatnonzero(landing)
    landing[slots] = lands_elsewhere(snapshot, occupancy, slots)
    direct = options(snapshot, demand, occupancy, landing, left)
    for option in direct[:MAX_ATTEMPTS]:
        found = _try(snapshot, beneficiary, demand, occupancy, policy, option, left)
        if found is not None:
            return found
    chained: list[Option] = []
    if limits.max_chain_depth >= 1:
        chained = [o for o in options(snapshot, demand, occupancy, may_move, left)
                   if not all(landing[s] for s in o.movers)]
        for option in chained[:MAX_CHAIN_ATTEMPTS]:
            moving = {occupancy.in_slot(s).uid for s in option.movers}
            reroute = rerouter(occupancy, may_move, policy, left, moving)
            found = _try(snapshot, beneficiary, demand, occupancy, policy, option, left, reroute)
            if found is not None:
                return found
    if not direct and not chained:
        return Refusal(blocker, f"{reason}; no node can be cleared by pods that may move within the limits "
                                "and have somewhere else to go")
    return Refusal(blocker, f"{reason}; the pods to move have nowhere to go "
                            f"({len(direct)} options, {len(chained)} with chains)")


def _without_moves(snapshot: ClusterSnapshot, demand: Demand, policy: Policy) -> Plan | None:
    decision = decide(snapshot, demand, policy)
    if decision.node is None:
        return None
    type_id = snapshot.gpu_type_id[decision.node]
    with_gpus = bool(decision.gpu_indices)
    return Plan(demand.pod_name, snapshot.node_names[decision.node], decision.gpu_indices,
                int(demand.share_milli_by_type[type_id]) if with_gpus else 0,
                int(demand.gpu_memory_mib_by_type[type_id]) if with_gpus else 0, (), 0.0, ("fits without moves",))


def _try(snapshot: ClusterSnapshot, beneficiary: Pod, demand: Demand, occupancy: Occupancy, policy: Policy,
         option: Option, left: Quotas, reroute: Reroute | None = None) -> Plan | None:
    movers = [occupancy.in_slot(slot) for slot in option.movers]
    moves = find_targets(snapshot, demand, option.node, option.gpu_indices, movers, policy, reroute)
    if moves is None or len(moves) > left.victims_left:
        return None
    by_uid = {m.uid: occupancy.pod(m.uid) for m in moves}
    if not left.owner_allows([r.owner for r in by_uid.values()]):
        return None
    type_id = snapshot.gpu_type_id[option.node]
    with_gpus = bool(option.gpu_indices)
    result = Plan(demand.pod_name, snapshot.node_names[option.node], option.gpu_indices,
                  int(demand.share_milli_by_type[type_id]) if with_gpus else 0,
                  int(demand.gpu_memory_mib_by_type[type_id]) if with_gpus else 0,
                  moves, sum(m.cost for m in moves), _reasons(snapshot, option, moves))
    after = snapshot.copy()
    try:
        apply_moves(after, moves, by_uid)
        if not policy.filter(after, demand)[option.node]:
            return None
        apply_plan(snapshot.copy(), result, beneficiary, by_uid)
    except ValueError:
        return None
    return result


def _reasons(snapshot: ClusterSnapshot, option: Option, moves: tuple[Move, ...]) -> tuple[str, ...]:
    gpus = ",".join(map(str, option.gpu_indices)) or "-"
    head = f"clear node {snapshot.node_names[option.node]} GPU(s) {gpus} by moving {len(moves)} pod(s)"
    return (head, *(f"wave {m.wave}: move {m.uid} {m.from_node}{list(m.from_gpu_indices)} -> "
                    f"{m.to_node}{list(m.to_gpu_indices)}" for m in moves))


__all__ = ["MAX_ATTEMPTS", "MAX_CHAIN_ATTEMPTS", "plan"]
