"""The workload arriving now: decayed frequencies of the request shapes seen, one observation per pod.

Fragmentation is measured against the tasks that will arrive (Weng et al., ATC'23, §4.1). A trace-wide snapshot
of shapes is right only while the mix stays what it was; a placement service sees pods one at a time, so the
policy counts each pod's shape as it scores it (a pod scored again after a cycle that could not place it counts
again: it is still demand) and lets old observations fade with a half-life in pods. Nothing about a trace is
assumed, and no snapshot is needed to start: the first pod is the first estimate.

A shape is (CPU, GPU count, per-GPU share or per-GPU memory, allowed models), as in workload.py, with per-GPU
memory rounded up to MEMORY_BUCKET_MIB so that memory requests (every pod asking a slightly different amount)
fall into a bounded set. Every shape is kept (not FGD's 95% cut by count: a rare 8-GPU shape is 8% of the
demand of a thousand tasks), up to MAX_SHAPES by weight. Host memory is tracked as a mean per shape.

`drift()` is the total-variation distance between the live estimate and the one last built, less what sampling
noise alone would give (an estimate from N effective pods is off by about 0.5 sum_m sqrt(2 p_m (1 - p_m) /
(pi N)) in total variation, 0.1 for the trace's 90 shapes at the default half-life). The policy rebuilds its
measure when that passes a threshold: a steady mix is not rebuilt over noise (each rebuild re-scores every node
state), a changing one is followed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuplace.core.arrays import BoolArray, FloatArray, IntArray
from gpuplace.core.demand import UNRESOLVABLE, Demand, RequestKey
from gpuplace.core.model import MILLI_PER_GPU, GpuRequest
from gpuplace.core.snapshot import GpuType
from gpuplace.core.workload import TypicalWorkload

MEMORY_BUCKET_MIB = 1024
"""GiB buckets: every memory shape costs W a column per node state scored, and perception pods asking their own MiB
make four times as many shapes in 256 MiB buckets. On 1,000 nodes of mixed robotics GPUs (`gpuplace bench placement
--nodes 1000 --pods robotics`), 1024 against 256 doubles gpuplace's decisions/s on memory requests (median 118 vs 58,
run side by side). The price: W sees a request up to 1 GiB larger than asked (placement itself uses the exact MiB).
The robotics scenario asks whole GiB, so its results do not move."""
MAX_SHAPES = 128
MIN_PROBABILITY = 1e-4
"""Shapes rarer than this are dropped from the built workload (they still count in the estimate)."""

ShapeKey = tuple[int, int, int, int, tuple[str, ...]]
"""(cpu_milli, gpu_count, share_milli or -1, per-GPU memory bucket in MiB or -1, allowed models)."""


@dataclass(frozen=True, eq=False)
class ArrivingWorkload:
    """A built estimate: shapes as a TypicalWorkload, plus the mean host memory of each shape, (n_shapes,), and the
    part of each shape's probability that pods seen gave it (the rest is the prior), (n_shapes,)."""

    shapes: TypicalWorkload
    memory_mib: FloatArray
    observed_probability: FloatArray


