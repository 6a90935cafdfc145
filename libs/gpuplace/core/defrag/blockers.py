"""Why a pod is unschedulable: capacity, fragmentation, latency or a constraint (model.Blocker).

Told apart on the nodes the pod could ever use -- an allowed GPU model, enough GPUs, each GPU big
enough, enough CPU and memory capacity (the complement of UNSCHEDULABLE_AND_UNRESOLVABLE):
- none such: CONSTRAINT, whatever moves;
- the standard filters accept some node but the policy does not: LATENCY when the policy carries a
  latency check (filters/latency_fit.py via policies/latency_aware.py), else CONSTRAINT (a rule of the
  policy's own that moving pods does not address);
- their free resources, summed, fall short of the request: CAPACITY. GPU share is counted in units of
  the request's per-GPU need on each node (a memory request needs a different share per GPU type);
- else FRAGMENTATION: the room exists in total but no single node or GPU has it.
Only FRAGMENTATION is worth planning moves for.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core import topology
from gpuplace.core.arrays import BoolArray
from gpuplace.core.defrag.model import Blocker
from gpuplace.core.demand import Demand, resolve
from gpuplace.core.filters import FILTERS
from gpuplace.core.framework.interface import Policy
from gpuplace.core.framework.verdicts import CycleState, feasible
from gpuplace.core.model import MILLI_PER_GPU, Pod
from gpuplace.core.snapshot import ClusterSnapshot


def classify(snapshot: ClusterSnapshot, pod: Pod, policy: Policy) -> Blocker:
    """What keeps `pod` off every node now (Blocker.NONE if it fits somewhere)."""
    return diagnose(snapshot, resolve(pod, snapshot), policy)[0]


def diagnose(snapshot: ClusterSnapshot, demand: Demand, policy: Policy) -> tuple[Blocker, str]:
    """The Blocker and a one-line reason, for a demand already resolved against `snapshot`."""
    if policy.filter(snapshot, demand).any():
        return Blocker.NONE, "fits now"
    ever = could_ever_fit(snapshot, demand)  # (n_nodes,)
    if not ever.any():
        return Blocker.CONSTRAINT, f"no node could ever take it ({_request_text(demand)})"
    if _standard_filters(snapshot, demand).any():
        check = getattr(policy, "check", None)  # latency-aware policies (policies/latency_aware.py)
        if check is not None and check(snapshot, demand) is not None:
            return Blocker.LATENCY, "room exists, but every place would break a deadline"
        return Blocker.CONSTRAINT, f"policy {policy.name} rejects every node the standard filters accept"
    short = _shortfall(snapshot, demand, ever)
    if short:
        return Blocker.CAPACITY, f"not enough free {short} in total on the {int(ever.sum())} usable nodes"
    return Blocker.FRAGMENTATION, (
        f"enough free resources in total on {int(ever.sum())} usable nodes, none with room for "
        f"{_request_text(demand)}")


def could_ever_fit(snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
    """Nodes that could take the pod if they were empty, (n_nodes,); for a pod that requires one GPU domain, only
    nodes with a domain large enough (core/topology.py)."""
    ok = (snapshot.cpu_capacity_milli >= demand.cpu_milli) & (snapshot.memory_capacity_mib >= demand.memory_mib)
    if not demand.needs_gpu:
        return ok
    return (
        ok
        & demand.allowed_by_type[snapshot.gpu_type_id]
        & (snapshot.gpu_count >= demand.gpu_count)
        & (demand.share_on(snapshot) <= MILLI_PER_GPU)
        & (demand.gpu_memory_on(snapshot) <= snapshot.gpu_memory_mib)
        & topology.could_hold(snapshot, demand)
    )


def _standard_filters(snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
    state = CycleState(snapshot, demand)
    return feasible([plugin.verdict(state) for plugin in FILTERS])


def _shortfall(snapshot: ClusterSnapshot, demand: Demand, ever: BoolArray) -> str:
    """Which resource the usable nodes lack in total ('' when none does)."""
    if snapshot.cpu_free_milli[ever].sum() < demand.cpu_milli:
        return "CPU"
    if snapshot.memory_free_mib[ever].sum() < demand.memory_mib:
        return "memory"
    if not demand.needs_gpu:
        return ""
    exists = snapshot.gpu_exists[ever]  # (n_ever, max_gpus)
    share = np.maximum(demand.share_on(snapshot)[ever], 1)[:, None]  # (n_ever, 1)
    memory = demand.gpu_memory_on(snapshot)[ever][:, None]
    # Each GPU's free room in units of the request's per-GPU need (share and memory, whichever is
    # scarcer), so GPU types with different needs add up.
    by_share = snapshot.free_share_milli[ever] / share  # (n_ever, max_gpus)
    by_memory = np.where(memory > 0, snapshot.free_memory_mib[ever] / np.maximum(memory, 1), np.inf)
    if np.where(exists, np.minimum(by_share, by_memory), 0).sum() < demand.gpu_count:
        return "GPU"
    return ""


def _request_text(demand: Demand) -> str:
    cpu = f"{demand.cpu_milli}m CPU"
    if not demand.needs_gpu:
        return cpu
    shares = sorted({int(s) for s in demand.share_milli_by_type[demand.allowed_by_type]})
    share = "/".join(f"{s}m" for s in shares) if shares else "?"
    return f"{cpu}, {demand.gpu_count} x {share}"


__all__ = ["classify", "could_ever_fit", "diagnose"]
