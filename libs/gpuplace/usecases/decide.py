"""The placement service's bridge to the core: a policy by name, fed the workload the service has seen.

Fragmentation-aware policies measure holes against the typical workload M (DESIGN §6). The trace
simulator knows M up front; a live service does not, so it learns M from the requests of the pods it has
seen in each cluster (a sliding window of recent pods), and rebuilds the policy when M or the cluster's
GPU types change. A policy that learns the workload online (interface.learns_online, the house policy) needs
none of that: it is built once per cluster and kept, and the defragmentation planner, whose hypothetical
placements must not count as arrivals, gets an instance of its own. The diagnosis of a pod that fits nowhere
(core/framework/diagnosis.py: its nodes' statuses, grouped) becomes per-node-class reasons for the placements
topic and kube-scheduler's message for its Event (usecases/feedback), both counted from the groups, so a waiting
pod's reasons cost one string per distinct reason, not one per node.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

import numpy as np

from gpuplace.core.demand import resolve
from gpuplace.core.filters.latency_fit import DEFAULT_MARGIN
from gpuplace.core.framework import runtime
from gpuplace.core.framework.diagnosis import Diagnosis
from gpuplace.core.framework.interface import Policy, PolicyContext, Status, learns_online
from gpuplace.core.latency.model import Stream
from gpuplace.core.model import MILLI_PER_GPU, GpuRequest, Pod
from gpuplace.core.policies import registry
from gpuplace.core.policies.latency_aware import latency_aware
from gpuplace.core.snapshot import GpuType
from gpuplace.core.workload import typical_workload
from gpuplace.usecases.cluster_view import ClusterView, Placement
from gpuplace.usecases.feedback import Unschedulable, fit_error_message_of

WINDOW_PODS = 2_000  # recent pods that define the typical workload
REFRESH_EVERY = 100  # pods between rebuilds of the policy's workload


class _ClusterPolicy:
    """One cluster's policy instance; unless `keep`, rebuilt on the window of recent pods as it moves."""

    def __init__(self, name: str, options: PolicyContext, *, keep: bool = False) -> None:
        self.name = name
        self.keep = keep
        self.options = options  # the Decider's: what every build of this policy starts from
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
            self.policy = registry.create(self.name, replace(self.options, workload=workload))
            self.built_for, self.since_refresh = key, 0
        return self.policy


class Decider:
    """The `Decide` function of PlacementService for the named core policy; `planner_policy()` serves the planner.

    A pod that declares a frame rate goes through the latency filter too (DESIGN §6): only GPUs where it
    and every pod already there keep predicted p95 <= deadline x (1 - margin), by the view's latency model.
    """

    def __init__(self, policy_name: str, *, latency_margin: float = DEFAULT_MARGIN,
                 options: PolicyContext | None = None) -> None:
        if policy_name not in registry.names():  # fail at start-up, not on the first pod
            raise registry.UnknownPolicy(f"unknown policy {policy_name!r}; known: {', '.join(registry.names())}")
        self.policy_name = policy_name
        self.latency_margin = latency_margin
        self.options = options or PolicyContext()
        """The operator's policy settings (expected shapes, whole-GPU reserve) every cluster's policy is built with."""
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
            instances[view.cluster] = cluster_policy = _ClusterPolicy(self.policy_name, self.options,
                                                                  keep=self.learns_online)
        policy = cluster_policy.policy_for(view, pod, learn=learn)
        if stream is not None and view.gpu_load is not None:
            policy = latency_aware(policy, view.latency_model, view.gpu_load, {pod.name: stream},
                                   margin=self.latency_margin)
        return policy

    def planner_policy(self, view: ClusterView, pod: Pod, stream: Stream | None) -> Policy:
        """The policy the defragmentation planner scores hypothetical placements with; they feed no estimate."""
        return self.policy(view, pod, stream, learn=False)

    def __call__(self, view: ClusterView, pod: Pod, stream: Stream | None) -> Placement | dict[str, str]:
        snapshot = view.snapshot
        assert snapshot is not None
        demand = resolve(pod, snapshot)  # once, for the decision and for the Placement's share and memory
        decision = runtime.decide(snapshot, demand, self.policy(view, pod, stream), explain=True)
        if decision.diagnosis is not None:
            return Unschedulable(reasons_by_node_class(view, decision.diagnosis),
                                 fit_error_message_of(snapshot.n_nodes, decision.diagnosis.counted()))
        gpu_type = snapshot.gpu_type_id[decision.node]
        return Placement(
            node=decision.node_name or "", gpu_indices=decision.gpu_indices,
            share_milli=int(demand.share_milli_by_type[gpu_type]) if decision.gpu_indices else 0,
            gpu_memory_mib=int(demand.gpu_memory_mib_by_type[gpu_type]) if decision.gpu_indices else 0,
            cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib, stream=stream, rules=pod.rules,
            score=decision.score, runners_up=decision.runners_up,
        )


def decider(policy_name: str, *, latency_margin: float = DEFAULT_MARGIN, options: PolicyContext | None = None
            ) -> Decider:
    return Decider(policy_name, latency_margin=latency_margin, options=options)


