"""A pod that requires its GPUs in one domain (GpuRequest.topology "required"; core/topology.py) goes only where
they fit in one: the node describes its topology, and one of its domains has enough usable GPUs.

A node that does not describe its topology cannot promise it, and one whose largest domain has fewer GPUs than
the pod asks never will: both UNSCHEDULABLE_AND_UNRESOLVABLE. A domain large enough but busy is UNSCHEDULABLE:
moving pods could free it. Any other pod passes every node, and costs one array of ones.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import BoolArray
from gpuplace.core.demand import Demand
from gpuplace.core.framework.interface import SUCCESS, Code, Status
from gpuplace.core.gpu_usable import usable_gpus
from gpuplace.core.snapshot import ClusterSnapshot, domain_room

NAME = "GpuTopology"
DOMAIN = "GPU domain (NUMA node and NVLink domain)"


def mask(snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
    if not demand.topology_required:
        return np.ones(snapshot.n_nodes, dtype=bool)
    room = domain_room(snapshot, usable_gpus(snapshot, demand), slice(None))
    fits: BoolArray = snapshot.has_topology & (room >= demand.gpu_count)
    return fits


def status(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    if not demand.topology_required:
        return SUCCESS
    if not snapshot.has_topology[node]:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                      (f"node does not describe its GPU topology; the pod requires its {demand.gpu_count} GPUs in "
                       f"one {DOMAIN}",))
    rows = np.array([node])
    usable = int(domain_room(snapshot, usable_gpus(snapshot, demand, rows), rows)[0])
    if usable >= demand.gpu_count:
        return SUCCESS
    wanted = f"the pod requires its {demand.gpu_count} GPUs in one"
    real = np.arange(snapshot.max_gpus)[None, :] < snapshot.gpu_count[rows]  # (1, max_gpus)
    largest = int(domain_room(snapshot, real, rows)[0])
    if largest < demand.gpu_count:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (f"largest {DOMAIN} has {largest} GPU(s); {wanted}",))
    return Status(Code.UNSCHEDULABLE, (f"at most {usable} usable GPU(s) in one {DOMAIN}; {wanted}",))


__all__ = ["DOMAIN", "NAME", "mask", "status"]
