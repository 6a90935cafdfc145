"""Small fleets, many seeds, several arrival orders: where a policy's bad seeds show (issue 19).

The Alibaba traces are one large fleet (1,213 nodes) and one stationary mix in random order: a policy's mean over
ten seeds there says little about what it does on 50 nodes when the training jobs come after weeks of perception
pods. Each family here is a generated fleet and pod mix; each seed draws the fleet's node order and the pods, and
orders them one of ORDERS ways:
- `random`: as drawn (the paper's harness);
- `large-first` / `large-last`: jobs of >= LARGE_GPUS GPUs before / after everything else (stable otherwise);
- `bursts`: the large jobs in BURSTS groups at random places of the stream;
- `waves` (issue 39): whole-GPU jobs and the rest in WAVES alternating phases each (a day of inference, a night of
  training), each phase in drawn order;
- `cpu-heavy-first` (issue 39): the quarter of the pods that ask the most CPU per GPU asked (CPU-only pods first of
  all) before the rest, so that CPU runs short while GPUs are still free.
The first three families draw the first four orders (seed % 4, as in issue 19); the issue-39 families all six.
Pods are drawn until their GPU request reaches ARRIVE_TO_PCT of capacity, so every pod that arrives before the
100% mark is in the stream and the KPI -- the unallocated GPU % at 100% arrived (kpi.py: the paper's reading, or
the curve interpolated at the mark where one job steps over every row it would average) -- can be read; the run
stops there. A run that never came near the mark would report None and be counted apart (the generator makes
none). Every pod is placed where the policy says or dropped (no retry, no departures), as in simulator.py; FGD
gets the typical workload of the run's own pods, as the paper's harness gives it.

FGD is told the mix of the run it is placing, gpuplace is not: it learns it from the pods it has placed, over a
prior of the whole-GPU shapes the fleet could host. DECLARED (`gpuplace-declared`) is gpuplace told what an operator
could declare (PolicyContext.expected_shapes, GPUPLACE_EXPECTED_SHAPES in the service): the whole-GPU requests of
the run -- GPU count and allowed models, not how often each comes, so less than FGD is told. It shows how much of a
gap to FGD is information and how much placement (issue 39).

Families (FAMILIES):
- `v100-8gpu`: 50 nodes of 8 x V100 16 GiB; perception pods asking a GPU memory slice, CPU-only pods, training jobs
  of 1, 2, 4 and 8 whole GPUs (issue 19's fleet);
- `a100-4gpu`: 40 nodes of 4 x A100 40 GiB; perception slices, CPU-only pods, training jobs of 1, 2 and 4 GPUs;
- `two-models`: 24 nodes of 8 x A100 40 GiB and 16 of 8 x H100 80 GiB; perception slices on either model, training
  jobs that must run on H100 (4 and 8 GPUs) or on A100 (1 and 2 GPUs), and some that run on either.
Issue 39's families: small fleets of three GPU models with different memory sizes on nodes of 2, 4 and 8 GPUs,
96 to 200 GPUs, none of which the policy was tuned on:
- `mixed-96`: 8 x 2 T4 16 GiB, 8 x 4 A100 40 GiB, 6 x 8 H100 80 GiB (96 GPUs); slices, CPU-only pods, training
  jobs of 1 and 2 GPUs anywhere, 4 on A100 or H100, 8 on H100;
- `mixed-200`: 20 x 2 V100 16 GiB, 16 x 4 A10 24 GiB, 12 x 8 A100 40 GiB (200 GPUs); the same kinds of pods;
- `cpu-heavy-144`: 12 x 2 T4, 10 x 4 A100, 10 x 8 H100 (144 GPUs) with 14 cores per GPU, and pods that ask up to
  16 cores per GPU, perception pods 2-8 cores, a quarter of the pods CPU-only: CPU runs out before GPU;
- `slices-128`: 8 x 2 T4, 8 x 4 A10, 10 x 8 A100 (128 GPUs); three quarters of the pods GPU-memory slices;
- `cpu-slices-160`: 16 x 2 V100, 8 x 4 A100, 12 x 8 H100 (160 GPUs) with 10 cores per GPU, perception pods that
  ask 2-12 cores for their slice: slices and CPU both scarce.
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

DECLARED = "gpuplace-declared"
ORDERS = ("random", "large-first", "large-last", "bursts", "waves", "cpu-heavy-first")
FIRST_ORDERS = ORDERS[:4]
"""The orders of issue 19's families (seed % 4 picks one, so their seeds stay what they were)."""
LARGE_GPUS = 4
BURSTS = 3
WAVES = 4
CPU_HEAVY_PART = 0.25
ARRIVE_TO_PCT = 101.0
"""Past the 100% mark, so that the KPI has an arrival on either side of it."""

