"""New places for the pods of an option, found now, the way the executor will reserve them.

The executor reserves every target before it evicts, so a target may only use capacity that is free
*now* and that the beneficiary does not need. On a scratch copy of the snapshot:
1. hold, on the beneficiary's node and GPUs, the part of its request that today's free capacity
   covers (the rest will come from the evicted pods);
2. place the pods to move, largest first, each where the policy would place it, each one charged
   before the next is placed. The pods stay charged at their old places throughout: no pod is
   promised capacity another pod's eviction would free.
A pod for which the policy finds no place sinks the option (None) -- unless a `reroute` is given
(chains.py): it may make room for that pod by moving others first, on the same scratch copy, and
returns their moves and the pod's; every pod placed after it is a wave later.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuplace.core.defrag.cost import move_cost_s
from gpuplace.core.defrag.model import Move, RunningPod
from gpuplace.core.demand import Demand, resolve
from gpuplace.core.framework.interface import Policy
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.snapshot import ClusterSnapshot

Reroute = Callable[[ClusterSnapshot, RunningPod, int], "tuple[Move, ...] | None"]
"""(scratch snapshot, pod with no place, wave) -> moves that make room for it, its own last."""


def find_targets(snapshot: ClusterSnapshot, demand: Demand, node: int, gpu_indices: Sequence[int],
                 movers: Sequence[RunningPod], policy: Policy,
                 reroute: Reroute | None = None) -> tuple[Move, ...] | None:
    """A Move for every pod of `movers`, or None if one of them has nowhere to go (see module doc)."""
    work = snapshot.copy()
    hold(work, demand, node, gpu_indices)
    moves: list[Move] = []
    wave = 0
    for running in sorted(movers, key=largest_first):
        found = place(work, running, policy, wave)
        if found is None and reroute is not None:
            rerouted = reroute(work, running, wave)
            if rerouted is None:
                return None
            moves.extend(rerouted)
            wave = max(m.wave for m in rerouted)
            continue
        if found is None:
            return None
        moves.append(found)
    return tuple(moves)


def place(work: ClusterSnapshot, running: RunningPod, policy: Policy, wave: int) -> Move | None:
    """Where the policy puts `running` on `work` (charged there), as a Move; None if nowhere."""
    mover = resolve(running.pod, work)
    decision = decide(work, mover, policy)
    if not decision.scheduled:
        return None
    assignment = bind(work, mover, decision)
    return Move(running.uid, running.node_name, running.gpu_indices, assignment.node_name, assignment.gpu_indices,
                assignment.share_milli[0] if assignment.share_milli else 0,
                assignment.memory_mib[0] if assignment.memory_mib else 0, move_cost_s(running), wave)


def hold(work: ClusterSnapshot, demand: Demand, node: int, gpu_indices: Sequence[int]) -> None:
    """Charge on `work` what of the beneficiary's request the node's free capacity covers today."""
    cpu = min(int(work.cpu_free_milli[node]), demand.cpu_milli)
    host = min(int(work.memory_free_mib[node]), demand.memory_mib)
    work.charge(node, (), cpu, host, 0, 0, 0)
    type_id = work.gpu_type_id[node]
    kind = demand.kind_on(work, node)
    for g in gpu_indices:
        share = min(int(work.free_share_milli[node, g]), int(demand.share_milli_by_type[type_id]))
        memory = min(int(work.free_memory_mib[node, g]), int(demand.gpu_memory_mib_by_type[type_id]))
        work.charge(node, (g,), 0, 0, share, memory, kind, slots=0)  # the slot was taken with the CPU


def largest_first(running: RunningPod) -> tuple[int, int, str]:
    return (-running.share_milli * len(running.gpu_indices), -running.pod.cpu_milli, running.uid)


__all__ = ["Reroute", "find_targets", "hold", "largest_first", "place"]
