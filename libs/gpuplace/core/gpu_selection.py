"""Which GPUs of the chosen node a pod takes.

The paper's baselines all pick GPUs the same way (Open-GPU-Share's reserve step): a shared pod takes
the usable GPU with the least free share (best fit, first index on ties); a whole-GPU pod takes the
first k usable GPUs by index. Random differs only for shared pods: a uniformly random usable GPU.
FGD chooses its own (see policies/fgd.py).

Whatever a policy chose, a multi-GPU pod on a node that describes its topology then takes GPUs of one domain
when they fit there (`in_one_domain`, applied by the runtime for every policy; core/topology.py).
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.gpu_usable import usable_gpus
from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.core.snapshot import ClusterSnapshot


def usable_on(snapshot: ClusterSnapshot, demand: Demand, node: int) -> IntArray:
    """Indices of the node's GPUs that could each take one GPU of the request, in index order."""
    usable = np.flatnonzero(usable_gpus(snapshot, demand, slice(node, node + 1))[0])
    if len(usable) < demand.gpu_count:
        raise ValueError(f"node {snapshot.node_names[node]} cannot take {demand.gpu_count} GPU(s)")
    return usable


def best_fit(snapshot: ClusterSnapshot, demand: Demand, node: int) -> tuple[int, ...]:
    if demand.gpu_count == 0:
        return ()
    usable = usable_on(snapshot, demand, node)
    if demand.share_milli_by_type[snapshot.gpu_type_id[node]] >= MILLI_PER_GPU:
        return tuple(int(i) for i in usable[: demand.gpu_count])
    free = snapshot.free_share_milli[node, usable]
    least_free_first = np.argsort(free, kind="stable")  # index order on ties
    return tuple(sorted(int(i) for i in usable[least_free_first[: demand.gpu_count]]))


def random_fit(snapshot: ClusterSnapshot, demand: Demand, node: int, rng: np.random.Generator) -> tuple[int, ...]:
    share = demand.share_milli_by_type[snapshot.gpu_type_id[node]]
    if demand.gpu_count != 1 or share >= MILLI_PER_GPU:
        return best_fit(snapshot, demand, node)
    usable = usable_on(snapshot, demand, node)
    return (int(usable[rng.integers(len(usable))]),)


def in_one_domain(snapshot: ClusterSnapshot, demand: Demand, node: int, chosen: tuple[int, ...]) -> tuple[int, ...]:
    """GPUs of one domain for a multi-GPU pod that fits in one on a node that describes its topology
    (core/topology.py); else `chosen`, the policy's choice.

    The domain is the one with the fewest usable GPUs that still fits (ties: the lowest domain), so larger
    domains stay whole for larger pods -- also when the policy's choice already lay in one domain, but a larger
    one; inside it, the least-free usable GPUs, index order on ties, as the policies take k GPUs."""
    if demand.gpu_count <= 1 or not snapshot.has_topology[node]:
        return chosen
    domain = snapshot.gpu_domain[node]  # (max_gpus,)
    usable = usable_gpus(snapshot, demand, slice(node, node + 1))[0]  # (max_gpus,)
    room = ((domain[:, None] == domain[None, :]) & usable[None, :]).sum(axis=1)  # usable GPUs in each one's domain
    fits = np.flatnonzero(usable & (room >= demand.gpu_count))
    if not len(fits):
        return chosen
    free = snapshot.free_share_milli[node]
    order = fits[np.lexsort((fits, free[fits], domain[fits], room[fits]))]  # last key sorts first
    picked = order[domain[order] == domain[order[0]]][: demand.gpu_count]
    return tuple(sorted(int(i) for i in picked))


__all__ = ["best_fit", "in_one_domain", "random_fit", "usable_on"]
