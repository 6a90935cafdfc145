"""The paper's harness with defragmentation: a pod blocked by fragmentation may have pods moved for it.

Same arrivals, node order, policy and KPI as simulator.py (its pieces are imported, not copied); one
difference: when an arrival fits nowhere, the planner (planner.py) is asked for a plan, and a plan is
applied on the snapshot in the executor's order (apply.py) -- the moved pods are refunded at their
old places and charged at their targets, and the arrival is placed. Otherwise it is dropped, as in
the paper.

The move budget is fleet-wide and running: after any arrival, moves so far <= `max_moves_pct`% of
the pods placed so far (the policy cannot know where the KPI is read). Only pods that ask for GPUs
are planned for: a CPU-only arrival adds nothing to the KPI, and the budget is for GPU. The harness has no clock; the
planner's is one second per arrival. Every pod restarts in `RESTART_S`, so a plan's cost is its
number of moves. A plan is taken only if it places at least `min_gain_milli_per_move` of GPU per
pod moved: a move budget is better spent on a whole GPU than on a sliver.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpuplace.core.defrag.apply import apply_plan
from gpuplace.core.defrag.eligibility import resting
from gpuplace.core.defrag.model import Limits, PastMove, Plan, RunningPod
from gpuplace.core.defrag.occupancy import Occupancy
from gpuplace.core.defrag.planner import plan
from gpuplace.core.demand import Demand, resolve
from gpuplace.core.framework.interface import Policy
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.model import GpuRequest, Node, Pod
from gpuplace.core.node_states import NodeStates
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.sim.simulator import SimulationResult, prepare, shape_label

RESTART_S = 30.0
SIM_LIMITS = Limits(max_victims_per_plan=3, pod_cooldown_s=600.0, max_moves_per_pod_per_hour=2,
                    max_evictions_per_owner_per_hour=2, max_evictions_per_hour=10**9, max_chain_depth=1)
"""Per-pod limits as in production (one arrival per second); the fleet cap is the move budget."""
DEFAULT_MAX_MOVES_PCT = 3.0
DEFAULT_MIN_GAIN_MILLI_PER_MOVE = 0


@dataclass(frozen=True)
class DefragResult:
    """A simulation with defragmentation: the paper's record plus what the moves did."""

    simulation: SimulationResult
    placed_pods: int
    moved_pods: int
    plans: int
    """Arrivals placed by a plan (each moved `moved_pods / plans` pods on average)."""
    moves_at_100: int
    placed_at_100: int

    @property
    def moved_pods_pct(self) -> float:
        """Moves per placed pod over the whole run, in %."""
        return 100.0 * self.moved_pods / max(self.placed_pods, 1)


def run(nodes: Sequence[Node], pods: Sequence[Pod], policy: str, seed: int, *,
        max_moves_pct: float = DEFAULT_MAX_MOVES_PCT, limits: Limits = SIM_LIMITS,
        min_gain_milli_per_move: int = DEFAULT_MIN_GAIN_MILLI_PER_MOVE, tune_ratio: float = 1.3,
        coverage_pct: float = 95.0, on_arrival: Callable[[int, int], None] | None = None) -> DefragResult:
    """simulator.run with defragmentation (see the module docstring)."""
    if max_moves_pct < 0:
        raise ValueError(f"max_moves_pct must be >= 0, got {max_moves_pct}")
    prepared = prepare(nodes, pods, policy, seed, tune_ratio=tune_ratio, coverage_pct=coverage_pct)
    snapshot, pods, workload, requested, placer = (prepared.snapshot, prepared.pods, prepared.workload,
                                                   prepared.requested, prepared.placer)
    states = placer.node_states(snapshot) if hasattr(placer, "node_states") else NodeStates(
        workload, snapshot.max_gpus)
    run_state = _Run(snapshot, placer, limits, max_moves_pct, min_gain_milli_per_move)
    n = len(prepared.sequence)
    arrived = np.zeros(n + 1, dtype=np.int64)  # (n_arrivals + 1,)
    allocated = np.zeros(n + 1, dtype=np.int64)
    fragmentation = np.zeros(n + 1, dtype=np.float64)
    fragmentation[0] = states.fragmentation(states.ids(snapshot)).sum()
    failed: Counter[str] = Counter()
    moves_at_100 = placed_at_100 = -1
    for step, index in enumerate(prepared.sequence, start=1):
        pod = pods[index]
        gained = run_state.arrive(step, pod)
        if gained is None:
            failed[shape_label(pod)] += 1
        allocated[step] = allocated[step - 1] + (gained or 0)
        arrived[step] = arrived[step - 1] + requested[index]
        if moves_at_100 < 0 and arrived[step] >= snapshot.total_gpu_milli:
            moves_at_100, placed_at_100 = run_state.moves, run_state.placed
        fragmentation[step] = states.fragmentation(states.ids(snapshot)).sum()
        if on_arrival is not None:
            on_arrival(step, n)
    result = SimulationResult(policy, seed, snapshot.total_gpus, arrived, allocated, fragmentation, dict(failed))
    return DefragResult(result, run_state.placed, run_state.moves, run_state.plans,
                        max(moves_at_100, 0), max(placed_at_100, 0))


