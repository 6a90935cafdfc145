"""The paper's trace simulator: pods arrive one by one and are placed by a policy, or dropped.

Harness (Weng et al., ATC'23, §6; DESIGN.md §6): nodes in a seeded random order; the trace's pods
shuffled by the seed, then resampled until the requested GPU reaches 130% of capacity (arrivals.py);
each pod is placed where the policy says or, if no node fits, dropped -- no retry, no departures.
The typical workload M is computed from the trace's own pods (CPU-only shapes included).

Everything comes in as arguments -- nodes, pods, policy name, seed -- and the result is a plain
record of the run; reading KPIs off it is kpi.py's job. No clock, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuplace.core.arrays import FloatArray, IntArray
from gpuplace.core.demand import Demand, nominal_share_milli, resolve
from gpuplace.core.framework.interface import Policy, PolicyContext
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.model import GpuRequest, Node, Pod
from gpuplace.core.node_states import NodeStates
from gpuplace.core.policies import registry
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import TypicalWorkload, typical_workload
from gpuplace.sim.arrivals import plan_arrivals
from gpuplace.sim.kpi import allocated_pct, unallocated_pct_at


@dataclass(frozen=True)
class SimulationResult:
    """One run. Curves have one entry before the first arrival and one after each, (n_arrivals + 1,)."""

    policy: str
    seed: int
    total_gpus: int
    arrived_milli: IntArray
    allocated_milli: IntArray
    fragmentation_milli: FloatArray
    failed_by_shape: dict[str, int] = field(default_factory=dict)

    @property
    def n_arrivals(self) -> int:
        return len(self.arrived_milli) - 1

    @property
    def failed_pods(self) -> int:
        return sum(self.failed_by_shape.values())

    def unallocated_pct_at(self, arrived_pct: int = 100) -> float | None:
        """The KPI at exactly `arrived_pct`% arrived (kpi.py); None if the arrivals never reach it."""
        return unallocated_pct_at(self.arrived_milli, self.allocated_milli, self.total_gpus, arrived_pct)

    def allocated_pct(self) -> FloatArray:
        return allocated_pct(self.allocated_milli, self.total_gpus)

    def fragmentation_pct(self) -> FloatArray:
        """Fragmented GPU as % of cluster capacity, per row."""
        pct: FloatArray = np.round(self.fragmentation_milli / self.total_gpus / 10, 2)
        return pct

    def fragmentation_ratio_pct(self) -> FloatArray:
        """Fragmented GPU as % of the idle GPU, per row."""
        idle = self.total_gpus * 1000.0 - self.allocated_milli
        pct: FloatArray = np.round(100.0 * self.fragmentation_milli / np.maximum(idle, 1.0), 2)
        return pct


@dataclass(frozen=True, eq=False)
class Prepared:
    """A run as the paper's harness sets it up: nodes in the seeded order, the arrival sequence, the policy."""

    snapshot: ClusterSnapshot
    pods: Sequence[Pod]
    workload: TypicalWorkload
    requested: IntArray  # nominal GPU milli of each pod, (n_pods,)
    sequence: IntArray  # pod index of each arrival, (n_arrivals,)
    placer: Policy


