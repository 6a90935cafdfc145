"""Chains of one level: make room for a pod to move by moving other pods first.

When a pod chosen to move has nowhere to go, the planner may (Limits.max_chain_depth >= 1) plan for
it as it plans for the beneficiary: the cheapest option to clear a place for it among the pods that
may move and can land elsewhere now (options.py, on the scratch snapshot where the earlier moves of
the plan are already charged), their targets found now (targets.py, no further chain). Their moves
are wave `w`, the rerouted pod's move wave `w + 1`: the executor evicts them first.

The pods of one plan never move twice, the rule and limits that hold for the beneficiary's movers
hold for these (they are drawn from the same eligible pods), and every move counts against the
plan's `victims_left`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpuplace.core.arrays import BoolArray
from gpuplace.core.defrag.apply import apply_moves
from gpuplace.core.defrag.cost import move_cost_s
from gpuplace.core.defrag.eligibility import Quotas
from gpuplace.core.defrag.landing import lands_elsewhere
from gpuplace.core.defrag.model import Move, RunningPod
from gpuplace.core.defrag.occupancy import Occupancy
from gpuplace.core.defrag.options import options
from gpuplace.core.defrag.targets import Reroute, find_targets
from gpuplace.core.demand import Demand, resolve
from gpuplace.core.framework.interface import Policy
from gpuplace.core.snapshot import ClusterSnapshot

MAX_NODES = 8
"""Nodes searched per rerouted pod: a chain is a fallback, kept cheap."""
MAX_ATTEMPTS = 3


def rerouter(occupancy: Occupancy, eligible: BoolArray, policy: Policy, quotas: Quotas,
             moving: set[str]) -> Reroute:
    """A Reroute for one plan attempt; `moving` holds the uids the attempt already moves (it grows)."""

    def reroute(work: ClusterSnapshot, running: RunningPod, wave: int) -> tuple[Move, ...] | None:
        left = quotas.victims_left - len(moving)
        if left <= 0:
            return None
        demand = resolve(running.pod, work)
        mask = eligible.copy()  # (n_slots,)
        for uid in moving:
            slot = occupancy.slot_of(uid)
            if slot is not None:
                mask[slot] = False
        slots = np.flatnonzero(mask)
        mask[slots] = lands_elsewhere(work, occupancy, slots)
        sub_quotas = replace(quotas, victims_left=left)
        for option in options(work, demand, occupancy, mask, sub_quotas, MAX_NODES)[:MAX_ATTEMPTS]:
            movers = [occupancy.in_slot(s) for s in option.movers]
            moves = find_targets(work, demand, option.node, option.gpu_indices, movers, policy)
            if moves is None:
                continue
            moves = tuple(replace(m, wave=wave) for m in moves)
            trial = work.copy()
            try:
                apply_moves(trial, moves, {r.uid: r for r in movers})
            except ValueError:
                continue
            if not policy.filter(trial, demand)[option.node]:
                continue
            apply_moves(work, moves, {r.uid: r for r in movers})
            own = _charge(work, demand, option.node, option.gpu_indices, running, wave + 1)
            moving.update(m.uid for m in moves)
            return (*moves, own)
        return None

    return reroute


def _charge(work: ClusterSnapshot, demand: Demand, node: int, gpu_indices: tuple[int, ...], running: RunningPod,
            wave: int) -> Move:
    type_id = work.gpu_type_id[node]
    share = int(demand.share_milli_by_type[type_id]) if gpu_indices else 0
    memory = int(demand.gpu_memory_mib_by_type[type_id]) if gpu_indices else 0
    work.charge(node, gpu_indices, demand.cpu_milli, demand.memory_mib, share, memory, demand.kind_on(work, node))
    return Move(running.uid, running.node_name, running.gpu_indices, work.node_names[node], tuple(gpu_indices),
                share, memory, move_cost_s(running), wave)


__all__ = ["MAX_ATTEMPTS", "MAX_NODES", "rerouter"]
