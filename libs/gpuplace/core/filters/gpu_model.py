"""Allowed GPU products (nvidia.com/gpu.product): a pod that names models runs only on those."""

from __future__ import annotations

from gpuplace.core.arrays import BoolArray, IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.framework.interface import Code, Status
from gpuplace.core.framework.verdicts import CycleState, Explained, Verdict, all_pass, distinct, nothing_to_explain
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "GpuModel"


def verdict(state: CycleState) -> Verdict:
    snapshot, demand = state.snapshot, state.demand
    if not demand.needs_gpu:
        return Verdict(NAME, all_pass(snapshot.n_nodes), nothing_to_explain)

    def explain(rows: IntArray) -> Explained:
        type_id = snapshot.gpu_type_id[rows]
        first, which = distinct(type_id)
        return [Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (
            f"GPU model {snapshot.gpu_types[type_id[i]].model or 'none'} not allowed for the pod",), NAME)
            for i in first], which

    return Verdict(NAME, demand.allowed_by_type[snapshot.gpu_type_id], explain)


def mask(snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
    return verdict(CycleState(snapshot, demand)).passed


def status(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    return verdict(CycleState(snapshot, demand)).status(node)


__all__ = ["NAME", "mask", "status", "verdict"]
