"""Both autoscalers of sim/autoscaler.py on the fleet simulator's waiting pods, as they wait (issue 18, part 4).

`AutoscalerComparison` is a FleetSim observer: at every hourly sample (every `every_h`-th), for each cluster with
GPU pods waiting, it hands the same copy of the cluster's snapshot and the same waiting pods (queue order, CPU-only
ones included, as a cluster autoscaler sees every pending pod) to `whole_gpu` (cluster-autoscaler's count of whole
GPUs) and to `hint_driven` (core/scale_hints; it may move the cluster's running pods within the simulation's
defragmentation limits and eviction history, as the defragmenter would, for pods fragmentation blocks), each run to
completion, and records the nodes each would add, by shape, the pods the hints moved and the pods each could not
place. The simulation itself never sees those nodes: the comparison asks "what
would each add now", it does not scale the fleet, so every observation starts from the state the policy alone made
and a run with the comparison equals one without it.

Each autoscaler gets fresh policies from the cluster's own policy name and typical workload (an online learner
must not carry hypothetical pods into the simulation, nor one autoscaler's into the other's), their random
generator seeded by (plan seed, cluster, hour), so the comparison is as deterministic as the run.

The per-seed totals (`totals`): observations, the nodes each added summed over them, and in how many
observations hints added fewer, as many or more nodes -- on all of them, and on those where both placed every
waiting pod (the issue's "to place the same pending pods"; where one leaves pods unplaced its count is not for
the same pods).
"""

from __future__ import annotations

import time
import zlib
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuplace.core.defrag.eligibility import HOUR_S
from gpuplace.core.framework.interface import Policy, PolicyContext
from gpuplace.core.policies import registry
from gpuplace.sim import autoscaler
from gpuplace.sim.autoscaler import ScaleRun
from gpuplace.sim.fleet.plan import TRAINING

if TYPE_CHECKING:
    from gpuplace.sim.fleet.engine import FleetSim

AUTOSCALERS = ("whole-gpu", "hint-driven")


@dataclass(frozen=True)
class Observation:
    """One cluster at one hour: what it had waiting and what each autoscaler would add for it."""

    t_h: float
    cluster: str
    waiting: int
    waiting_gpu: int
    waiting_training: int
    runs: tuple[ScaleRun, ...]  # in AUTOSCALERS order

    def run(self, name: str) -> ScaleRun:
        return self.runs[AUTOSCALERS.index(name)]

    @property
    def both_placed_all(self) -> bool:
        return all(not r.unplaced for r in self.runs)

    def as_dict(self) -> dict[str, Any]:
        return {"t_h": self.t_h, "cluster": self.cluster, "waiting": self.waiting, "waiting_gpu": self.waiting_gpu,
                "waiting_training": self.waiting_training,
                **{r.autoscaler: r.as_dict() for r in self.runs}}


class AutoscalerComparison:
    """The observer of the module docstring: `FleetSim(plan, policy, observer=AutoscalerComparison())`."""

    def __init__(self, *, every_h: int = 1) -> None:
        if every_h < 1:
            raise ValueError(f"every_h must be at least 1, got {every_h}")
        self.every_h = every_h
        self.observations: list[Observation] = []
        self.seconds = 0.0

    def __call__(self, sim: FleetSim, now_s: float) -> None:
        hour = round(now_s / HOUR_S)
        if hour % self.every_h:
            return
        started = time.perf_counter()
        for name, cluster in sim.clusters.items():
            waiting = cluster.waiting_pods()
            gpu = sum(1 for p in waiting if p.gpu.needs_gpu)
            training = sum(1 for p in waiting if p.workload_class == TRAINING)
            if not gpu:
                continue
            factory = _factory(sim, name, hour)
            snapshot = cluster.snapshot.copy()  # the autoscalers copy too; this one guards the run against them
            movable = autoscaler.Movable(tuple(p.running() for p in cluster.running.values()), sim.limits,
                                         sim.evictions(name), now_s)
            runs = (autoscaler.whole_gpu(snapshot, waiting, factory),
                    autoscaler.hint_driven(snapshot, waiting, factory, movable=movable))
            self.observations.append(Observation(round(now_s / HOUR_S, 3), name, len(waiting), gpu, training,
                                                 runs))
        self.seconds += time.perf_counter() - started

    def totals(self) -> dict[str, Any]:
        """Per-run totals (module docstring), with nodes added by shape per autoscaler."""
        obs = self.observations
        needs = [o for o in obs if any(r.nodes_added for r in o.runs)]
        out: dict[str, Any] = {"every_h": self.every_h, "all": _compare(obs), "needs_nodes": _compare(needs),
                               "needs_nodes_both_placed_all": _compare([o for o in needs if o.both_placed_all])}
        for name in AUTOSCALERS:
            runs = [o.run(name) for o in obs]
            shapes: Counter[str] = Counter()
            for r in runs:
                shapes.update(r.by_shape)
            out[name.replace("-", "_")] = {
                "by_shape": dict(sorted(shapes.items())), "gpus_added": sum(r.gpus_added for r in runs),
                "gpu_memory_added_gib": round(sum(r.gpu_memory_added_mib for r in runs) / 1024, 1),
                "unplaced_pods": sum(len(r.unplaced) for r in runs),
                "observations_with_unplaced": sum(1 for r in runs if r.unplaced),
                "pods_moved": sum(r.pods_moved for r in runs),
            }
        blocked: Counter[str] = Counter()
        for o in obs:
            first = o.run("hint-driven").hints
            if first:
                blocked.update({b.value: n for b, n in first[0].blocked().items()})
        out["waiting_pods"] = sum(o.waiting for o in obs)
        out["waiting_gpu_pods"] = sum(o.waiting_gpu for o in obs)
        out["waiting_training_pods"] = sum(o.waiting_training for o in obs)
        out["hint_blocked_by"] = dict(sorted(blocked.items()))  # what blocked them, by the hints (first round)
        out["seconds"] = round(self.seconds, 1)
        return out


def _compare(obs: list[Observation]) -> dict[str, int]:
    whole = [o.run("whole-gpu").nodes_added for o in obs]
    hinted = [o.run("hint-driven").nodes_added for o in obs]
    pairs = list(zip(hinted, whole, strict=True))
    return {"observations": len(obs), "whole_gpu_nodes": sum(whole), "hint_driven_nodes": sum(hinted),
            "hints_fewer": sum(h < w for h, w in pairs), "hints_equal": sum(h == w for h, w in pairs),
            "hints_more": sum(h > w for h, w in pairs)}


def _factory(sim: FleetSim, cluster: str, hour: int) -> autoscaler.PolicyFactory:
    """Fresh policies as the cluster builds them (cluster.py), seeded for this cluster and hour."""
    workload = sim.workloads[cluster]
    seed = [sim.plan.seed, zlib.crc32(cluster.encode()), hour]

    def make() -> Policy:
        return registry.create(sim.policy_name, PolicyContext(workload=workload, rng=np.random.default_rng(seed)))

    return make


__all__ = ["AUTOSCALERS", "AutoscalerComparison", "Observation"]
