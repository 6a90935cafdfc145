"""Exclusive: one pod per GPU, the way whole-GPU requests (`nvidia.com/gpu: 1`) are placed.

The baseline that never shares: a GPU pod goes only on a GPU nothing else holds, so co-runners can
never slow it down, and every other pod's slice of GPU memory is wasted capacity. Among nodes with
an idle GPU it takes the smallest GPU that fits the pod's memory (the most pods this baseline can
place), then the node with the fewest idle GPUs (whole GPUs stay free on emptier nodes); ties go to
the first node. CPU-only pods are placed as by the default steps.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import BoolArray, FloatArray, IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.filters.gpu_fit import USABLE
from gpuplace.core.framework.interface import Code, Status
from gpuplace.core.framework.verdicts import CycleState, Explained, Verdict, distinct
from gpuplace.core.gpu_usable import usable_gpus
from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.core.policies.default_steps import DefaultSteps
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "exclusive"


def idle_gpus(snapshot: ClusterSnapshot, rows: slice = slice(None)) -> BoolArray:
    """GPUs nothing holds: all share and all memory free, (n_rows, max_gpus)."""
    idle: BoolArray = (snapshot.gpu_exists[rows] & (snapshot.free_share_milli[rows] == MILLI_PER_GPU)
                       & (snapshot.free_memory_mib[rows] == snapshot.gpu_memory_mib[rows, None]))
    return idle


class Exclusive(DefaultSteps):
    name = NAME

    def verdicts(self, state: CycleState) -> list[Verdict]:
        """The standard chain, then: enough idle GPUs among those with room (after the chain, so a node's
        reason is the chain's when it fails both)."""
        chain = super().verdicts(state)
        snapshot, demand = state.snapshot, state.demand
        if not demand.needs_gpu:
            return chain
        idle = idle_gpus(snapshot)
        usable = state.memo(USABLE, lambda: usable_gpus(snapshot, demand))
        enough: BoolArray = (idle & usable).sum(axis=1) >= demand.gpu_count

        def explain(rows: IntArray) -> Explained:
            count = idle[rows].sum(axis=1)
            first, which = distinct(count)
            return [Status(Code.UNSCHEDULABLE, (
                f"{count[i]} idle GPU(s), the pod needs {demand.gpu_count} (exclusive: one pod per GPU)",), self.name)
                for i in first], which

        return [*chain, Verdict(self.name, enough, explain)]

    def score(self, snapshot: ClusterSnapshot, demand: Demand, candidates: IntArray) -> FloatArray:
        if not demand.needs_gpu:
            return np.zeros(len(candidates))
        leftover_mib = snapshot.gpu_memory_mib[candidates] - demand.gpu_memory_on(snapshot)[candidates]
        idle = idle_gpus(snapshot)[candidates].sum(axis=1)  # (n_candidates,)
        scores: FloatArray = -(leftover_mib.astype(np.float64) + idle / (snapshot.max_gpus + 1.0))
        return scores

    def choose_gpus(self, snapshot: ClusterSnapshot, demand: Demand, node: int) -> tuple[int, ...]:
        if not demand.needs_gpu:
            return ()
        rows = slice(node, node + 1)
        free = np.flatnonzero((idle_gpus(snapshot, rows) & usable_gpus(snapshot, demand, rows))[0])
        if len(free) < demand.gpu_count:
            raise ValueError(f"node {snapshot.node_names[node]} has {len(free)} idle GPU(s), needs {demand.gpu_count}")
        return tuple(int(i) for i in free[: demand.gpu_count])


__all__ = ["Exclusive", "NAME", "idle_gpus"]
