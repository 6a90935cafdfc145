"""GPUs with room: k GPUs, each with the share and the memory the pod needs free, by what is
reserved and by what telemetry observes in use (an unreserved process still takes memory)."""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import BoolArray
from gpuplace.core.demand import Demand
from gpuplace.core.framework.interface import SUCCESS, Code, Status
from gpuplace.core.gpu_usable import usable_gpus
from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "GpuFit"


def mask(snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
    if not demand.needs_gpu:
        return np.ones(snapshot.n_nodes, dtype=bool)
    fits: BoolArray = usable_gpus(snapshot, demand).sum(axis=1) >= demand.gpu_count
    return fits


def status(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    if not demand.needs_gpu or mask(snapshot, demand)[node]:
        return SUCCESS
    share = int(demand.share_on(snapshot)[node])
    memory = int(demand.gpu_memory_on(snapshot)[node])
    count = int(snapshot.gpu_count[node])
    if count < demand.gpu_count or share > MILLI_PER_GPU or memory > snapshot.gpu_memory_mib[node]:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (
            f"node has {count} GPU(s) of {snapshot.gpu_memory_mib[node]} MiB; the pod needs "
            f"{demand.gpu_count} x ({share}m, {memory} MiB)",))
    usable = int(usable_gpus(snapshot, demand)[node].sum())
    exists = snapshot.gpu_exists[node]
    largest_share = int(snapshot.free_share_milli[node][exists].max(initial=0))
    largest_memory = int(snapshot.free_memory_mib[node][exists].max(initial=0))
    return Status(Code.UNSCHEDULABLE, (
        f"{usable} of {demand.gpu_count} GPU(s) with >= {share}m and >= {memory} MiB free "
        f"(largest hole {largest_share}m, {largest_memory} MiB)",))


__all__ = ["NAME", "mask", "status"]
