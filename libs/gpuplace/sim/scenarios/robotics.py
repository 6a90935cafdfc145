"""The robotics scenario: perception pods arrive and depart on a mixed V100/A100/H100/H200 fleet.

Pods and fleet come from sim/robotics_fleet.py (memory slices in whole GiB, frame rates 10-30 fps,
deadlines of one frame period: 33, 66 or 100 ms). Arrivals are Poisson at a rate that offers
`offered_pods_per_gpu` running pods per GPU on average (Little's law: rate x mean lifetime), and
lifetimes are exponential. A pod that no GPU takes at arrival is turned away (no queue, no retry),
so every policy sees exactly the same arrivals: the same load.

Latency is judged by a *truth* model: the given tails (fitted on the H200 data) with each class's
work fraction from sim/robotics_fleet.py and each pod's own service time (LatencyLedger). The
latency-aware policy decides with its own *belief*: with `learn`, every class starts from the safe
prior (the whole service time holds the GPU) and is refitted every `window_s` from latency windows
drawn from the truth with measurement noise (latency/update.py), as the service would from
`gpuplace.latency.v1`; without it, the belief is the truth (classes profiled beforehand).

Policies: any registry name, `exclusive` (one pod per GPU), `<name>+latency` (the base behind the
latency filter), and `gpuplace`: the house policy (policies/gpuplace) behind the latency filter, as the
placement service runs it. Time comes in as numbers, randomness from the seed.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpuplace.core.demand import Demand, resolve
from gpuplace.core.filters.latency_fit import DEFAULT_MARGIN
from gpuplace.core.framework.interface import Policy, PolicyContext
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import DEFAULT_MODEL, ClassProfile, LatencyModel, Stream, WorkEvidence
from gpuplace.core.latency.predict import predict
from gpuplace.core.latency.update import LatencyWindow, update
from gpuplace.core.model import Assignment, GpuRequest, Pod
from gpuplace.core.policies import exclusive, registry
from gpuplace.core.policies.latency_aware import SUFFIX, latency_aware
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import typical_workload
from gpuplace.sim import robotics_fleet
from gpuplace.sim.scenarios.latency_ledger import LatencyLedger

NAME = "robotics"
HOUSE = "gpuplace"


@dataclass(frozen=True)
class RoboticsScenario:
    n_nodes: int = 16
    gpus_per_node: int = 8
    n_pods: int = 1500
    offered_pods_per_gpu: float = 3.0
    mean_lifetime_s: float = 900.0
    margin: float = DEFAULT_MARGIN
    memory_step_mib: int = 1024
    learn: bool = True
    window_s: float = 60.0
    windows_per_tick: int = 16
    noise_sigma: float = 0.03
    """Log-normal measurement noise on every windowed percentile."""


def policy_names() -> tuple[str, ...]:
    return tuple(dict.fromkeys((exclusive.NAME, *registry.names(), HOUSE)))


def build_policy(name: str, context: PolicyContext, belief: LatencyModel, gpu_load: GpuLoad,
                 streams: dict[str, Stream], margin: float) -> Policy:
    """A policy by scenario name (see the module docstring); ValueError for an unknown name."""
    if name == HOUSE:  # the house policy always packs behind the latency filter
        return latency_aware(registry.create(HOUSE, context), belief, gpu_load, streams, margin=margin, name=HOUSE)
    if name.endswith(SUFFIX):
        base = build_policy(name[: -len(SUFFIX)], context, belief, gpu_load, streams, margin)
        return latency_aware(base, belief, gpu_load, streams, margin=margin)
    if name == exclusive.NAME:
        return exclusive.Exclusive(context)
    try:
        return registry.create(name, context)
    except registry.UnknownPolicy:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(policy_names())}, or <name>{SUFFIX}") from None


def run_robotics_scenario(policies: Sequence[str], seed: int = 0, *, scenario: RoboticsScenario = RoboticsScenario(),
                          model: LatencyModel = DEFAULT_MODEL) -> list[dict[str, Any]]:
    """One result per policy, the same arrivals for each: KPIs (latency_ledger.py) and counts."""
    if not policies:
        raise ValueError("name at least one policy")
    if scenario.n_pods < 1 or scenario.offered_pods_per_gpu <= 0 or scenario.mean_lifetime_s <= 0:
        raise ValueError("the scenario needs pods, a positive offered load and a positive lifetime")
    return [_run(name, seed, scenario, model) for name in policies]


def truth_model(model: LatencyModel) -> LatencyModel:
    """`model`'s tails with every perception class's true profile (sim/robotics_fleet.py)."""
    classes = {c.workload: ClassProfile(float(np.mean(c.service_ms_h100)), c.gpu_work_fraction, 1e6, 1e6)
               for c in robotics_fleet.PERCEPTION_CLASSES}
    return replace(model, classes=classes, evidence=WorkEvidence())


def _run(name: str, seed: int, sc: RoboticsScenario, model: LatencyModel) -> dict[str, Any]:
    snapshot = ClusterSnapshot(robotics_fleet.fleet(sc.n_nodes, gpus_per_node=sc.gpus_per_node, seed=seed))
    drawn = robotics_fleet.pods(sc.n_pods, seed=seed, memory_step_mib=sc.memory_step_mib)
    pods = [pod for pod, _ in drawn]
    streams = {pod.name: _stream(pod, service) for pod, service in drawn}
    truth = truth_model(model)
    belief = replace(model, classes={}, evidence=WorkEvidence()) if sc.learn else truth
    gpu_load = GpuLoad.for_snapshot(snapshot)
    context = PolicyContext(workload=typical_workload(pods, snapshot.gpu_types), rng=np.random.default_rng(seed))
    policy = build_policy(name, context, belief, gpu_load, streams, sc.margin)
    rng = np.random.default_rng([seed, 1])
    rate_per_s = sc.offered_pods_per_gpu * snapshot.total_gpus / sc.mean_lifetime_s
    arrivals_s = np.cumsum(rng.exponential(1.0 / rate_per_s, size=len(pods)))  # (n_pods,)
    lifetimes_s = rng.exponential(sc.mean_lifetime_s, size=len(pods))  # (n_pods,)
    ledger = LatencyLedger(truth, gpu_load)
    learner = _Learner(sc, truth, gpu_load, np.random.default_rng([seed, 2])) if sc.learn else None
    placed: dict[int, tuple[Demand, Assignment, int]] = {}
    departures: list[tuple[float, int]] = []
    demands: dict[tuple[int, int, GpuRequest], Demand] = {}

    def depart(until_s: float) -> None:
        while departures and departures[0][0] <= until_s:
            when, index = heapq.heappop(departures)
            ledger.advance(when)
            demand, assignment, node = placed.pop(index)
            snapshot.refund(node, assignment.gpu_indices, demand.cpu_milli, demand.memory_mib,
                            assignment.share_milli[0], assignment.memory_mib[0], demand.kind_on(snapshot, node))
            gpu_load.refund(assignment.pod_name)
            for gpu in assignment.gpu_indices:
                ledger.refresh(node, gpu)

    for index, (pod, now_s) in enumerate(zip(pods, arrivals_s.tolist(), strict=True)):
        depart(now_s)
        if learner is not None and hasattr(policy, "model"):
            policy.model = learner.catch_up(policy.model, now_s)
        ledger.advance(now_s)
        key = (pod.cpu_milli, pod.memory_mib, pod.gpu)
        demand = demands.get(key) or demands.setdefault(key, resolve(pod, snapshot))
        demand = replace(demand, pod_name=pod.name)
        decision = decide(snapshot, demand, policy)
        if decision.node is None:  # not scheduled
            continue
        assignment = bind(snapshot, demand, decision)
        gpu_load.charge(pod.name, decision.node, decision.gpu_indices, streams[pod.name])
        for gpu in decision.gpu_indices:
            ledger.refresh(decision.node, gpu)
        placed[index] = (demand, assignment, decision.node)
        heapq.heappush(departures, (now_s + lifetimes_s[index], index))
    result: dict[str, Any] = {"scenario": NAME, "policy": name, "seed": seed, **ledger.kpis(),
                              "arrived_pods": len(pods), "placed_pods": len(ledger.worst_p95_ms),
                              "gpus": snapshot.total_gpus}
    result["placed_pct"] = round(100.0 * result["placed_pods"] / len(pods), 2)
    if learner is not None and hasattr(policy, "model"):
        learned = sorted(policy.model.classes.items())
        result["learned_work_fraction"] = {k: round(v.work_fraction, 3) for k, v in learned}
    return result


def _stream(pod: Pod, service_ms: float) -> Stream:
    """A perception pod as the latency model sees it (robotics_fleet.pods gives every pod a frame rate)."""
    assert pod.frame_rate_hz is not None
    return Stream(pod.frame_rate_hz, pod.workload_class, service_ms, pod.deadline_ms)


class _Learner:
    """Latency windows every `window_s` from the truth, with noise, on a sample of busy GPUs."""

    def __init__(self, sc: RoboticsScenario, truth: LatencyModel, gpu_load: GpuLoad, rng: np.random.Generator) -> None:
        self.sc, self.truth, self.gpu_load, self.rng = sc, truth, gpu_load, rng
        self.next_s = sc.window_s

    def catch_up(self, belief: LatencyModel, now_s: float) -> LatencyModel:
        while self.next_s <= now_s:
            belief = update(belief, self._windows())
            self.next_s += self.sc.window_s
        return belief

    def _windows(self) -> list[LatencyWindow]:
        busy = np.argwhere(self.gpu_load.occupied.any(axis=2))  # (n_busy, 2)
        if not len(busy):
            return []
        picks = self.rng.choice(len(busy), size=min(self.sc.windows_per_tick, len(busy)), replace=False)
        windows = []
        for node, gpu in busy[np.sort(picks)].tolist():
            streams = [s for _, s in self.gpu_load.streams_on(node, gpu)]
            speed = float(self.gpu_load.speed[node])
            prediction = predict(self.truth, streams, speed=speed)
            if prediction.overloaded:
                continue
            seen: set[str | None] = set()
            for i, stream in enumerate(streams):
                if stream.workload_class in seen:
                    continue
                seen.add(stream.workload_class)
                noise = float(np.exp(self.rng.normal(0.0, self.sc.noise_sigma)))
                p50, p95, p99 = sorted(float(p.percentile_ms(q)[i]) * noise
                                       for p, q in ((prediction, 50), (prediction, 95), (prediction, 99)))
                windows.append(LatencyWindow(stream, tuple(streams[:i] + streams[i + 1:]), speed, p50, p95, p99,
                                             int(stream.frame_rate_hz * self.sc.window_s)))
        return windows


__all__ = ["HOUSE", "NAME", "RoboticsScenario", "build_policy", "policy_names", "run_robotics_scenario", "truth_model"]
