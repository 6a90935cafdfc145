"""The typical workload M: the most frequent task shapes and their renormalised frequencies p_m.

Weng et al., ATC'23, §4.1: fragmentation is measured against the tasks that actually arrive. A shape
is (CPU, per-GPU share, GPU count, allowed GPU models) -- and per-GPU memory for memory requests;
host memory is not part of it. Shapes are ranked by count (CPU-only shapes included), ties broken by
the larger shape first (the reference simulator's order); shapes are taken one at a time until they
cover >= `coverage_pct` of the tasks, and their frequencies are renormalised to sum to 1.
The float operations follow the reference simulator (count / total, then divided by the covered
fraction) so that FGD's integer scores come out the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuplace.core.arrays import BoolArray, FloatArray, IntArray
from gpuplace.core.demand import UNRESOLVABLE
from gpuplace.core.model import Pod
from gpuplace.core.snapshot import GpuType

ShapeKey = tuple[int, int, int, str, int]
"""(cpu_milli, share_milli or -1, gpu_count, allowed models joined by '|', memory_mib or -1)."""


@dataclass(frozen=True, eq=False)
class TypicalWorkload:
    """Shapes in rank order; arrays over shapes (n_shapes,) or shapes x GPU types (n_shapes, n_types)."""

    cpu_milli: IntArray
    gpu_count: IntArray
    share_milli_by_type: IntArray
    allowed_by_type: BoolArray
    probability: FloatArray
    keys: tuple[ShapeKey, ...]

    @property
    def n_shapes(self) -> int:
        return len(self.keys)


def shape_key(pod: Pod) -> ShapeKey:
    request = pod.gpu
    if not request.needs_gpu:
        return (pod.cpu_milli, 0, 0, "", -1)
    share = -1 if request.share_milli is None else request.share_milli
    memory = -1 if request.memory_mib is None else request.memory_mib
    return (pod.cpu_milli, share, request.count, "|".join(request.allowed_models), memory)


def typical_workload(
    pods: Sequence[Pod], gpu_types: Sequence[GpuType], coverage_pct: float = 95.0
) -> TypicalWorkload:
    """Validate the inputs, then rank and cut the shapes of `pods` (see the module docstring)."""
    if not pods:
        raise ValueError("the typical workload needs at least one pod")
    if not 0 < coverage_pct <= 100:
        raise ValueError(f"coverage_pct must be in (0, 100], got {coverage_pct}")
    counts = Counter(shape_key(p) for p in pods)
    return _typical_workload(counts, tuple(gpu_types), float(coverage_pct))


def _typical_workload(
    counts: Counter[ShapeKey], gpu_types: tuple[GpuType, ...], coverage_pct: float
) -> TypicalWorkload:
    """Assumes validated inputs (see typical_workload())."""
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    total = float(sum(counts.values()))
    expected = coverage_pct * total / 100.0
    covered, taken = 0.0, 0
    while covered < expected and taken < len(ranked):
        covered += float(ranked[taken][1])
        taken += 1
    fractions = [float(c) / total for _, c in ranked[:taken]]
    if taken < len(ranked):
        fractions = [f / (covered / total) for f in fractions]
    keys = tuple(k for k, _ in ranked[:taken])
    share, allowed = _resolve_shapes(keys, gpu_types)
    return TypicalWorkload(
        cpu_milli=np.array([k[0] for k in keys], dtype=np.int64),
        gpu_count=np.array([k[2] for k in keys], dtype=np.int64),
        share_milli_by_type=share,
        allowed_by_type=allowed,
        probability=np.array(fractions, dtype=np.float64),
        keys=keys,
    )


def _resolve_shapes(keys: tuple[ShapeKey, ...], gpu_types: tuple[GpuType, ...]) -> tuple[IntArray, BoolArray]:
    share = np.zeros((len(keys), len(gpu_types)), dtype=np.int64)  # (n_shapes, n_types)
    allowed = np.ones((len(keys), len(gpu_types)), dtype=bool)  # (n_shapes, n_types)
    for m, (_, share_milli, count, models, memory_mib) in enumerate(keys):
        if count == 0:
            continue
        names = set(models.split("|")) if models else set()
        for t, gpu_type in enumerate(gpu_types):
            allowed[m, t] = bool(gpu_type.model) and (not names or gpu_type.model in names)
            if share_milli >= 0:
                share[m, t] = share_milli
            elif gpu_type.memory_mib > 0:
                share[m, t] = min(1000, max(1, memory_mib * 1000 // gpu_type.memory_mib))
            else:
                share[m, t] = UNRESOLVABLE
    return share, allowed


__all__ = ["ShapeKey", "TypicalWorkload", "shape_key", "typical_workload"]
