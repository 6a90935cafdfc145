"""Random: a uniformly random feasible node, and a random usable GPU for a shared pod.

The lower bound of the paper's comparison: no packing, no fragmentation awareness.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core import gpu_selection
from gpuplace.core.arrays import IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.policies.default_steps import DefaultSteps
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "random"


class RandomFit(DefaultSteps):
    name = NAME

    def __init__(self, context: PolicyContext) -> None:
        self.rng = context.rng

    def score(self, snapshot: ClusterSnapshot, demand: Demand, candidates: IntArray) -> IntArray:
        scores = np.zeros(len(candidates), dtype=np.int64)  # (n_candidates,)
        scores[self.rng.integers(len(candidates))] = 100
        return scores

    def choose_gpus(self, snapshot: ClusterSnapshot, demand: Demand, node: int) -> tuple[int, ...]:
        return gpu_selection.random_fit(snapshot, demand, node, self.rng)


__all__ = ["NAME", "RandomFit"]
