"""Which of a node's GPUs could take one of a pod's GPU requests: the mask GpuFit filters with, and what GPU
selection, topology and the policies choose among. Its own module, below filters/, so that the modules the
filtering framework uses (gpu_selection, topology) need nothing of filters/ (no import cycle)."""

from __future__ import annotations

from gpuplace.core.arrays import BoolArray, IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.snapshot import ClusterSnapshot


def usable_gpus(snapshot: ClusterSnapshot, demand: Demand, rows: slice | IntArray = slice(None)) -> BoolArray:
    """GPUs that could each take one of the pod's GPU requests, (n_rows, max_gpus); `rows` a slice or row indices."""
    type_id = snapshot.gpu_type_id[rows]
    share = demand.share_milli_by_type[type_id][:, None]  # (n_rows, 1)
    memory = demand.gpu_memory_mib_by_type[type_id][:, None]  # (n_rows, 1)
    observed_free = snapshot.gpu_memory_mib[rows, None] - snapshot.observed_used_memory_mib[rows]
    return (
        snapshot.gpu_exists[rows]
        & (snapshot.free_share_milli[rows] >= share)
        & (snapshot.free_memory_mib[rows] >= memory)
        & (observed_free >= memory)
    )


__all__ = ["usable_gpus"]
