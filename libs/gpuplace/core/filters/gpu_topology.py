"""A pod that requires its GPUs in one domain (GpuRequest.topology "required"; core/topology.py) goes only where
they fit in one: the node describes its topology, and one of its domains has enough usable GPUs.

A node that does not describe its topology cannot promise it, and one whose largest domain has fewer GPUs than
the pod asks never will: both UNSCHEDULABLE_AND_UNRESOLVABLE. A domain large enough but busy is UNSCHEDULABLE:
moving pods could free it. Any other pod passes every node, and costs one array of ones.

The usable GPUs are GpuFit's (the same CycleState entry, computed once per decision); GpuFit runs first in the
chain, so a node reaches this verdict's reasons only when it has enough usable GPUs, just not in one domain.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import BoolArray, IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.filters.gpu_fit import USABLE
from gpuplace.core.framework.interface import Code, Status
from gpuplace.core.framework.verdicts import CycleState, Explained, Verdict, all_pass, distinct, nothing_to_explain
from gpuplace.core.gpu_usable import usable_gpus
from gpuplace.core.snapshot import ClusterSnapshot, domain_room

NAME = "GpuTopology"
DOMAIN = "GPU domain (NUMA node and NVLink domain)"
_UNDESCRIBED, _TOO_SMALL, _BUSY = 0, 1, 2


def verdict(state: CycleState) -> Verdict:
    snapshot, demand = state.snapshot, state.demand
    if not demand.topology_required:
        return Verdict(NAME, all_pass(snapshot.n_nodes), nothing_to_explain)
    usable = state.memo(USABLE, lambda: usable_gpus(snapshot, demand))
    room = domain_room(snapshot, usable, slice(None))  # (n_nodes,)
    passed: BoolArray = snapshot.has_topology & (room >= demand.gpu_count)
    wanted = f"the pod requires its {demand.gpu_count} GPUs in one"

    def explain(rows: IntArray) -> Explained:
        real = np.arange(snapshot.max_gpus)[None, :] < snapshot.gpu_count[rows][:, None]  # (n_rows, max_gpus)
        largest = domain_room(snapshot, real, rows)
        kind = np.where(~snapshot.has_topology[rows], _UNDESCRIBED,
                        np.where(largest < demand.gpu_count, _TOO_SMALL, _BUSY))
        number = np.where(kind == _UNDESCRIBED, 0, np.where(kind == _TOO_SMALL, largest, room[rows]))
        first, which = distinct(kind, number)
        statuses = []
        for k, n in zip(kind[first].tolist(), number[first].tolist(), strict=True):
            if k == _UNDESCRIBED:
                statuses.append(Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (
                    f"node does not describe its GPU topology; the pod requires its {demand.gpu_count} GPUs in "
                    f"one {DOMAIN}",), NAME))
            elif k == _TOO_SMALL:
                statuses.append(Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                                       (f"largest {DOMAIN} has {n} GPU(s); {wanted}",), NAME))
            else:
                statuses.append(Status(Code.UNSCHEDULABLE, (f"at most {n} usable GPU(s) in one {DOMAIN}; {wanted}",),
                                       NAME))
        return statuses, which

    return Verdict(NAME, passed, explain)


def mask(snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
    return verdict(CycleState(snapshot, demand)).passed


def status(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    return verdict(CycleState(snapshot, demand)).status(node)


__all__ = ["DOMAIN", "NAME", "mask", "status", "verdict"]
