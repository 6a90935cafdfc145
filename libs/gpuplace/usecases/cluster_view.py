"""One cluster's placement state in memory, rebuilt from PostgreSQL (the truth) whenever in doubt.

The placement service decides against this view and then asks the database to reserve; only after the
database agreed does the view charge the same resources. A disagreement (another worker took the GPU,
an operator edited a row) is resolved by re-hydrating, never by trusting memory over the database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuplace.core.demand import resolve
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import DEFAULT_MODEL, LatencyModel, Stream
from gpuplace.core.model import MILLI_PER_GPU, Gpu, GpuRequest, Node, Pod
from gpuplace.core.node_rules import (
    NO_RULES,
    HostPort,
    NodeFacts,
    PodRules,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from gpuplace.core.snapshot import ClusterSnapshot, kind_of
from gpuplace.usecases import dra
from gpuplace.usecases.ports import GpuGrant, Reservation, Row

SCORE_KEY, RUNNERS_UP_KEY = "score", "runners_up"  # in a `decided` event's reasons


@dataclass(frozen=True)
class Placement:
    """A pod's place on one node, the one value a decision takes from the policy to the bind: per GPU index its
    share and memory, plus CPU and memory; its frames and rules, which the view charges with it; and, when the
    policy scored it, the score and the next best candidates that the `decided` event records for `gpuplace
    explain`. The view holds one per pod (`holds`); the database gets its `reservation`."""

    node: str
    gpu_indices: tuple[int, ...]
    share_milli: int
    gpu_memory_mib: int
    cpu_milli: int
    memory_mib: int
    stream: Stream | None = None  # the pod's frames, for the latency model (None: no frame rate declared)
    rules: PodRules = NO_RULES  # its host ports and countables, taken on the node with its slot
    score: float | None = None  # the policy's score of `node` (None: not scored, e.g. adopted or charged)
    runners_up: tuple[tuple[str, float], ...] = ()  # (node, score) of the next best candidates, best first

    def reasons(self) -> dict[str, str]:
        """The `decided` event's reasons: the chosen node's score and the runners-up, when the policy scored."""
        if self.score is None:
            return {}
        reasons = {SCORE_KEY: f"{self.score:.6g}"}
        if self.runners_up:
            reasons[RUNNERS_UP_KEY] = ", ".join(f"{node}={score:.6g}" for node, score in self.runners_up)
        return reasons

    def grants(self) -> tuple[GpuGrant, ...]:
        return tuple(GpuGrant(i, self.gpu_memory_mib, self.share_milli) for i in self.gpu_indices)

    def reservation(self, pod_uid: str, decision_id: str) -> Reservation:
        """This place as one pod's row of a batch of reservations (repositories.Allocations.reserve_many)."""
        return Reservation(pod_uid, self.node, self.grants(), self.cpu_milli, self.memory_mib, decision_id)


