"""The rules every pod relies on (core/node_rules.py): cordon, readiness, taints, selectors and affinity,
host ports, pod slots and countables such as MIG profiles, with kube-scheduler's reasons.

Labels, taints and cordon cannot change by moving pods, so a node that fails them is
UNSCHEDULABLE_AND_UNRESOLVABLE (the defragmenter never plans there); full pod slots, taken host ports and
used-up countables are UNSCHEDULABLE, as kube-scheduler's NodePorts and NodeResourcesFit say. A node's reason is
the first of: its facts' (StaticReasons, cached per snapshot and rules), a taken port, no pod slot left, the
first countable short.
On a bare snapshot (no facts: the trace harness) every node passes and nothing is computed.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import BoolArray, IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.framework.interface import Code, Status
from gpuplace.core.framework.verdicts import CycleState, Explained, Verdict, all_pass, distinct, nothing_to_explain
from gpuplace.core.node_rules import MSG_PORTS, MSG_TOO_MANY_PODS, ports_free
from gpuplace.core.snapshot import ClusterSnapshot

NAME = "NodeRules"
_PORTS, _SLOTS = -2, -3  # dynamic reasons, beside the extended resources' indices 0..k-1


def verdict(state: CycleState) -> Verdict:
    snapshot, rules = state.snapshot, state.demand.rules
    static = snapshot.static_reasons(rules)
    if static is None:
        return Verdict(NAME, all_pass(snapshot.n_nodes), nothing_to_explain)
    passed = static.allowed & (snapshot.pods_free > 0)  # a new array: the cached static mask stays as it is
    for name, amount in rules.extended:
        free = snapshot.extended_free.get(name)
        passed &= free >= amount if free is not None else False
    if rules.host_ports:
        for row in np.flatnonzero(passed):
            passed[row] = ports_free(snapshot.host_ports_used[row], rules.host_ports)

    def explain(rows: IntArray) -> Explained:
        code = static.code[rows]
        by_facts = code >= 0
        first, which_facts = distinct(code[by_facts])
        statuses = [Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (static.texts[code[by_facts][i]],), NAME)
                    for i in first]
        which = np.empty(len(rows), dtype=np.int64)
        which[by_facts] = which_facts
        dynamic = rows[~by_facts]  # the facts allow them: a port, a slot or a countable is taken
        reason = np.full(len(dynamic), _SLOTS, dtype=np.int64)
        for k, (name, amount) in reversed(list(enumerate(rules.extended))):  # the first short one wins
            free = snapshot.extended_free.get(name)  # None: no node has it, and every node's facts said so
            if free is not None:
                reason[free[dynamic] < amount] = k
        reason[snapshot.pods_free[dynamic] <= 0] = _SLOTS
        if rules.host_ports:
            taken = [not ports_free(snapshot.host_ports_used[row], rules.host_ports) for row in dynamic]
            reason[np.asarray(taken, dtype=bool)] = _PORTS
        first, which_dynamic = distinct(reason)
        which[~by_facts] = which_dynamic + len(statuses)
        for kind in reason[first].tolist():
            text = MSG_PORTS if kind == _PORTS else MSG_TOO_MANY_PODS if kind == _SLOTS else \
                f"Insufficient {rules.extended[kind][0]}"
            statuses.append(Status(Code.UNSCHEDULABLE, (text,), NAME))
        return statuses, which

    return Verdict(NAME, passed, explain)


def mask(snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
    return verdict(CycleState(snapshot, demand)).passed


def status(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    return verdict(CycleState(snapshot, demand)).status(node)


__all__ = ["NAME", "mask", "status", "verdict"]
