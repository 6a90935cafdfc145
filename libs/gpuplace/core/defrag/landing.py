"""Could a running pod land somewhere else as the cluster is now? Asked for all pods at once.

A pod worth offering as a mover must have somewhere to go: a node other than its own with the CPU,
host memory and `k` GPUs each with the share and memory it needs, of an allowed model (the standard
filters' rules) -- or its own node, on GPUs it does not hold, with room for a second copy of its CPU
and host memory (the executor reserves the target while the pod still runs). Room on its own GPUs
does not count: that is the hole the move is meant to enlarge.

GPU share and memory are each tested on the k-th freest GPU, so the test is necessary, not
sufficient; targets.py asks the policy itself before anything is promised. Other nodes are tested
once per distinct request, (n_requests, n_nodes) arrays, so every pod of a thousand-node cluster is
screened in every plan.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuplace.core.arrays import BoolArray, IntArray
from gpuplace.core.defrag.occupancy import Occupancy
from gpuplace.core.demand import Demand
from gpuplace.core.snapshot import ClusterSnapshot


def lands_elsewhere(snapshot: ClusterSnapshot, occupancy: Occupancy, slots: IntArray) -> BoolArray:
    """Per slot in `slots`: another node, or other GPUs of its own, could take the pod now, (n_slots,)."""
    if not len(slots):
        return np.zeros(0, dtype=bool)
    unique, inverse = np.unique(occupancy.request_id[slots], return_inverse=True)
    fits = room_for(snapshot, [occupancy.requests[i] for i in unique])  # (n_unique, n_nodes)
    node = occupancy.node[slots]
    other_nodes: BoolArray = fits.sum(axis=1)[inverse] - fits[inverse, node] > 0
    return other_nodes | _own_node(snapshot, occupancy, slots)


def room_for(snapshot: ClusterSnapshot, demands: Sequence[Demand]) -> BoolArray:
    """Nodes with room now for each demand, (n_demands, n_nodes); see the module docstring."""
    cpu = np.array([d.cpu_milli for d in demands], dtype=np.int64)[:, None]  # (n_demands, 1)
    host = np.array([d.memory_mib for d in demands], dtype=np.int64)[:, None]
    ok: BoolArray = (snapshot.cpu_free_milli >= cpu) & (snapshot.memory_free_mib >= host)  # (n_demands, n_nodes)
    count = np.array([d.gpu_count if d.needs_gpu else 0 for d in demands], dtype=np.int64)
    if not count.any():
        return ok
    types = snapshot.gpu_type_id
    share = np.stack([d.share_milli_by_type for d in demands])[:, types]  # (n_demands, n_nodes)
    memory = np.stack([d.gpu_memory_mib_by_type for d in demands])[:, types]
    allowed = np.stack([d.allowed_by_type for d in demands])[:, types]
    column = _column(count, snapshot.max_gpus)
    kth_share = _kth(np.where(snapshot.gpu_exists, snapshot.free_share_milli, -1))  # (max_gpus + 1, n_nodes)
    kth_memory = _kth(np.where(snapshot.gpu_exists, snapshot.free_memory_mib, -1))
    gpu_ok: BoolArray = allowed & (kth_share[column] >= share) & (kth_memory[column] >= memory)
    room: BoolArray = ok & (gpu_ok | (count == 0)[:, None])
    return room


def _own_node(snapshot: ClusterSnapshot, occupancy: Occupancy, slots: IntArray) -> BoolArray:
    """Per slot: its own node has room for a second copy on GPUs it does not hold, (n_slots,).
    Never for a pod without GPUs: on its own node it would not have moved at all."""
    node = occupancy.node[slots]
    request = occupancy.request_id[slots]
    count = occupancy.request_count[request]  # (n_slots,)
    ok = ((count > 0) & (snapshot.cpu_free_milli[node] >= occupancy.cpu_milli[slots])
          & (snapshot.memory_free_mib[node] >= occupancy.host_memory_mib[slots]))  # (n_slots,)
    if not ok.any():
        return ok
    types = snapshot.gpu_type_id[node]
    share = occupancy.request_share_milli[request, types]  # (n_slots,)
    memory = occupancy.request_memory_mib[request, types]
    elsewhere = snapshot.gpu_exists[node] & ~occupancy.gpus[slots]  # other GPUs of the node, (n_slots, max_gpus)
    column = _column(count, snapshot.max_gpus)
    rows = np.arange(len(slots))
    kth_share = _kth(np.where(elsewhere, snapshot.free_share_milli[node], -1))[column, rows]
    kth_memory = _kth(np.where(elsewhere, snapshot.free_memory_mib[node], -1))[column, rows]
    return ok & (kth_share >= share) & (kth_memory >= memory)


def _kth(free: IntArray) -> IntArray:
    """Row-wise k-th largest, k = 1..max_gpus, plus a row no request fits: (max_gpus + 1, n_rows)."""
    return np.vstack([-np.sort(-free, axis=1).T, np.full((1, len(free)), -1)])


def _column(count: IntArray, max_gpus: int) -> IntArray:
    """Row of _kth() to read for a request of `count` GPUs (the no-fit row when count > max_gpus)."""
    return np.where(count > max_gpus, max_gpus, np.clip(count - 1, 0, max_gpus))


__all__ = ["lands_elsewhere", "room_for"]
