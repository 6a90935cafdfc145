"""BestFit: the node with the least weighted leftover after placement,
0.5 * (free CPU - request) / 128 cores + 0.5 * (free GPU - request) / 8 GPUs.

As in the reference simulator: score = int((1 - leftover) * 100), then min-max normalised to
[0, 100] with integer division (which keeps the ranking; it is reproduced so ties stay the same).
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.policies.baselines.scale import MAX_CPU_MILLI, MAX_GPU_MILLI
from gpuplace.core.policies.default_steps import DefaultSteps
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "bestfit"


class BestFit(DefaultSteps):
    name = NAME

    def score(self, snapshot: ClusterSnapshot, demand: Demand, candidates: IntArray) -> IntArray:
        cpu_left = (snapshot.cpu_free_milli[candidates] - demand.cpu_milli) / MAX_CPU_MILLI * 0.5
        want_gpu = demand.share_on(snapshot)[candidates] * demand.gpu_count
        gpu_left = (snapshot.free_share_milli[candidates].sum(axis=1) - want_gpu) / MAX_GPU_MILLI * 0.5
        raw = np.trunc((1.0 - (cpu_left + gpu_left)) * 100.0).astype(np.int64)  # (n_candidates,)
        return _normalise(raw)


def _normalise(scores: IntArray) -> IntArray:
    """Min-max to [0, 100] with truncating integer division (the reference's NormalizeScore)."""
    low, high = int(scores.min()), int(scores.max())
    if high == low:
        return np.zeros_like(scores)
    return (scores - low) * 100 // (high - low)


__all__ = ["BestFit", "NAME"]
