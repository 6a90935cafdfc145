"""CPU and host memory: the pod's requests must fit what is still free on the node."""

from __future__ import annotations

from gpuplace.core.arrays import BoolArray, IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.framework.interface import Code, Status
from gpuplace.core.framework.verdicts import CycleState, Explained, Verdict, distinct
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "ResourcesFit"


def verdict(state: CycleState) -> Verdict:
    snapshot, demand = state.snapshot, state.demand
    cpu_ok = snapshot.cpu_free_milli >= demand.cpu_milli
    memory_ok = snapshot.memory_free_mib >= demand.memory_mib

    def explain(rows: IntArray) -> Explained:
        cpu_short, memory_short = ~cpu_ok[rows], ~memory_ok[rows]
        cpu_free = snapshot.cpu_free_milli[rows] * cpu_short  # 0 where CPU is not short: not in the reason
        memory_free = snapshot.memory_free_mib[rows] * memory_short
        unresolvable = (cpu_short & (snapshot.cpu_capacity_milli[rows] < demand.cpu_milli)) | (
            memory_short & (snapshot.memory_capacity_mib[rows] < demand.memory_mib))
        keys = cpu_short, cpu_free, memory_short, memory_free, unresolvable
        first, which = distinct(*keys)
        statuses = []
        for cpu_is_short, cpu_left, memory_is_short, memory_left, never in zip(
                *(key[first].tolist() for key in keys), strict=True):
            reasons = []
            if cpu_is_short:
                reasons.append(f"insufficient CPU: {demand.cpu_milli}m requested, {cpu_left}m free")
            if memory_is_short:
                reasons.append(f"insufficient memory: {demand.memory_mib} MiB requested, {memory_left} MiB free")
            code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if never else Code.UNSCHEDULABLE
            statuses.append(Status(code, tuple(reasons), NAME))
        return statuses, which

    return Verdict(NAME, cpu_ok & memory_ok, explain)


def mask(snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
    return verdict(CycleState(snapshot, demand)).passed


def status(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    return verdict(CycleState(snapshot, demand)).status(node)


__all__ = ["NAME", "mask", "status", "verdict"]
