"""Small fleets, many seeds, several arrival orders: where a policy's bad seeds show (issue 19).

The Alibaba traces are one large fleet (1,213 nodes) and one stationary mix in random order: a policy's mean over
ten seeds there says little about what it does on 50 nodes when the training jobs come after weeks of perception
pods. Each family here is a generated fleet and pod mix; each seed draws the fleet's node order and the pods, and
orders them one of ORDERS ways:
- `random`: as drawn (the paper's harness);
- `large-first` / `large-last`: jobs of >= LARGE_GPUS GPUs before / after everything else (stable otherwise);
- `bursts`: the large jobs in BURSTS groups at random places of the stream.
Pods are drawn until their GPU request reaches ARRIVE_TO_PCT of capacity, so every pod that arrives before the
100% mark is in the stream and the KPI -- the unallocated GPU % at 100% arrived (kpi.py: the paper's reading, or
the curve interpolated at the mark where one job steps over every row it would average) -- can be read; the run
stops there. A run that never came near the mark would report None and be counted apart (the generator makes
none). Every pod is placed where the policy says or dropped (no retry, no departures), as in simulator.py; FGD
gets the typical workload of the run's own pods, as the paper's harness gives it.

Families (FAMILIES):
- `v100-8gpu`: 50 nodes of 8 x V100 16 GiB; perception pods asking a GPU memory slice, CPU-only pods, training jobs
  of 1, 2, 4 and 8 whole GPUs (issue 19's fleet);
- `a100-4gpu`: 40 nodes of 4 x A100 40 GiB; perception slices, CPU-only pods, training jobs of 1, 2 and 4 GPUs;
- `two-models`: 24 nodes of 8 x A100 40 GiB and 16 of 8 x H100 80 GiB; perception slices on either model, training
  jobs that must run on H100 (4 and 8 GPUs) or on A100 (1 and 2 GPUs), and some that run on either.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from gpuplace.core.demand import Demand, nominal_share_milli, resolve
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.model import GpuRequest, Node, Pod
from gpuplace.core.policies import registry
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import typical_workload
from gpuplace.sim.kpi import unallocated_pct_at
from gpuplace.sim.simulator import shape_label

ORDERS = ("random", "large-first", "large-last", "bursts")
LARGE_GPUS = 4
BURSTS = 3
ARRIVE_TO_PCT = 101.0
"""Past the 100% mark, so that the KPI has an arrival on either side of it."""

V100, A100 = ("Tesla-V100-SXM2-16GB", 16_384), ("NVIDIA-A100-SXM4-40GB", 40_960)
H100 = ("NVIDIA-H100-80GB-HBM3", 81_559)


@dataclass(frozen=True)
class Shape:
    """A kind of pod in a family's mix, drawn with probability `weight` (normalised over the family)."""

    weight: float
    gpus: int = 0  # whole GPUs; 0 with `slice_gib` set: one GPU's memory slice; 0 without: CPU-only
    slice_gib: tuple[int, int] | None = None  # uniform range of the slice asked, GiB
    cpu: tuple[int, int] = (1_000, 1_000)  # uniform range, milli (rounded to 500)
    memory_gib: tuple[int, int] = (2, 2)  # host memory, GiB
    models: tuple[str, ...] = ()


@dataclass(frozen=True)
class Family:
    name: str
    nodes: tuple[tuple[int, int, tuple[str, int], int, int], ...]  # (count, GPUs, (model, MiB), CPU milli, GiB)
    mix: tuple[Shape, ...]

    @property
    def n_nodes(self) -> int:
        return sum(n[0] for n in self.nodes)


def _perception(weight: float, top_gib: int, models: tuple[str, ...] = ()) -> tuple[Shape, ...]:
    """Perception pods: detection/depth (2-6 GiB), SLAM/segmentation (3-12), BEV occupancy (10-top)."""
    return (Shape(0.45 * weight, slice_gib=(2, 6), cpu=(500, 2_000), memory_gib=(1, 4), models=models),
            Shape(0.40 * weight, slice_gib=(3, 12), cpu=(500, 2_000), memory_gib=(2, 4), models=models),
            Shape(0.15 * weight, slice_gib=(10, top_gib), cpu=(1_000, 2_000), memory_gib=(2, 8), models=models))