@dataclass
class ClusterView:
    """The snapshot (capacity), the streams on each GPU (latency), and who holds what."""

    cluster: str
    snapshot: ClusterSnapshot | None
    holds: dict[str, Placement] = field(default_factory=dict)  # pod uid -> what it holds
    gpu_load: GpuLoad | None = None
    latency_model: LatencyModel = DEFAULT_MODEL

    @classmethod
    def hydrate(cls, cluster: str, nodes: Sequence[Row], gpus: Sequence[Row], allocations: Sequence[Row],
                pods: Sequence[Row], latency_model: LatencyModel = DEFAULT_MODEL) -> ClusterView:
        """Build the view from the rows of `nodes`, `gpus`, `allocations` and the pods holding them (every pod
        bound or reserved on a node, gpuplace's or another scheduler's).

        Cordoned and NotReady nodes stay in the snapshot: the NodeRules filter keeps pods off them unless
        they tolerate it, as kube-scheduler does, and says why."""
        gpus_by_node: dict[str, list[Row]] = {}
        for g in gpus:
            gpus_by_node.setdefault(g["node"], []).append(g)
        core_nodes = [_core_node(n, gpus_by_node.get(n["name"], [])) for n in nodes]
        snapshot = ClusterSnapshot(core_nodes, [node_facts(n) for n in nodes]) if core_nodes else None
        if snapshot is not None:
            for row, n in enumerate(nodes):
                for g in gpus_by_node.get(n["name"], []):
                    snapshot.observed_used_memory_mib[row, g["index"]] = g["memory_observed_mib"] or 0
                    if g.get("slo_blocked_at") is not None or not g.get("healthy", True):
                        # Closed to new pods (a deadline miss, or a sick GPU): filters see no GPU there;
                        # the pods already on it keep their hold and can still be refunded.
                        snapshot.gpu_exists[row, g["index"]] = False
        pod_rows = {p["uid"]: p for p in pods}
        grants: dict[str, list[Row]] = {}
        for a in allocations:
            grants.setdefault(a["pod_uid"], []).append(a)
        holds = {}
        for uid, rows in grants.items():
            pod = pod_rows.get(uid)
            holds[uid] = Placement(
                node=rows[0]["node"], gpu_indices=tuple(sorted(r["gpu_index"] for r in rows)),
                share_milli=rows[0]["share_milli"], gpu_memory_mib=rows[0]["memory_mib"],
                cpu_milli=pod["cpu_milli"] if pod else 0, memory_mib=pod["memory_mib"] if pod else 0,
                stream=pod_stream(pod) if pod else None, rules=pod_rules(pod) if pod else NO_RULES,
            )
        for uid, pod in pod_rows.items():  # pods that hold no GPU still take CPU, a slot and their ports
            if uid not in holds and pod.get("node"):
                holds[uid] = Placement(pod["node"], (), 0, 0, pod["cpu_milli"], pod["memory_mib"], rules=pod_rules(pod))
        view = cls(cluster, snapshot, holds, latency_model=latency_model)
        if snapshot is not None:
            view.gpu_load = GpuLoad.for_snapshot(snapshot)
            view._count_kinds()
            view._count_slots(nodes)
        return view

    def _count_slots(self, nodes: Sequence[Row]) -> None:
        """Pod slots, host ports and countables in use: what the holders of each node take (CPU and memory
        are already net of them in the node rows)."""
        snapshot = self.snapshot
        assert snapshot is not None
        for row, n in enumerate(nodes):
            if n.get("max_pods") is not None:
                snapshot.pods_free[row] = n["max_pods"]
        for hold in self.holds.values():
            if self.has_node(hold.node):
                snapshot.take_slots(snapshot.index_of(hold.node), hold.rules, 1)

    def _count_kinds(self) -> None:
        """Per-node counts of request kinds (GpuClustering's input) and the streams on each GPU (latency),
        which rows alone do not carry."""
        assert self.snapshot is not None and self.gpu_load is not None
        for uid, hold in self.holds.items():
            if hold.gpu_indices and self.has_node(hold.node):
                row = self.snapshot.index_of(hold.node)
                self.snapshot.gpu_pods_by_kind[row, kind_of(len(hold.gpu_indices), hold.share_milli)] += 1
                if hold.stream is not None:
                    self.gpu_load.charge(uid, row, hold.gpu_indices, hold.stream)

    def gpus_for_bound_pod(self, node: str, pod: Pod) -> tuple[tuple[int, ...], int, int]:
        """GPU indices, share and memory per GPU to charge for a pod another scheduler bound to `node`.

        That scheduler's device plugin picks the GPUs and does not say which, so the pod is charged where it
        costs gpuplace's pods least: whole GPUs on the emptiest GPUs, a slice on the fullest GPU it fits
        (else the emptiest). What no GPU has room for is over-committed by the other scheduler; the caller
        charges what fits."""
        snapshot = self.snapshot
        if snapshot is None or not self.has_node(node) or not pod.gpu.needs_gpu:
            return (), 0, 0
        row = snapshot.index_of(node)
        demand = resolve(pod, snapshot)
        type_id = snapshot.gpu_type_id[row]
        share, memory = int(demand.share_milli_by_type[type_id]), int(demand.gpu_memory_mib_by_type[type_id])
        free = np.where(snapshot.gpu_exists[row], snapshot.free_memory_mib[row], -1)  # (max_gpus,)
        fits = np.flatnonzero((free >= memory) & (snapshot.free_share_milli[row] >= share))
        if demand.gpu_count == 1 and len(fits):
            return (int(fits[np.argmin(free[fits])]),), share, memory
        emptiest = np.argsort(-free, kind="stable")[: min(demand.gpu_count, int(snapshot.gpu_count[row]))]
        return tuple(sorted(int(i) for i in emptiest)), share, memory

    def gpus_for_claimed_pod(self, node: str, claims: Sequence[Mapping[str, Any]]
                             ) -> tuple[tuple[int, ...], int, int] | None:
        """GPU indices, share and memory per GPU that a pod's allocated DRA claims hold on `node` (exactly: the
        allocation names the devices); None when none of its claims is allocated there (usecases/dra)."""
        snapshot = self.snapshot
        if snapshot is None or not claims or not self.has_node(node):
            return None
        row = snapshot.index_of(node)
        found = dra.claimed_gpus(claims, node, int(snapshot.gpu_memory_mib[row]))
        if found is None:
            return None
        indices = tuple(i for i in found[0] if i < int(snapshot.gpu_count[row]))
        return (indices, found[1], found[2]) if indices else None

    def allows_any(self, rules: PodRules, rows: Sequence[int]) -> bool:
        """Whether a pod with `rules` may use one of the nodes at `rows`, by their labels, taints and cordon."""
        assert self.snapshot is not None
        mask = self.snapshot.static_mask(rules)
        return mask is None or bool(mask[list(rows)].any())

    def has_node(self, name: str) -> bool:
        return self.snapshot is not None and self.snapshot.has_node(name)

    def node_labels(self, name: str) -> Mapping[str, str] | None:
        """The labels gpuplace stores for node `name` (its own and gpuplace's), None when the view lacks it."""
        if not self.has_node(name):
            return None
        assert self.snapshot is not None
        facts = self.snapshot.facts
        return facts[self.snapshot.index_of(name)].labels if facts is not None else None

    def charge(self, uid: str, hold: Placement) -> None:
        if self.has_node(hold.node):
            assert self.snapshot is not None
            row = self.snapshot.index_of(hold.node)
            self.snapshot.charge(row, hold.gpu_indices, hold.cpu_milli, hold.memory_mib, hold.share_milli,
                                 hold.gpu_memory_mib, kind_of(len(hold.gpu_indices), hold.share_milli), hold.rules)
            if hold.stream is not None and self.gpu_load is not None and hold.gpu_indices:
                self.gpu_load.charge(uid, row, hold.gpu_indices, hold.stream)
        self.holds[uid] = hold

    def refund(self, uid: str) -> Placement | None:
        hold = self.holds.pop(uid, None)
        if self.gpu_load is not None:
            self.gpu_load.refund(uid)  # safe for a pod it never carried
        if hold is not None and self.has_node(hold.node):
            assert self.snapshot is not None
            self.snapshot.refund(self.snapshot.index_of(hold.node), hold.gpu_indices, hold.cpu_milli,
                                 hold.memory_mib, hold.share_milli, hold.gpu_memory_mib,
                                 kind_of(len(hold.gpu_indices), hold.share_milli), hold.rules)
        return hold


