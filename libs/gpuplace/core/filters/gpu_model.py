"""Allowed GPU products (nvidia.com/gpu.product): a pod that names models runs only on those."""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import BoolArray
from gpuplace.core.demand import Demand
from gpuplace.core.framework.interface import SUCCESS, Code, Status
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "GpuModel"


def mask(snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
    if not demand.needs_gpu:
        return np.ones(snapshot.n_nodes, dtype=bool)
    return demand.allowed_by_type[snapshot.gpu_type_id]


def status(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    if mask(snapshot, demand)[node]:
        return SUCCESS
    model = snapshot.gpu_types[snapshot.gpu_type_id[node]].model or "none"
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (f"GPU model {model} not allowed for the pod",))


__all__ = ["NAME", "mask", "status"]