def _cpu_only(weight: float) -> Shape:
    return Shape(weight, cpu=(1_000, 8_000), memory_gib=(2, 16))


def _training(weight: float, gpus: int, cpu_per_gpu: int, models: tuple[str, ...] = ()) -> Shape:
    return Shape(weight, gpus=gpus, cpu=(gpus * cpu_per_gpu // 2, gpus * cpu_per_gpu),
                 memory_gib=(gpus * 16, gpus * 48), models=models)


FAMILIES = {f.name: f for f in (
    Family("v100-8gpu", ((50, 8, V100, 80_000, 512),),
           (*_perception(0.55, 16), _cpu_only(0.20), _training(0.12, 1, 8_000), _training(0.06, 2, 8_000),
            _training(0.04, 4, 8_000), _training(0.03, 8, 8_000))),
    Family("a100-4gpu", ((40, 4, A100, 64_000, 512),),
           (*_perception(0.55, 24), _cpu_only(0.20), _training(0.12, 1, 12_000), _training(0.08, 2, 12_000),
            _training(0.05, 4, 12_000))),
    Family("two-models", ((24, 8, A100, 128_000, 1024), (16, 8, H100, 192_000, 2048)),
           (*_perception(0.55, 24), _cpu_only(0.18), _training(0.10, 1, 12_000),
            _training(0.06, 1, 12_000, (A100[0],)), _training(0.04, 2, 12_000, (A100[0],)),
            _training(0.02, 2, 16_000, (H100[0],)), _training(0.02, 4, 16_000, (H100[0],)),
            _training(0.01, 8, 16_000, (H100[0],)))),
)}


@dataclass(frozen=True)
class Case:
    """One seeded run of a family: the nodes (in the run's order) and the pods in arrival order."""

    family: str
    seed: int
    order: str
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]


def case(family: Family, seed: int, order: str | None = None, scale: float = 1.0) -> Case:
    """The seed's fleet order and arrival stream; `order` defaults to ORDERS[seed % len(ORDERS)]; `scale`
    multiplies the node counts (at least 2 of each kind: --quick runs)."""
    order = ORDERS[seed % len(ORDERS)] if order is None else order
    if order not in ORDERS:
        raise ValueError(f"unknown arrival order {order!r}; known: {', '.join(ORDERS)}")
    rng = np.random.default_rng([seed, _stable_hash(family.name)])
    nodes = [Node.with_gpus(f"{family.name}-{kind}-{i:03d}", cpu_milli=cpu, memory_mib=gib * 1024, gpu_count=gpus,
                            gpu_model=model, gpu_memory_mib=model_mib)
             for kind, (count, gpus, (model, model_mib), cpu, gib) in enumerate(family.nodes)
             for i in range(max(2, round(count * scale)))]
    nodes = [nodes[i] for i in rng.permutation(len(nodes))]
    snapshot = ClusterSnapshot(nodes)
    capacity = snapshot.total_gpu_milli
    weights = np.array([s.weight for s in family.mix])
    pods: list[Pod] = []
    requested = 0
    while requested < capacity * ARRIVE_TO_PCT / 100:
        pod = _draw(family.mix[int(rng.choice(len(weights), p=weights / weights.sum()))], len(pods), rng)
        requested += nominal_share_milli(pod, snapshot)
        pods.append(pod)
    return Case(family.name, seed, order, tuple(nodes), tuple(_ordered(pods, order, rng)))