def policy_options(expected_shapes: str = "", whole_gpu_reserve: float | None = None) -> PolicyContext:
    """The operator's policy settings (GPUPLACE_EXPECTED_SHAPES, GPUPLACE_WHOLE_GPU_RESERVE) as the options every
    cluster's policy is built with: placement decides with them and a replay decides again with them. ValueError
    names an expected shape that is not one."""
    return PolicyContext(expected_shapes=parse_expected_shapes(expected_shapes), whole_gpu_reserve=whole_gpu_reserve)


def parse_expected_shapes(text: str) -> tuple[GpuRequest, ...]:
    """GPU requests the operator expects before any is seen (GPUPLACE_EXPECTED_SHAPES), separated by commas:
    `COUNTxgpu` (whole GPUs), `COUNTxSHAREm` (milli of each GPU) or `COUNTxMEMORYMi` (GPU memory of each), each
    optionally `@MODEL|MODEL`; e.g. "8xgpu,4xgpu@NVIDIA-H200,1x20480Mi". ValueError names the entry that is not one."""
    requests = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        body, _, models = entry.partition("@")
        count, sep, what = body.partition("x")
        try:
            if not sep or not count.isdigit() or int(count) < 1:
                raise ValueError("COUNT must be a positive integer")
            allowed = tuple(filter(None, models.split("|")))
            if what == "gpu":
                request = GpuRequest(int(count), share_milli=MILLI_PER_GPU, allowed_models=allowed)
            elif what.endswith("Mi") and what[:-2].isdigit():
                request = GpuRequest(int(count), memory_mib=int(what[:-2]), allowed_models=allowed)
            elif what.endswith("m") and what[:-1].isdigit():
                request = GpuRequest(int(count), share_milli=int(what[:-1]), allowed_models=allowed)
            else:
                raise ValueError("expected gpu, SHAREm or MEMORYMi after the x")
        except ValueError as error:
            raise ValueError(f"expected shape {entry!r}: {error} (COUNTxgpu, COUNTxSHAREm or COUNTxMEMORYMi, "
                             "optionally @MODEL|MODEL)") from None
        requests.append(request)
    return tuple(requests)


def reasons_by_node_class(view: ClusterView, diagnosis: Diagnosis) -> dict[str, str]:
    """Per GPU product: how many nodes said what (the most common reason first, ties in node order, three at most),
    each reason followed by the filter that gave it in parentheses, e.g.
    "2 node(s): node(s) were unschedulable (NodeRules)". Counted on arrays: the text of a (status, class) pair is
    built once, and pairs whose texts read the same (another code, say) count together.

    A status that keeps per-node numbers apart (interface.PerNode: GpuFit's GPUs with room and largest hole) says
    them per class: as one node would when all the class's nodes with it have the same numbers, else as the
    most and the largest among them ("fewer than 8 GPU(s) ... (at most 5 such GPU(s) on a node, largest hole ...)"),
    so a class of nodes with as many different holes reads as one line."""
    assert view.snapshot is not None
    snapshot = view.snapshot
    products = [t.model or "cpu-only" for t in snapshot.gpu_types]
    names = sorted(set(products))
    class_of_type = np.array([names.index(p) for p in products], dtype=np.int64)
    counts = diagnosis.counts_by(class_of_type[snapshot.gpu_type_id])
    distinct = diagnosis.distinct
    text_ids: dict[str, int] = {}
    text_of_pair = np.array(
        [text_ids.setdefault(_text(distinct[s], low, high), len(text_ids))
         for s, low, high in zip(counts.status.tolist(), counts.low.tolist(), counts.high.tolist(), strict=True)]
        or [0], dtype=np.int64)[:len(counts.status)]
    texts = list(text_ids)
    # merge (class, text) pairs, then per class: most nodes first, then the earliest node (Counter.most_common's
    # order on the per-node counts this replaced)
    width = max(len(texts), 1)
    pair = counts.label * width + text_of_pair
    unique, inverse = np.unique(pair, return_inverse=True)
    total = np.bincount(inverse, weights=counts.nodes).astype(np.int64)
    earliest = np.full(len(unique), snapshot.n_nodes, dtype=np.int64)
    np.minimum.at(earliest, inverse, counts.first)
    pair_cls, pair_text = unique // width, unique % width
    out: dict[str, list[str]] = {}
    for c, n, t in zip(*(a[np.lexsort((earliest, -total, pair_cls))].tolist() for a in (pair_cls, total, pair_text)),
                       strict=True):
        kept = out.setdefault(names[c], [])
        if len(kept) < 3:
            kept.append(f"{n} node(s): {texts[t]}")
    return {product: ", ".join(kept) for product, kept in sorted(out.items())}


def _text(status: Status, low: list[int], high: list[int]) -> str:
    """A status as a node-class report says it: its reasons (with its nodes' numbers, see reasons_by_node_class),
    then the filter that gave them in parentheses."""
    if status.per_node is not None:
        template = status.per_node.node if low == high else status.per_node.node_class
        reason = template.format(*high)
    else:
        reason = "; ".join(status.reasons) or status.code.name.lower()
    return f"{reason} ({status.plugin})" if status.plugin else reason


__all__ = ["Decider", "decider", "parse_expected_shapes", "policy_options", "reasons_by_node_class"]
