"""The per-node statuses as gpuplace computed them before issue 16: one node at a time, each filter recomputing its
whole-cluster mask to read one entry. Too slow to serve (249 ms for one pod on 1,200 nodes) but plain to read, so
it stays here as the oracle the vectorised verdicts (core/framework/verdicts.py) must agree with, node by node.

Kept as it was, apart from being gathered in one module; do not "fix" it to match the new code. GpuTopology
(`_gpu_topology`) is main's per-node `gpu_topology.status` as it was when the topology filter was merged in.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpuplace.core.demand import Demand
from gpuplace.core.filters import latency_fit
from gpuplace.core.filters.gpu_topology import DOMAIN
from gpuplace.core.filters.latency_fit import LatencyCheck
from gpuplace.core.framework.interface import SUCCESS, Code, Status
from gpuplace.core.gpu_usable import usable_gpus
from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.core.node_rules import MSG_PORTS, MSG_TOO_MANY_PODS, ports_free
from gpuplace.core.policies.exclusive import Exclusive, idle_gpus
from gpuplace.core.policies.latency_aware import LatencyAware
from gpuplace.core.snapshot import ClusterSnapshot, domain_room


def statuses(snapshot: ClusterSnapshot, demand: Demand, policy: object) -> dict[str, Status]:
    """runtime._statuses as it was: every node's status, "rejected by policy" where the chain passed."""
    out = {}
    name = getattr(policy, "name", "")
    for node in range(snapshot.n_nodes):
        status = explain(policy, snapshot, demand, node)
        if status.ok:
            status = Status(Code.UNSCHEDULABLE, (f"rejected by policy {name}",), name)
        out[snapshot.node_names[node]] = status
    return out


def explain(policy: object, snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    if isinstance(policy, LatencyAware):
        status = explain(policy.base, snapshot, demand, node)
        check = policy.check(snapshot, demand)
        if not status.ok or check is None:
            return status
        status = _latency(check, node)
        return status if status.ok or status.plugin else replace(status, plugin=latency_fit.NAME)
    for plugin, status_of in _CHAIN:
        status = status_of(snapshot, demand, node)
        if not status.ok:
            return status if status.plugin else replace(status, plugin=plugin)
    if isinstance(policy, Exclusive) and demand.needs_gpu:
        usable = usable_gpus(snapshot, demand)
        enough = (idle_gpus(snapshot) & usable).sum(axis=1) >= demand.gpu_count
        if not enough[node]:
            idle = int(idle_gpus(snapshot)[node].sum())
            return Status(Code.UNSCHEDULABLE, (
                f"{idle} idle GPU(s), the pod needs {demand.gpu_count} (exclusive: one pod per GPU)",), policy.name)
    return SUCCESS


def _node_rules(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
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


def _resources(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    reasons = []
    unresolvable = False
    if snapshot.cpu_free_milli[node] < demand.cpu_milli:
        reasons.append(f"insufficient CPU: {demand.cpu_milli}m requested, {snapshot.cpu_free_milli[node]}m free")
        unresolvable |= snapshot.cpu_capacity_milli[node] < demand.cpu_milli
    if snapshot.memory_free_mib[node] < demand.memory_mib:
        reasons.append(
            f"insufficient memory: {demand.memory_mib} MiB requested, {snapshot.memory_free_mib[node]} MiB free"
        )
        unresolvable |= snapshot.memory_capacity_mib[node] < demand.memory_mib
    if not reasons:
        return SUCCESS
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE, tuple(reasons))


def _gpu_model(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    if not demand.needs_gpu or demand.allowed_by_type[snapshot.gpu_type_id][node]:
        return SUCCESS
    model = snapshot.gpu_types[snapshot.gpu_type_id[node]].model or "none"
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (f"GPU model {model} not allowed for the pod",))


def _gpu_fit(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
    if not demand.needs_gpu or (usable_gpus(snapshot, demand).sum(axis=1) >= demand.gpu_count)[node]:
        return SUCCESS
    share = int(demand.share_on(snapshot)[node])
    memory = int(demand.gpu_memory_on(snapshot)[node])
    count = int(snapshot.gpu_count[node])
    if count < demand.gpu_count or share > MILLI_PER_GPU or memory > snapshot.gpu_memory_mib[node]:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (
            f"node has {count} GPU(s) of {snapshot.gpu_memory_mib[node]} MiB; the pod needs "
            f"{demand.gpu_count} x ({share}m, {memory} MiB)",))
    usable = int(usable_gpus(snapshot, demand)[node].sum())
    exists = snapshot.gpu_exists[node]
    largest_share = int(snapshot.free_share_milli[node][exists].max(initial=0))
    largest_memory = int(snapshot.free_memory_mib[node][exists].max(initial=0))
    return Status(Code.UNSCHEDULABLE, (
        f"{usable} of {demand.gpu_count} GPU(s) with >= {share}m and >= {memory} MiB free "
        f"(largest hole {largest_share}m, {largest_memory} MiB)",))


def _latency(check: LatencyCheck, node: int) -> Status:
    if check.feasible[node].any():
        return SUCCESS
    if not check.alone_ok[node]:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (
            f"the pod alone on this node's GPU model predicts p95 above {100 * (1 - check.margin):.0f}% of its "
            "deadline",))
    slack = np.where(np.isfinite(check.budget_ms[node]), check.p95_ms[node] - check.budget_ms[node], np.inf)
    gpu = int(np.argmin(slack))
    if not np.isfinite(check.p95_ms[node, gpu]):
        reason = f"every GPU would be overloaded (GPU {gpu}: load {check.load_fraction[node, gpu]:.2f} with the pod)"
    else:
        reason = (f"no GPU keeps every pod within its deadline: best is GPU {gpu}, predicted p95 "
                  f"{check.p95_ms[node, gpu]:.1f} ms > {check.budget_ms[node, gpu]:.1f} ms "
                  f"(deadline less {100 * check.margin:.0f}%), load {check.load_fraction[node, gpu]:.2f} with the pod")
    return Status(Code.UNSCHEDULABLE, (reason,))


def _gpu_topology(snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
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


_CHAIN = (("NodeRules", _node_rules), ("ResourcesFit", _resources), ("GpuModel", _gpu_model), ("GpuFit", _gpu_fit),
          ("GpuTopology", _gpu_topology))