V100, A100 = ("Tesla-V100-SXM2-16GB", 16_384), ("NVIDIA-A100-SXM4-40GB", 40_960)
H100 = ("NVIDIA-H100-80GB-HBM3", 81_559)
T4, A10 = ("Tesla-T4", 15_360), ("NVIDIA-A10", 23_028)


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
    orders: tuple[str, ...] = FIRST_ORDERS  # seed % len(orders) picks the seed's arrival order

    @property
    def n_nodes(self) -> int:
        return sum(n[0] for n in self.nodes)


def _perception(weight: float, top_gib: int, models: tuple[str, ...] = (),
                cpu: tuple[int, int] = (500, 2_000)) -> tuple[Shape, ...]:
    """Perception pods: detection/depth (2-6 GiB), SLAM/segmentation (3-12), BEV occupancy (10-top); `cpu` the
    range of the first two (BEV asks at least 1 core)."""
    return (Shape(0.45 * weight, slice_gib=(2, 6), cpu=cpu, memory_gib=(1, 4), models=models),
            Shape(0.40 * weight, slice_gib=(3, 12), cpu=cpu, memory_gib=(2, 4), models=models),
            Shape(0.15 * weight, slice_gib=(10, top_gib), cpu=(max(cpu[0], 1_000), cpu[1]), memory_gib=(2, 8),
                  models=models))


def _cpu_only(weight: float, top_milli: int = 8_000) -> Shape:
    return Shape(weight, cpu=(1_000, top_milli), memory_gib=(2, 16))


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
    *(Family(name, nodes, mix, ORDERS) for name, nodes, mix in (
        ("mixed-96", ((8, 2, T4, 32_000, 256), (8, 4, A100, 64_000, 512), (6, 8, H100, 128_000, 1024)),
         (*_perception(0.50, 14), _cpu_only(0.16), _training(0.16, 1, 12_000), _training(0.08, 2, 12_000),
          _training(0.06, 4, 12_000, (A100[0], H100[0])), _training(0.04, 8, 12_000, (H100[0],)))),
        ("mixed-200", ((20, 2, V100, 32_000, 256), (16, 4, A10, 64_000, 512), (12, 8, A100, 128_000, 1024)),
         (*_perception(0.50, 14), _cpu_only(0.16), _training(0.16, 1, 12_000), _training(0.08, 2, 12_000),
          _training(0.06, 4, 12_000, (A10[0], A100[0])), _training(0.04, 8, 12_000, (A100[0],)))),
        ("cpu-heavy-144", ((12, 2, T4, 28_000, 256), (10, 4, A100, 56_000, 512), (10, 8, H100, 112_000, 1024)),
         (*_perception(0.40, 14, cpu=(2_000, 8_000)), _cpu_only(0.25, 16_000), _training(0.18, 1, 16_000),
          _training(0.09, 2, 16_000), _training(0.05, 4, 16_000, (A100[0], H100[0])),
          _training(0.03, 8, 16_000, (H100[0],)))),
        ("slices-128", ((8, 2, T4, 32_000, 256), (8, 4, A10, 64_000, 512), (10, 8, A100, 128_000, 1024)),
         (*_perception(0.75, 14), _cpu_only(0.10), _training(0.08, 1, 12_000), _training(0.04, 2, 12_000),
          _training(0.03, 4, 12_000, (A10[0], A100[0])))),
        ("cpu-slices-160", ((16, 2, V100, 20_000, 256), (8, 4, A100, 40_000, 512), (12, 8, H100, 80_000, 1024)),
         (*_perception(0.60, 14, cpu=(2_000, 12_000)), _cpu_only(0.15), _training(0.12, 1, 8_000),
          _training(0.06, 2, 8_000), _training(0.04, 4, 8_000, (A100[0], H100[0])),
          _training(0.03, 8, 8_000, (H100[0],)))),
    )),
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
    """The seed's fleet order and arrival stream; `order` defaults to the family's orders[seed % len(orders)];
    `scale` multiplies the node counts (at least 2 of each kind: --quick runs)."""
    order = family.orders[seed % len(family.orders)] if order is None else order
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
    return Case(family.name, seed, order, tuple(nodes), tuple(_ordered(pods, order, rng, snapshot)))


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