def _core_node(node: Row, gpus: Sequence[Row]) -> Node:
    """A node row -> the core's Node. Free CPU and memory floor at 0: another scheduler may have bound more
    than the node has (kubelet then rejects its pod), which leaves nothing for gpuplace, not less than nothing.

    GPU topology counts only when every GPU row of the node has it (the core takes all or none): a row missing it
    -- a GPU added before its labels were -- leaves the node without topology until the next node event."""
    ordered = sorted(gpus, key=lambda g: g["index"])
    topology = {key: [g.get(key) for g in ordered] for key in ("numa_node", "nvlink_domain")}
    for key, values in topology.items():
        if None in values:
            topology[key] = [None] * len(ordered)
    return Node(
        name=node["name"], cpu_milli=node["cpu_milli"], memory_mib=node["memory_mib"],
        cpu_free_milli=max(0, node["cpu_milli"] - node["cpu_assigned_milli"]),
        memory_free_mib=max(0, node["memory_mib"] - node["memory_assigned_mib"]),
        gpus=tuple(
            Gpu(index=g["index"], model=g["model"] or "", memory_mib=g["memory_total_mib"],
                free_share_milli=MILLI_PER_GPU - g["share_assigned_milli"],
                free_memory_mib=g["memory_total_mib"] - g["memory_assigned_mib"],
                numa_node=topology["numa_node"][i], nvlink_domain=topology["nvlink_domain"][i])
            for i, g in enumerate(ordered)
        ),
    )


