"""DotProd (Tetris, SIGCOMM'14): prefer the node whose free [CPU, GPU] is least aligned with the
request -- the smallest dot product, each dimension normalised by the largest node (128 cores,
8 GPUs).

Score, as the reference simulator computes it (float operations in its order, then truncated):
int(100 * (1 - (free_cpu/128000 * cpu/128000 + free_gpu/8000 * gpu/8000) / 2)), where gpu is the
request's total milli-GPU and free_gpu the node's free share summed over its GPUs.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.policies.baselines.scale import MAX_CPU_MILLI, MAX_GPU_MILLI
from gpuplace.core.policies.default_steps import DefaultSteps
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "dotprod"


class DotProd(DefaultSteps):
    name = NAME

    def score(self, snapshot: ClusterSnapshot, demand: Demand, candidates: IntArray) -> IntArray:
        free_cpu = snapshot.cpu_free_milli[candidates] / MAX_CPU_MILLI  # (n_candidates,)
        free_gpu = snapshot.free_share_milli[candidates].sum(axis=1) / MAX_GPU_MILLI  # (n_candidates,)
        want_cpu = demand.cpu_milli / MAX_CPU_MILLI
        want_gpu = (demand.share_on(snapshot)[candidates] * demand.gpu_count) / MAX_GPU_MILLI
        dot = free_cpu * want_cpu + free_gpu * want_gpu
        scores: IntArray = np.trunc(100.0 * (1.0 - dot / 2.0)).astype(np.int64)
        return scores


__all__ = ["DotProd", "NAME"]