def _ordered(pods: list[Pod], order: str, rng: np.random.Generator, snapshot: ClusterSnapshot) -> list[Pod]:
    if order == "waves":
        return _waves(pods)
    if order == "cpu-heavy-first":
        return _cpu_heavy_first(pods, snapshot)
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


def _waves(pods: list[Pod]) -> list[Pod]:
    """The rest and the whole-GPU jobs in WAVES alternating phases each, the rest first; drawn order inside."""
    whole = [p for p in pods if p.gpu.count and p.gpu.memory_mib is None]
    rest = [p for p in pods if not (p.gpu.count and p.gpu.memory_mib is None)]
    out: list[Pod] = []
    for part_rest, part_whole in zip(np.array_split(np.arange(len(rest)), WAVES),
                                     np.array_split(np.arange(len(whole)), WAVES), strict=True):
        out += [rest[i] for i in part_rest] + [whole[i] for i in part_whole]
    return out


def _cpu_heavy_first(pods: list[Pod], snapshot: ClusterSnapshot) -> list[Pod]:
    """The CPU_HEAVY_PART of the pods asking the most CPU per milli-GPU (CPU-only ones first) before the rest;
    stable otherwise."""
    per_gpu = np.array([p.cpu_milli / max(nominal_share_milli(p, snapshot), 1) if p.gpu.needs_gpu else np.inf
                        for p in pods])
    first = np.argsort(-per_gpu, kind="stable")[: round(CPU_HEAVY_PART * len(pods))]
    chosen = np.zeros(len(pods), dtype=bool)
    chosen[first] = True
    return [p for p, c in zip(pods, chosen, strict=True) if c] + [p for p, c in zip(pods, chosen, strict=True) if not c]


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
    placer = registry.create("gpuplace" if policy == DECLARED else policy, PolicyContext(
        workload=typical_workload(pods, snapshot.gpu_types), rng=np.random.default_rng(run.seed),
        expected_shapes=whole_gpu_shapes(pods) if policy == DECLARED else ()))
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


def whole_gpu_shapes(pods: tuple[Pod, ...]) -> tuple[GpuRequest, ...]:
    """The distinct whole-GPU requests among `pods` (count and allowed models), in a stable order."""
    shapes = {GpuRequest(count=p.gpu.count, share_milli=1000, allowed_models=p.gpu.allowed_models)
              for p in pods if p.gpu.count and p.gpu.memory_mib is None}
    return tuple(sorted(shapes, key=lambda r: (r.count, r.allowed_models)))


def run_one(task: tuple[str, str, int, str | None, float]) -> Outcome:
    """(family, policy, seed, order or None, scale) -> Outcome; the unit a process pool maps over."""
    family, policy, seed, order, scale = task
    return run_case(case(FAMILIES[family], seed, order, scale), policy)


def _stable_hash(text: str) -> int:
    return sum((i + 1) * ord(c) for i, c in enumerate(text))


__all__ = ["A10", "A100", "ARRIVE_TO_PCT", "BURSTS", "CPU_HEAVY_PART", "Case", "DECLARED", "FAMILIES", "FIRST_ORDERS",
           "Family", "H100", "LARGE_GPUS", "ORDERS", "Outcome", "Shape", "T4", "V100", "WAVES", "case", "run_case",
           "run_one", "whole_gpu_shapes"]