def _draw(shape: Shape, index: int, rng: np.random.Generator) -> Pod:
    cpu = int(rng.integers(shape.cpu[0], shape.cpu[1] + 1)) // 500 * 500 or 500
    memory = int(rng.integers(shape.memory_gib[0], shape.memory_gib[1] + 1)) * 1024
    if shape.gpus:
        gpu = GpuRequest(count=shape.gpus, share_milli=1000, allowed_models=shape.models)
    elif shape.slice_gib is not None:
        low, high = shape.slice_gib
        memory_mib = int(rng.integers(low * 1024, high * 1024 + 1))
        gpu = GpuRequest(count=1, memory_mib=memory_mib, allowed_models=shape.models)
    else:
        gpu = GpuRequest()
    return Pod(name=f"pod-{index:05d}", cpu_milli=cpu, memory_mib=memory, gpu=gpu)


def _ordered(pods: list[Pod], order: str, rng: np.random.Generator) -> list[Pod]:
    large = [p for p in pods if p.gpu.count >= LARGE_GPUS]
    rest = [p for p in pods if p.gpu.count < LARGE_GPUS]
    if order == "large-first":
        return large + rest
    if order == "large-last":
        return rest + large
    if order == "bursts":
        cuts = np.sort(rng.choice(len(rest) + 1, size=BURSTS))  # where each burst goes in the rest
        groups = np.array_split(np.arange(len(large)), BURSTS)
        out: list[Pod] = []
        start = 0
        for cut, group in zip(cuts, groups, strict=True):
            out += rest[start:cut] + [large[i] for i in group]
            start = int(cut)
        return out + rest[start:]
    return pods


@dataclass(frozen=True)
class Outcome:
    """What one (family, policy, seed) run reports (small, picklable)."""

    family: str
    policy: str
    seed: int
    order: str
    unallocated_pct_at_100: float | None
    """None: the arrivals never reached 100% (kpi.at); reported apart, never averaged in."""
    failed_by_shape: dict[str, int]
    arrivals: int
    seconds: float


def run_case(run: Case, policy: str) -> Outcome:
    """Place `run`'s pods in order with the named policy; the unallocated GPU % at 100% arrived."""
    started = time.perf_counter()
    snapshot = ClusterSnapshot(run.nodes)
    pods = run.pods
    placer = registry.create(policy, PolicyContext(workload=typical_workload(pods, snapshot.gpu_types),
                                                   rng=np.random.default_rng(run.seed)))
    arrived, allocated = np.zeros(len(pods) + 1, dtype=np.int64), np.zeros(len(pods) + 1, dtype=np.int64)
    demands: dict[tuple, Demand] = {}
    failed: Counter[str] = Counter()
    for step, pod in enumerate(pods, start=1):
        key = (pod.cpu_milli, pod.memory_mib, pod.gpu)
        demand = demands.get(key)
        if demand is None:
            demand = demands[key] = resolve(pod, snapshot)
        decision = decide(snapshot, demand, placer)
        allocated[step] = allocated[step - 1]
        if decision.scheduled:
            allocated[step] += sum(bind(snapshot, demand, decision).share_milli)
        else:
            failed[shape_label(pod)] += 1
        arrived[step] = arrived[step - 1] + nominal_share_milli(pod, snapshot)
    kpi = unallocated_pct_at(arrived, allocated, snapshot.total_gpus, 100)
    return Outcome(run.family, policy, run.seed, run.order, kpi, dict(failed), len(pods),
                   round(time.perf_counter() - started, 2))


def run_one(task: tuple[str, str, int, str | None, float]) -> Outcome:
    """(family, policy, seed, order or None, scale) -> Outcome; the unit a process pool maps over."""
    family, policy, seed, order, scale = task
    return run_case(case(FAMILIES[family], seed, order, scale), policy)


def _stable_hash(text: str) -> int:
    return sum((i + 1) * ord(c) for i, c in enumerate(text))


__all__ = ["A100", "ARRIVE_TO_PCT", "BURSTS", "Case", "FAMILIES", "Family", "H100", "LARGE_GPUS", "ORDERS", "Outcome",
           "Shape", "V100", "case", "run_case", "run_one"]
