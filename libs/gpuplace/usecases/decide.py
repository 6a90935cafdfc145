"""The placement service's bridge to the core: a policy by name, fed the workload the service has seen.

Fragmentation-aware policies measure holes against the typical workload M (DESIGN §6). The trace
simulator knows M up front; a live service does not, so it learns M from the requests of the pods it has
seen in each cluster (a sliding window of recent pods), and rebuilds the policy when M or the cluster's
GPU types change. A policy that learns the workload online (interface.learns_online, the house policy) needs
none of that: it is built once per cluster and kept, and the defragmentation planner, whose hypothetical
placements must not count as arrivals, gets an instance of its own. The policy's per-node statuses become
per-node-class reasons for pods that wait, and kube-scheduler's message for their Event (usecases/feedback).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping

from gpuplace.core.demand import resolve
from gpuplace.core.filters.latency_fit import DEFAULT_MARGIN
from gpuplace.core.framework import runtime
from gpuplace.core.framework.interface import Policy, PolicyContext, Status, learns_online
from gpuplace.core.latency.model import Stream
from gpuplace.core.model import Pod
from gpuplace.core.policies import registry
from gpuplace.core.policies.latency_aware import latency_aware
from gpuplace.core.snapshot import GpuType
from gpuplace.core.workload import typical_workload
from gpuplace.usecases.cluster_view import ClusterView
from gpuplace.usecases.feedback import Unschedulable, fit_error_message
from gpuplace.usecases.placement import Choice

WINDOW_PODS = 2_000  # recent pods that define the typical workload
REFRESH_EVERY = 100  # pods between rebuilds of the policy's workload


class _ClusterPolicy:
    """One cluster's policy instance; unless `keep`, rebuilt on the window of recent pods as it moves."""

    def __init__(self, name: str, *, keep: bool = False) -> None:
        self.name = name
        self.keep = keep
        self.recent: deque[Pod] = deque(maxlen=WINDOW_PODS)
        self.policy: Policy | None = None
        self.built_for: tuple[tuple[GpuType, ...], int] | None = None  # (GPU types, snapshot uid)
        self.since_refresh = 0

    def policy_for(self, view: ClusterView, pod: Pod, *, learn: bool = True) -> Policy:
        assert view.snapshot is not None
        if self.keep and self.policy is not None:
            return self.policy
        if learn or not self.recent:
            self.recent.append(pod)
            self.since_refresh += 1
        key = (view.snapshot.gpu_types, view.snapshot.uid)
        if self.policy is None or self.built_for != key or self.since_refresh >= REFRESH_EVERY:
            workload = typical_workload(list(self.recent), view.snapshot.gpu_types)
            self.policy = registry.create(self.name, PolicyContext(workload=workload))
            self.built_for, self.since_refresh = key, 0
        return self.policy


class Decider:
    """The `Decide` function of PlacementService for the named core policy; `planner_policy()` serves the planner.

    A pod that declares a frame rate goes through the latency filter too (DESIGN §6): only GPUs where it
    and every pod already there keep predicted p95 <= deadline x (1 - margin), by the view's latency model.
    """

    def __init__(self, policy_name: str, *, latency_margin: float = DEFAULT_MARGIN) -> None:
        if policy_name not in registry.names():  # fail at start-up, not on the first pod
            raise registry.UnknownPolicy(f"unknown policy {policy_name!r}; known: {', '.join(registry.names())}")
        self.policy_name = policy_name
        self.latency_margin = latency_margin
        self.learns_online = learns_online(registry.POLICIES[policy_name])
        self._serving: dict[str, _ClusterPolicy] = {}
        self._planning: dict[str, _ClusterPolicy] = {}  # online learners only: the planner's own instances

    def policy(self, view: ClusterView, pod: Pod, stream: Stream | None, *, learn: bool = True) -> Policy:
        """The policy to place `pod` with (its workload estimate fed with `pod` unless learn=False).

        With learn=False an online learner is the cluster's planning instance, never the serving one.
        """
        instances = self._planning if self.learns_online and not learn else self._serving
        cluster_policy = instances.get(view.cluster)
        if cluster_policy is None:
            instances[view.cluster] = cluster_policy = _ClusterPolicy(self.policy_name, keep=self.learns_online)
        policy = cluster_policy.policy_for(view, pod, learn=learn)
        if stream is not None and view.gpu_load is not None:
            policy = latency_aware(policy, view.latency_model, view.gpu_load, {pod.name: stream},
                                   margin=self.latency_margin)
        return policy

    def planner_policy(self, view: ClusterView, pod: Pod, stream: Stream | None) -> Policy:
        """The policy the defragmentation planner scores hypothetical placements with; they feed no estimate."""
        return self.policy(view, pod, stream, learn=False)

    def __call__(self, view: ClusterView, pod: Pod, stream: Stream | None) -> Choice | dict[str, str]:
        snapshot = view.snapshot
        assert snapshot is not None
        decision = runtime.place(snapshot, pod, self.policy(view, pod, stream))
        if not decision.scheduled:
            return Unschedulable(reasons_by_node_class(view, decision.statuses),
                                 fit_error_message(snapshot.n_nodes, decision.statuses))
        demand = resolve(pod, snapshot)
        gpu_type = snapshot.gpu_type_id[decision.node]
        return Choice(
            node=decision.node_name or "", gpu_indices=decision.gpu_indices,
            share_milli=int(demand.share_milli_by_type[gpu_type]) if decision.gpu_indices else 0,
            gpu_memory_mib=int(demand.gpu_memory_mib_by_type[gpu_type]) if decision.gpu_indices else 0,
            score=decision.score, runners_up=decision.runners_up,
        )


def decider(policy_name: str, *, latency_margin: float = DEFAULT_MARGIN) -> Decider:
    return Decider(policy_name, latency_margin=latency_margin)


def reasons_by_node_class(view: ClusterView, statuses: Mapping[str, Status]) -> dict[str, str]:
    """Per GPU product: how many nodes said what (the most common reason first), each reason followed by the
    filter that gave it in parentheses, e.g. "2 node(s): 0 of 1 GPU(s) with ... free (GpuFit)"."""
    assert view.snapshot is not None
    snapshot = view.snapshot
    by_class: dict[str, Counter[str]] = {}
    for name, status in statuses.items():
        row = snapshot.index_of(name)
        product = snapshot.gpu_types[snapshot.gpu_type_id[row]].model or "cpu-only"
        reason = "; ".join(status.reasons) or status.code.name.lower()
        by_class.setdefault(product, Counter())[f"{reason} ({status.plugin})" if status.plugin else reason] += 1
    return {
        product: ", ".join(f"{n} node(s): {reason}" for reason, n in counts.most_common(3))
        for product, counts in sorted(by_class.items())
    }


__all__ = ["Decider", "decider", "reasons_by_node_class"]
