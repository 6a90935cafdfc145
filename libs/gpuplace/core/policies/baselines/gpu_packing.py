"""GpuPacking: fill GPUs already in use before opening new ones, and new GPUs on used nodes before
idle nodes (smaller idle nodes first).

Tiers, as the reference simulator scores them (higher is better; the GPUs the pod would take are
the k usable ones with the least free share):
- 50-100: they are all partly used: 100 - (sum of their free share in %) // 10, at least 50;
- 33-50: some are fully free but the node is in use: 50 - (fully free GPUs taken), at least 33;
- 0-33: the node's GPUs are all free: max(33 - its GPU count, its GPU count).
A pod that needs no GPU scores 0 everywhere (first feasible node).
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.core.policies.default_steps import DefaultSteps
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "gpu-packing"


class GpuPacking(DefaultSteps):
    name = NAME

    def score(self, snapshot: ClusterSnapshot, demand: Demand, candidates: IntArray) -> IntArray:
        if not demand.needs_gpu:
            return np.zeros(len(candidates), dtype=np.int64)
        free = snapshot.free_share_milli[candidates]  # (n_candidates, max_gpus)
        exists = snapshot.gpu_exists[candidates]
        gpu_count = snapshot.gpu_count[candidates]
        fully_free = ((free == MILLI_PER_GPU) & exists).sum(axis=1)
        share = demand.share_on(snapshot)[candidates][:, None]
        eligible = np.where(exists & (free >= share), free, 2 * MILLI_PER_GPU)
        taken = np.sort(eligible, axis=1)[:, : demand.gpu_count]  # least free first, (n_candidates, k)
        free_taken = (taken == MILLI_PER_GPU).sum(axis=1)
        used_gpu_tier = np.maximum(100 - (taken * 100 // MILLI_PER_GPU).sum(axis=1) // 10, 50)
        new_gpu_tier = np.maximum(50 - free_taken, 33)
        idle_node_tier = np.maximum(33 - fully_free, fully_free)
        return np.select([fully_free == gpu_count, free_taken > 0], [idle_node_tier, new_gpu_tier],
                         default=used_gpu_tier)


__all__ = ["GpuPacking", "NAME"]