class ShapeEstimate:
    def __init__(self, half_life_pods: float, *, seen_floor_pods: float = 0.0) -> None:
        if not half_life_pods > 0:
            raise ValueError(f"half_life_pods must be > 0, got {half_life_pods}")
        if seen_floor_pods < 0:
            raise ValueError(f"seen_floor_pods must be >= 0, got {seen_floor_pods}")
        self._decay = 2.0 ** (-1.0 / half_life_pods)
        self._scale = 1.0  # weights are stored divided by the decay applied so far (lazy decay)
        self._weight: dict[ShapeKey, float] = {}
        self._sum, self._sum_sq = 0.0, 0.0  # of the observations' decayed weights: N_eff = sum^2 / sum_sq
        self._memory: dict[ShapeKey, float] = {}  # weight x host memory, same scale
        self._prior: dict[ShapeKey, float] = {}  # pseudo-pods that never decay (set_prior)
        self._seen_floor = seen_floor_pods
        self._built: dict[ShapeKey, float] = {}

    @property
    def empty(self) -> bool:
        return not self._weight and not self._prior

    def set_prior(self, pseudo_pods: dict[ShapeKey, float]) -> None:
        """Shapes expected before (or without) being seen, each as that many pods that never decay.

        They are the estimate until pods arrive and stay a floor under it after: a prior shape and the seen pods
        that cover it weigh max(pseudo_pods, seen) together (prior_top_up), so a shape of the prior keeps its
        pseudo-pods however long it goes unseen, and adds nothing once seen more often. Replaces the previous prior.
        """
        if any(not w >= 0 for w in pseudo_pods.values()):
            raise ValueError("prior weights must be >= 0")
        self._prior = {k: float(w) for k, w in pseudo_pods.items() if w > 0}

    def observe(self, demand: Demand) -> None:
        """Count one arriving pod of `demand`'s shape."""
        self._scale /= self._decay
        self._sum = self._sum * self._decay + 1.0
        self._sum_sq = self._sum_sq * self._decay**2 + 1.0
        if self._scale > 1e100:
            self._rescale()
        shape = _shape_of(demand.request_key)
        self._weight[shape] = self._weight.get(shape, 0.0) + self._scale
        self._memory[shape] = self._memory.get(shape, 0.0) + self._scale * demand.memory_mib

    def drift(self) -> float:
        """Total-variation distance between the live estimate and the last build, beyond sampling noise
        (1.0 before any build)."""
        if not self._built:
            return 1.0
        live = self._probabilities()
        keys = live.keys() | self._built.keys()
        distance = 0.5 * sum(abs(live.get(k, 0.0) - self._built.get(k, 0.0)) for k in keys)
        if not self._sum_sq:  # the prior alone: nothing sampled
            return distance
        pods = self._sum**2 / self._sum_sq  # effective number of observations
        # only the observed part is a sample: its shapes' shares q of it are noisy, scaled by its share f of all
        observed = self._observed()
        f = sum(observed.values())
        noise = 0.5 * sum(f * math.sqrt(2.0 * q * (1.0 - q) / (math.pi * pods))
                          for q in (p / f for p in observed.values())) if f > 0 else 0.0
        return max(0.0, distance - noise)

    def build(self, gpu_types: tuple[GpuType, ...]) -> ArrivingWorkload:
        """The estimate as arrays resolved against `gpu_types`; becomes the reference for drift()."""
        if self.empty:
            raise ValueError("no shape observed yet")
        self._built = self._probabilities()
        kept = sorted(self._built.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_SHAPES]
        kept = [kv for kv in kept if kv[1] >= MIN_PROBABILITY] or kept[:1]
        keys = tuple(k for k, _ in kept)
        probability = np.array([p for _, p in kept])
        share, allowed = _resolve(keys, gpu_types)
        memory = np.array([self._memory[k] / self._weight[k] if self._weight.get(k) else 0.0 for k in keys])
        observed = self._observed()
        observed_probability = np.array([observed.get(k, 0.0) for k in keys])
        shapes = TypicalWorkload(
            cpu_milli=np.array([k[0] for k in keys], dtype=np.int64),
            gpu_count=np.array([k[1] for k in keys], dtype=np.int64),
            share_milli_by_type=share, allowed_by_type=allowed,
            probability=probability / probability.sum(),
            keys=tuple((k[0], k[2] if k[1] else 0, k[1], "|".join(k[4]), k[3]) for k in keys),
        )
        return ArrivingWorkload(shapes, memory, observed_probability / probability.sum())

    def _pods(self) -> dict[ShapeKey, float]:
        """Each shape's weight in pods: decayed observations, a seen shape never below the floor, plus what the
        prior adds beyond the pods seen of its shape (prior_top_up)."""
        pods = {k: max(w / self._scale, self._seen_floor) for k, w in self._weight.items()}
        for k, w in prior_top_up(self._prior, pods).items():
            pods[k] = pods.get(k, 0.0) + w
        return pods

    def _observed(self) -> dict[ShapeKey, float]:
        """The part of each shape's probability the pods seen gave it (floor included)."""
        pods = self._pods()
        total = sum(pods.values())
        return {k: max(w / self._scale, self._seen_floor) / total for k, w in self._weight.items()}

    def _probabilities(self) -> dict[ShapeKey, float]:
        pods = self._pods()
        total = sum(pods.values())
        return {k: w / total for k, w in pods.items()}

    def _rescale(self) -> None:
        self._weight = {k: w / self._scale for k, w in self._weight.items()}
        self._memory = {k: m / self._scale for k, m in self._memory.items()}
        self._scale = 1.0


def prior_top_up(prior: dict[ShapeKey, float], seen: dict[ShapeKey, float]) -> dict[ShapeKey, float]:
    """Pseudo-pods each prior shape still adds: its own less the pods `seen` of shapes that cover it, never < 0.

    The prior is a floor under the estimate, not an addition to it: a prior shape and the pods of its kind seen
    weigh max(prior, seen) together. Added on top, the prior's zero-CPU whole-GPU shapes (about 5% of the
    estimate on the Alibaba `default` trace, where whole-GPU pods of every count arrive from the start) told W
    that free GPUs on nodes out of CPU were still usable: `gpuplace sim --pods default --seeds 42-51` 3.90
    against 3.86 without a prior. As a floor it is gone once the shapes it stands for are seen that often, and
    whole now where they are not (two-models family, large-last order: 8-GPU jobs come last).

    A seen shape covers a prior one of the same GPU count and allowed models that overlap (either side may allow
    any model) that asks whole GPUs as it does (a share of >= 1000m or none, no memory slice), or else the same
    share and memory; its CPU does not matter (the prior's shapes ask none).
    """
    if not prior:
        return {}
    by_kind: dict[tuple[int, int, int], list[tuple[tuple[str, ...], float]]] = {}
    for key, pods in seen.items():
        if key[1] == 0:
            continue
        by_kind.setdefault(_kind(key), []).append((key[4], pods))
    top_up: dict[ShapeKey, float] = {}
    for key, pods in prior.items():
        models = set(key[4])
        covered = sum(w for seen_models, w in by_kind.get(_kind(key), ())
                      if not models or not seen_models or models.intersection(seen_models))
        top_up[key] = max(0.0, pods - covered)
    return top_up


