"""The rules every pod relies on (core/node_rules.py): cordon, readiness, taints, selectors and affinity,
host ports, pod slots and countables such as MIG profiles, with kube-scheduler's reasons.

Labels, taints and cordon cannot change by moving pods, so a node that fails them is
UNSCHEDULABLE_AND_UNRESOLVABLE (the defragmenter never plans there); full pod slots, taken host ports and
used-up countables are UNSCHEDULABLE, as kube-scheduler's NodePorts and NodeResourcesFit say.
On a bare snapshot (no facts: the trace harness) every node passes and nothing is computed.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import BoolArray
from gpuplace.core.demand import Demand
from gpuplace.core.framework.interface import SUCCESS, Code, Status
from gpuplace.core.node_rules import MSG_PORTS, MSG_TOO_MANY_PODS, ports_free
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "NodeRules"


def mask(snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
    rules = demand.rules
    static = snapshot.static_mask(rules)
    if static is None:
        return np.ones(snapshot.n_nodes, dtype=bool)
    feasible = static & (snapshot.pods_free > 0)  # a new array: the cached static mask stays as it is
    for name, amount in rules.extended:
        free = snapshot.extended_free.get(name)
        feasible &= free >= amount if free is not None else False
    if rules.host_ports:
        for row in np.flatnonzero(feasible):
            feasible[row] = ports_free(snapshot.host_ports_used[row], rules.host_ports)
    return feasible


def status(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    if snapshot.facts is None:
        return SUCCESS
    rules = demand.rules
    reason = rules.static_reason(snapshot.facts[node])
    if reason is not None:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (reason,))
    if not ports_free(snapshot.host_ports_used[node], rules.host_ports):
        return Status(Code.UNSCHEDULABLE, (MSG_PORTS,))
    if snapshot.pods_free[node] <= 0:
        return Status(Code.UNSCHEDULABLE, (MSG_TOO_MANY_PODS,))
    for name, amount in rules.extended:
        if snapshot.extended_free[name][node] < amount:
            return Status(Code.UNSCHEDULABLE, (f"Insufficient {name}",))
    return SUCCESS


__all__ = ["NAME", "mask", "status"]
