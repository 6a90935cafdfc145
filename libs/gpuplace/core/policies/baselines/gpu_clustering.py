"""GpuClustering: keep pods of one request type together -- shared-GPU pods with shared-GPU pods,
k-GPU pods with k-GPU pods -- and, within a tier, prefer fuller nodes.

Tiers (the reference simulator's integer arithmetic, 25 points each, fuller node = more points
within the tier: 25 * (8000 - node's free milli-GPU) // 8000):
- 75-100: the node hosts only pods of this request type;
- 50-75: it hosts this type among others;
- 25-50: it hosts no GPU pod;
- 0-25: it hosts only other types.
A pod that needs no GPU scores 0 everywhere (first feasible node).
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.core.policies.baselines.scale import MAX_GPU_MILLI
from gpuplace.core.policies.default_steps import DefaultSteps
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "gpu-clustering"


class GpuClustering(DefaultSteps):
    name = NAME

    def score(self, snapshot: ClusterSnapshot, demand: Demand, candidates: IntArray) -> IntArray:
        if not demand.needs_gpu:
            return np.zeros(len(candidates), dtype=np.int64)
        shares = demand.share_on(snapshot)[candidates]  # (n_candidates,)
        kind = np.where((demand.gpu_count == 1) & (shares < MILLI_PER_GPU), 0, demand.gpu_count)  # kind_of()
        by_kind = snapshot.gpu_pods_by_kind[candidates]  # (n_candidates, max_gpus + 1)
        same = by_kind[np.arange(len(candidates)), kind] > 0
        kinds_present = (by_kind > 0).sum(axis=1)
        used = MAX_GPU_MILLI - snapshot.free_share_milli[candidates].sum(axis=1)
        fullness = np.sign(used) * (25 * np.abs(used) // MAX_GPU_MILLI)  # Go's truncating division
        tier = np.select([same & (kinds_present == 1), same, kinds_present == 0], [75, 50, 25], default=0)
        scores: IntArray = fullness + tier
        return scores


__all__ = ["GpuClustering", "NAME"]