def core_pod(row: Row) -> Pod:
    """A stored pod row -> the core's Pod."""
    request = row["request"]
    gpu = GpuRequest() if not request else GpuRequest(
        count=request["gpu_count"], share_milli=request.get("share_milli_per_gpu"),
        memory_mib=request.get("memory_mib_per_gpu"), allowed_models=tuple(request.get("allowed_models") or ()),
        topology=request.get("topology") or "preferred",
    )
    return Pod(name=f"{row['namespace']}/{row['name']}", cpu_milli=row["cpu_milli"], memory_mib=row["memory_mib"],
               gpu=gpu, priority=row["priority"], deadline_ms=row["deadline_ms"], frame_rate_hz=row["frame_rate_hz"],
               workload_class=row["workload"], rules=pod_rules(row))


def pod_rules(row: Row) -> PodRules:
    """The `rules` column (PodEvent's node-rule fields, as JSON) -> the core's PodRules."""
    raw: Mapping[str, Any] | None = row.get("rules")
    if not raw or not any(raw.values()):  # most pods ask for nothing: no parsing on every re-read
        return NO_RULES
    return PodRules(
        node_selector=tuple(sorted((raw.get("node_selector") or {}).items())),
        required_terms=tuple(_term(t) for t in raw.get("required_terms") or ()),
        preferred_terms=tuple((p["weight"], _term(p["term"])) for p in raw.get("preferred_terms") or ()),
        tolerations=tuple(Toleration(**t) for t in raw.get("tolerations") or ()),
        host_ports=tuple(HostPort(**p) for p in raw.get("host_ports") or ()),
        extended=tuple(sorted({**(raw.get("extended") or {}), **(raw.get("resources") or {})}.items())),
        # what confines its GPU share, unless the operator lets it go where nothing does (usecases/enforcement)
        gpu_enforcement=() if raw.get("unenforced_sharing") else tuple(raw.get("gpu_enforcement") or ()),
    )


def _term(raw: Mapping[str, Any]) -> SelectorTerm:
    def requirements(key: str) -> tuple[Requirement, ...]:
        return tuple(Requirement(r["key"], r["operator"], tuple(r.get("values") or ())) for r in raw.get(key) or ())
    return SelectorTerm(requirements("match_expressions"), requirements("match_fields"))


def node_facts(row: Row) -> NodeFacts:
    """A node row -> the core's NodeFacts; taints are stored as kube prints them, "key=value:Effect"."""
    return NodeFacts(name=row["name"], labels=row.get("labels") or {}, taints=tuple(_taint(t) for t in row.get("taints")
                     or ()), unschedulable=row["unschedulable"], ready=row["ready"], extended=row.get("extended") or {},
                     present=row.get("absent_since") is None)


def _taint(text: str) -> Taint:
    key_value, _, effect = text.rpartition(":")
    key, _, value = key_value.partition("=")
    return Taint(key, value, effect)


def pod_stream(row: Row, pod: Pod | None = None) -> Stream | None:
    """The frames a stored pod declares (None without a frame rate), with its profiled service time. `pod`: the
    core Pod already built of `row`, if the caller has it (a decision does), so it is not built twice."""
    if row.get("frame_rate_hz") is None:
        return None
    return Stream.of(pod if pod is not None else core_pod(row), service_ms=row.get("service_ms"))


__all__ = ["ClusterView", "Placement", "RUNNERS_UP_KEY", "SCORE_KEY", "core_pod", "node_facts", "pod_rules",
           "pod_stream"]