def prepare(nodes: Sequence[Node], pods: Sequence[Pod], policy: str, seed: int, *, tune_ratio: float = 1.3,
            coverage_pct: float = 95.0) -> Prepared:
    """Validate and set up a run: sorted names, typical workload, seeded node order and arrivals, policy."""
    if not nodes or not pods:
        raise ValueError("a simulation needs nodes and pods")
    nodes = sorted(nodes, key=lambda n: n.name)
    pods = sorted(pods, key=lambda p: p.name)
    snapshot = ClusterSnapshot(nodes)
    workload = typical_workload(pods, snapshot.gpu_types, coverage_pct)
    rng = np.random.default_rng(seed)
    requested = np.array([nominal_share_milli(p, snapshot) for p in pods], dtype=np.int64)
    per_gpu = np.array([r // max(p.gpu.count, 1) for r, p in zip(requested, pods, strict=True)], dtype=np.int64)
    plan = plan_arrivals(requested, per_gpu, snapshot.n_nodes, snapshot.total_gpu_milli, rng, tune_ratio)
    placer = registry.create(policy, PolicyContext(workload=workload, rng=rng))
    return Prepared(snapshot.reordered(plan.node_order), pods, workload, requested, plan.sequence, placer)


def run(
    nodes: Sequence[Node], pods: Sequence[Pod], policy: str, seed: int, *, tune_ratio: float = 1.3,
    coverage_pct: float = 95.0, on_arrival: Callable[[int, int], None] | None = None,
) -> SimulationResult:
    """Simulate `pods` arriving on `nodes` under the named policy with the paper's harness.

    `on_arrival(done, total)` is called after each arrival (progress bars); it must not touch the run.
    """
    run_ = prepare(nodes, pods, policy, seed, tune_ratio=tune_ratio, coverage_pct=coverage_pct)
    return _simulate(run_.snapshot, run_.pods, run_.sequence, run_.requested, run_.placer, run_.workload, policy,
                     seed, on_arrival)


def _simulate(
    snapshot: ClusterSnapshot, pods: Sequence[Pod], sequence: IntArray, requested: IntArray,
    placer: Policy, workload: TypicalWorkload, policy: str, seed: int, on_arrival: Callable[[int, int], None] | None,
) -> SimulationResult:
    """Assumes a planned, validated run (see run())."""
    demands: dict[tuple[int, int, GpuRequest], Demand] = {}
    states = placer.node_states(snapshot) if hasattr(placer, "node_states") else NodeStates(
        workload, snapshot.max_gpus)
    n = len(sequence)
    arrived = np.zeros(n + 1, dtype=np.int64)  # (n_arrivals + 1,)
    allocated = np.zeros(n + 1, dtype=np.int64)
    fragmentation = np.zeros(n + 1, dtype=np.float64)
    fragmentation[0] = states.fragmentation(states.ids(snapshot)).sum()
    failed: Counter[str] = Counter()
    for step, index in enumerate(sequence, start=1):
        pod = pods[index]
        demand = _demand(pod, snapshot, demands)
        decision = decide(snapshot, demand, placer)
        if decision.scheduled:
            assignment = bind(snapshot, demand, decision)
            allocated[step] = allocated[step - 1] + sum(assignment.share_milli)
        else:
            allocated[step] = allocated[step - 1]
            failed[shape_label(pod)] += 1
        arrived[step] = arrived[step - 1] + requested[index]
        fragmentation[step] = states.fragmentation(states.ids(snapshot)).sum()
        if on_arrival is not None:
            on_arrival(step, n)
    return SimulationResult(policy, seed, snapshot.total_gpus, arrived, allocated, fragmentation, dict(failed))


def _demand(pod: Pod, snapshot: ClusterSnapshot, cache: dict[tuple[int, int, GpuRequest], Demand]) -> Demand:
    key = (pod.cpu_milli, pod.memory_mib, pod.gpu)
    demand = cache.get(key)
    if demand is None:
        demand = cache[key] = resolve(pod, snapshot)
    return demand


def shape_label(pod: Pod) -> str:
    request = pod.gpu
    cpu = f"{pod.cpu_milli / 1000:g} CPU"
    if not request.needs_gpu:
        return f"{cpu}, no GPU"
    per_gpu = f"{request.share_milli}m" if request.share_milli is not None else f"{request.memory_mib} MiB"
    models = f" on {'|'.join(request.allowed_models)}" if request.allowed_models else ""
    return f"{cpu}, {request.count} x {per_gpu}{models}"


__all__ = ["Prepared", "SimulationResult", "prepare", "run", "shape_label"]