def _kind(key: ShapeKey) -> tuple[int, int, int]:
    """(GPU count, share, memory bucket), whole GPUs as (count, 1000, -1) however they are asked."""
    _, count, share, memory, _ = key
    if memory == -1 and (share == -1 or share >= MILLI_PER_GPU):
        return (count, MILLI_PER_GPU, -1)
    return (count, share, memory)


def hostable_shapes(gpu_counts: IntArray, models: tuple[str, ...], pseudo_pods: float) -> dict[ShapeKey, float]:
    """The whole-GPU shapes a cluster could host, `pseudo_pods` shared by each GPU model's: per model (its nodes'
    GPU counts `gpu_counts` and GPU models `models`, one per node), one GPU, every power of two up to its largest
    node, and every node's full count (a whole node), asking no CPU. With one model the shapes allow any model."""
    by_model: dict[str, set[int]] = {}
    for count, model in zip(gpu_counts, models, strict=True):
        if count > 0 and model:
            by_model.setdefault(model, set()).add(int(count))
    shapes: dict[ShapeKey, float] = {}
    for model, counts in by_model.items():
        largest = max(counts)
        counts |= {2**i for i in range(largest.bit_length()) if 2**i <= largest}
        allowed = (model,) if len(by_model) > 1 else ()
        for c in sorted(counts):
            shapes[(0, c, MILLI_PER_GPU, -1, allowed)] = pseudo_pods / len(by_model)
    return shapes


def declared_shapes(requests: tuple[GpuRequest, ...], pseudo_pods: float) -> dict[ShapeKey, float]:
    """The operator's expected GPU requests (PolicyContext.expected_shapes) as prior shapes asking no CPU."""
    shapes: dict[ShapeKey, float] = {}
    for request in requests:
        if not request.needs_gpu:
            continue
        memory = -1 if request.memory_mib is None else _bucket(request.memory_mib)
        share = -1 if request.share_milli is None else request.share_milli
        key = (0, request.count, share, memory, tuple(request.allowed_models))
        shapes[key] = shapes.get(key, 0.0) + pseudo_pods
    return shapes


def prior_shapes(hostable: dict[ShapeKey, float], declared: dict[ShapeKey, float]) -> dict[ShapeKey, float]:
    """The prior: every declared shape, and the hostable ones of the GPU counts no declared shape has.

    A declaration says what pods of its GPU count ask, models included; beside it, hostable_shapes' guess of one
    such shape per GPU model would keep nodes whole for pods the operator says never come (the fleet's V100 nodes
    kept whole for 8-GPU jobs that ask A100 and up, issue 18)."""
    counts = {key[1] for key in declared}
    return {**{key: pods for key, pods in hostable.items() if key[1] not in counts}, **declared}


def _bucket(memory_mib: int) -> int:
    return -(-memory_mib // MEMORY_BUCKET_MIB) * MEMORY_BUCKET_MIB


def _shape_of(request_key: RequestKey) -> ShapeKey:
    """From Demand.request_key: (cpu, memory, count, share or None, memory per GPU or None, models)."""
    cpu, _, count, share, gpu_memory, models = request_key
    if count == 0:
        return (cpu, 0, 0, -1, ())
    return (cpu, count, -1 if share is None else share, -1 if gpu_memory is None else _bucket(gpu_memory), models)


def _resolve(keys: tuple[ShapeKey, ...], gpu_types: tuple[GpuType, ...]) -> tuple[IntArray, BoolArray]:
    """Per-GPU share and access of each shape on each GPU type, (n_shapes, n_types) each (as demand.py resolves)."""
    share = np.zeros((len(keys), len(gpu_types)), dtype=np.int64)
    allowed = np.ones((len(keys), len(gpu_types)), dtype=bool)
    for m, (_, count, share_milli, memory_mib, models) in enumerate(keys):
        if count == 0:
            continue
        for t, gpu_type in enumerate(gpu_types):
            allowed[m, t] = bool(gpu_type.model) and (not models or gpu_type.model in models)
            if share_milli >= 0:
                share[m, t] = share_milli
            elif gpu_type.memory_mib > 0:
                share[m, t] = min(MILLI_PER_GPU, max(1, memory_mib * MILLI_PER_GPU // gpu_type.memory_mib))
            else:
                share[m, t] = UNRESOLVABLE
    return share, allowed


__all__ = [
    "ArrivingWorkload", "MAX_SHAPES", "MEMORY_BUCKET_MIB", "MIN_PROBABILITY", "ShapeEstimate", "ShapeKey",
    "declared_shapes", "hostable_shapes", "prior_shapes", "prior_top_up",
]
