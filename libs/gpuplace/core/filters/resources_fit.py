"""CPU and host memory: the pod's requests must fit what is still free on the node."""

from __future__ import annotations

from gpuplace.core.arrays import BoolArray
from gpuplace.core.demand import Demand
from gpuplace.core.framework.interface import SUCCESS, Code, Status
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "ResourcesFit"


def mask(snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
    return (snapshot.cpu_free_milli >= demand.cpu_milli) & (snapshot.memory_free_mib >= demand.memory_mib)


def status(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    reasons = []
    unresolvable = False
    if snapshot.cpu_free_milli[node] < demand.cpu_milli:
        reasons.append(f"insufficient CPU: {demand.cpu_milli}m requested, {snapshot.cpu_free_milli[node]}m free")
        unresolvable |= snapshot.cpu_capacity_milli[node] < demand.cpu_milli
    if snapshot.memory_free_mib[node] < demand.memory_mib:
        reasons.append(
            f"insufficient memory: {demand.memory_mib} MiB requested, {snapshot.memory_free_mib[node]} MiB free"
        )
        unresolvable |= snapshot.memory_capacity_mib[node] < demand.memory_mib
    if not reasons:
        return SUCCESS
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE, tuple(reasons))


__all__ = ["NAME", "mask", "status"]
