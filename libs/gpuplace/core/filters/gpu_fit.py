"""GPUs with room: k GPUs, each with the share and the memory the pod needs free, by what is
reserved and by what telemetry observes in use (an unreserved process still takes memory).

A node whose GPUs could never take the pod (too few, or each too small) is UNSCHEDULABLE_AND_UNRESOLVABLE;
one whose GPUs are only too full now is UNSCHEDULABLE: "fewer than k GPU(s) with >= s m and >= m MiB free"
("no GPU with ..." for one), the same words on every node of a GPU model (kube-scheduler's NodeResourcesFit
says "Insufficient nvidia.com/gpu"), with the node's own numbers apart (interface.PerNode): how many of its
GPUs have room and its largest hole, which the node's status says ("3 of 8 GPU(s) ... (largest hole ...)")
and a report per node class gives as the most and the largest. Every node has its own largest hole on a busy
fleet: in the reason, kube's message would hold one entry per node (1,123 distinct strings for an 8-GPU pod on
1,200 nodes).
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import BoolArray, IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.framework.interface import Code, PerNode, Status
from gpuplace.core.framework.verdicts import CycleState, Explained, Verdict, all_pass, distinct, nothing_to_explain
from gpuplace.core.gpu_usable import usable_gpus
from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "GpuFit"
USABLE = "GpuFit.usable"
"""CycleState key of `usable_gpus` over all nodes, for other steps of the same decision (the exclusive policy)."""


def verdict(state: CycleState) -> Verdict:
    snapshot, demand = state.snapshot, state.demand
    if not demand.needs_gpu:
        return Verdict(NAME, all_pass(snapshot.n_nodes), nothing_to_explain)
    usable = state.memo(USABLE, lambda: usable_gpus(snapshot, demand))
    usable_count = usable.sum(axis=1)

    def explain(rows: IntArray) -> Explained:
        share = demand.share_on(snapshot)[rows]
        memory = demand.gpu_memory_on(snapshot)[rows]
        count, gpu_memory = snapshot.gpu_count[rows], snapshot.gpu_memory_mib[rows]
        never = (count < demand.gpu_count) | (share > MILLI_PER_GPU) | (memory > gpu_memory)
        statuses: list[Status] = []
        which = np.empty(len(rows), dtype=np.int64)
        keys = count[never], gpu_memory[never], share[never], memory[never]
        first, which[never] = distinct(*keys)
        for n, mib, need_share, need_memory in zip(*(key[first].tolist() for key in keys), strict=True):
            statuses.append(Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (
                f"node has {n} GPU(s) of {mib} MiB; the pod needs {demand.gpu_count} x ({need_share}m, "
                f"{need_memory} MiB)",), NAME))
        now_keys = share[~never], memory[~never]  # one status per GPU model's request, whatever each node has free
        first, which_now = distinct(*now_keys)
        which[~never] = which_now + len(statuses)
        for need_share, need_memory in zip(*(key[first].tolist() for key in now_keys), strict=True):
            room = f"with >= {need_share}m and >= {need_memory} MiB free"
            if demand.gpu_count == 1:
                reason, most = f"no GPU {room}", ""
            else:
                reason, most = f"fewer than {demand.gpu_count} GPU(s) {room}", "at most {0} such GPU(s) on a node, "
            statuses.append(Status(Code.UNSCHEDULABLE, (reason,), NAME, PerNode(
                f"{{0}} of {demand.gpu_count} GPU(s) {room} (largest hole {{1}}m, {{2}} MiB)",
                f"{reason} ({most}largest hole {{1}}m, {{2}} MiB)")))
        return statuses, which

    def numbers(rows: IntArray) -> IntArray:
        """Per row: GPUs with room for the pod, and the largest free share and free memory of any of its GPUs."""
        exists = snapshot.gpu_exists[rows]
        largest_share = np.where(exists, snapshot.free_share_milli[rows], 0).max(axis=1, initial=0)
        largest_memory = np.where(exists, snapshot.free_memory_mib[rows], 0).max(axis=1, initial=0)
        out: IntArray = np.stack([usable_count[rows], largest_share, largest_memory], axis=1).astype(np.int64)
        return out

    passed: BoolArray = usable_count >= demand.gpu_count
    return Verdict(NAME, passed, explain, numbers)


def mask(snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
    return verdict(CycleState(snapshot, demand)).passed


def status(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    return verdict(CycleState(snapshot, demand)).status(node)


__all__ = ["NAME", "USABLE", "mask", "status", "verdict"]