class _Run:
    """The mutable state of one run: snapshot, running pods, move history and budget."""

    def __init__(self, snapshot: ClusterSnapshot, placer: Policy, limits: Limits, max_moves_pct: float,
                 min_gain_milli_per_move: int) -> None:
        self.snapshot = snapshot
        self.placer = placer
        self.limits = limits
        self.max_moves_pct = max_moves_pct
        self.min_gain = min_gain_milli_per_move
        self.running = Occupancy(snapshot)
        self.history: list[PastMove] = []
        self.demands: dict[tuple[int, int, GpuRequest], Demand] = {}
        self.refused: set[tuple[object, ...]] = set()
        self.placed = self.moves = self.plans = 0

    def arrive(self, step: int, pod: Pod) -> int | None:
        """Place `pod` (moving others if need be); the GPU milli allocated, or None if dropped."""
        key = (pod.cpu_milli, pod.memory_mib, pod.gpu)
        if key not in self.demands:
            self.demands[key] = resolve(pod, self.snapshot)
        demand = self.demands[key]
        decision = decide(self.snapshot, demand, self.placer)
        uid = f"{step}:{pod.name}"
        if decision.scheduled:
            a = bind(self.snapshot, demand, decision)
            self._record(uid, pod, a.node_name, a.gpu_indices, a.share_milli, a.memory_mib)
            return sum(a.share_milli)
        budget = int(self.max_moves_pct * (self.placed + 1) / 100.0) - self.moves
        if budget <= 0 or not demand.needs_gpu:
            return None
        limits = replace(self.limits, max_victims_per_plan=min(self.limits.max_victims_per_plan, budget))
        # The planner is deterministic: the same request on the same cluster (versions only grow), with
        # the same pods resting and the same budget, gets the same answer. Past saturation most arrivals
        # are refused on an unchanged cluster; asking again would only cost time.
        asked = (key, pod.priority, pod.deadline_ms, limits.max_victims_per_plan, int(self.snapshot.version.sum()),
                 frozenset(resting(limits, self.history, float(step))))
        if asked in self.refused:
            return None
        found = plan(self.snapshot, pod, self.running, self.placer, limits, self.history, float(step))
        gained = found.share_milli * len(found.gpu_indices) if isinstance(found, Plan) else 0
        if not isinstance(found, Plan) or not found.moves or gained < self.min_gain * len(found.moves):
            self.refused.add(asked)
            return None
        by_uid = {m.uid: self.running.pod(m.uid) for m in found.moves}
        for moved in apply_plan(self.snapshot, found, pod, by_uid).values():
            self.running.remove(moved.uid)
            self.running.add(moved)
        self.history.extend(PastMove(m.uid, None, float(step)) for m in found.moves)
        self.moves += len(found.moves)
        self.plans += 1
        count = len(found.gpu_indices)
        self._record(uid, pod, found.node, found.gpu_indices, (found.share_milli,) * count,
                     (found.memory_mib,) * count)
        return gained

    def _record(self, uid: str, pod: Pod, node: str, gpus: tuple[int, ...], share: tuple[int, ...],
                memory: tuple[int, ...]) -> None:
        self.placed += 1
        self.running.add(RunningPod(uid, pod, node, gpus, share[0] if share else 0, memory[0] if memory else 0,
                                    None, RESTART_S))


__all__ = ["DEFAULT_MAX_MOVES_PCT", "DEFAULT_MIN_GAIN_MILLI_PER_MOVE", "RESTART_S", "SIM_LIMITS", "DefragResult",
           "run"]
