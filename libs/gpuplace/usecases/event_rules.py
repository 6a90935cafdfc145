"""How an event changes one cluster's placement state, written once for the two that apply events.

The placement service applies nodes.v1 and pods.v1 through its database: ingest.py stores a node's record, and
bound_news.py charges a pod bound without gpuplace where it runs, moves that charge when the pod runs elsewhere,
and refunds a deleted pod. Replay (usecases/replay.py) applies the same log to a view it keeps in memory
(`ClusterFromEvents`, below). Both call the rules here, so they cannot drift apart: which node record an event
stores, what a pod seen bound changes (charge, move, confirm), which GPUs a pod bound elsewhere is charged on and
which of them its scheduler over-committed, how much CPU and memory it takes, what a deletion refunds, and that a
deleted node with pods on it stays (absent, closed to new pods) until its last pod goes. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuplace.contracts.events import NodeEvent, PodEvent
from gpuplace.usecases import dra, enforcement
from gpuplace.usecases.cluster_view import ClusterView, Placement, core_pod, pod_rules, pod_stream
from gpuplace.usecases.pod_rows import pod_row, refusal
from gpuplace.usecases.pod_states import PodState
from gpuplace.usecases.ports import Row

CHARGE, MOVE, CONFIRM = "charge", "move", "confirm"  # what a pod seen bound changes (bound_change)
UNPLACED = (PodState.PENDING, PodState.UNSCHEDULABLE, PodState.INVALID)


# -- nodes --------------------------------------------------------------------------------------------------
def node_record(event: NodeEvent) -> dict[str, Any]:
    """The node an upsert event stores (repositories.Nodes.upsert_node): its labels as placement reads them, with
    its DRA driver's (usecases/dra) and its GPU sharing enforcement's (usecases/enforcement) added."""
    return {
        "cluster": event.cluster, "name": event.name, "region": event.region,
        "cpu_milli": event.cpu_milli, "memory_mib": event.memory_mib, "gpu_model": event.gpu_model,
        "gpu_count": event.gpu_count, "gpu_memory_mib": event.gpu_memory_mib, "ready": event.ready,
        "unschedulable": event.unschedulable, "taints": list(event.taints),
        "labels": enforcement.node_labels(dra.node_labels(event.labels, event.dra_driver), event.gpu_enforcement),
        "max_pods": event.max_pods, "extended": {**event.extended, **event.resources},
        "gpu_numa": list(event.gpu_numa), "gpu_nvlink": list(event.gpu_nvlink),
    }


def fresh_rows(record: Mapping[str, Any], *, absent: bool = False,
               closed: frozenset[int] = frozenset()) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A node record's row and GPU rows as upsert_node makes them, nothing assigned yet (the holds are charged
    on the view after): `absent`, deleted while pods still hold there; `closed`, GPUs an SLO violation closed."""
    count = record["gpu_count"]
    numa, nvlink = record.get("gpu_numa") or (), record.get("gpu_nvlink") or ()
    node = {**record, "cpu_assigned_milli": 0, "memory_assigned_mib": 0, "absent_since": "absent" if absent else None}
    gpus = [{"node": record["name"], "index": i, "model": record["gpu_model"],
             "memory_total_mib": record["gpu_memory_mib"], "share_assigned_milli": 0, "memory_assigned_mib": 0,
             "memory_observed_mib": 0, "healthy": True, "slo_blocked_at": "closed" if i in closed else None,
             "numa_node": numa[i] if len(numa) == count else None,
             "nvlink_domain": nvlink[i] if len(nvlink) == count else None} for i in range(count)]
    return node, gpus


# -- pods ---------------------------------------------------------------------------------------------------
def bound_at(event: PodEvent) -> str | None:
    """Where a pod seen bound, or another scheduler's pod, is charged: its node, else where it was nominated."""
    return event.node_name or event.nominated_node_name


def bound_change(event: PodEvent, state: str | None, node: str | None) -> str | None:
    """What a pod seen bound (or another scheduler's pod) changes, by the state placement holds it in (None: never
    seen) and the node it holds: CHARGE one not placed where it runs; MOVE one recorded bound on another node;
    CONFIRM one reserved on the node it runs on (its bind happened); None: nothing."""
    where = bound_at(event)
    if not where:
        return None
    if state is None or state in UNPLACED:
        return CHARGE
    if state == PodState.BOUND and node != where:
        return MOVE
    if state == PodState.RESERVED and node == event.node_name:
        return CONFIRM
    return None


def bound_grants(view: ClusterView, row: Row, node: str) -> tuple[tuple[int, ...], int, int]:
    """GPU indices, share and memory per GPU a pod bound without gpuplace takes on `node`: what its allocated DRA
    claims name there, else where it costs gpuplace's pods least (ClusterView.gpus_for_bound_pod)."""
    claimed = view.gpus_for_claimed_pod(node, (row.get("rules") or {}).get("dra_claims") or ())
    return claimed or view.gpus_for_bound_pod(node, core_pod(row))


def over_committed(view: ClusterView, node: str, gpu_indices: tuple[int, ...], share: int, memory: int) -> list[int]:
    """The GPUs of a pod bound elsewhere that have no room left for it: its scheduler over-committed them, and
    they are not charged. The database decides it in repositories.Allocations.charge_bound; this is the same test on a
    view (replay's, which has no database)."""
    snapshot = view.snapshot
    assert snapshot is not None
    at = snapshot.index_of(node)
    return [i for i in gpu_indices
            if snapshot.free_share_milli[at, i] < share or snapshot.free_memory_mib[at, i] < memory]


def bound_hold(row: Row, node: str, grants: tuple[tuple[int, ...], int, int], refused: list[int]) -> Placement:
    """What a pod bound without gpuplace holds on `node`: its GPUs but the over-committed ones, its CPU and memory
    (the node runs it, whatever gpuplace thought was free), its frames and rules."""
    gpu_indices, share, memory = grants
    kept = tuple(i for i in gpu_indices if i not in refused)
    return Placement(node, kept, share if kept else 0, memory if kept else 0, row["cpu_milli"], row["memory_mib"],
                     pod_stream(row), pod_rules(row))


def within_node(view: ClusterView, hold: Placement) -> Placement:
    """A hold as the view charges it: CPU and memory up to what the node has left (the database counts it all,
    the view's free amounts floor at 0, as hydrating them does)."""
    snapshot = view.snapshot
    assert snapshot is not None
    at = snapshot.index_of(hold.node)
    return replace(hold, cpu_milli=min(hold.cpu_milli, int(snapshot.cpu_free_milli[at])),
                   memory_mib=min(hold.memory_mib, int(snapshot.memory_free_mib[at])))


def refunds_on_delete(state: str, planned: bool) -> bool:
    """Whether a deleted pod gives its resources back now: unless a plan in flight reserved it on GPUs its
    victims may still run on (the plan releases it as it settles, usecases/defrag)."""
    return not (state == PodState.RESERVED and planned)


# -- a cluster from its events, in memory -------------------------------------------------------------------
@dataclass
class ClusterFromEvents:
    """One cluster's state as its events leave it, by the rules above, without a database: its nodes, pods, and
    what each pod holds (in the order it was charged). Replay keeps one; the view is rebuilt, every hold charged
    again in order, after a node changes."""

    cluster: str
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> node_record
    absent: set[str] = field(default_factory=set)  # deleted while pods hold there
    closed: set[tuple[str, int]] = field(default_factory=set)  # (node, GPU index) closed to new pods
    pods: dict[str, Row] = field(default_factory=dict)  # uid -> pods row (first seen)
    states: dict[str, PodState] = field(default_factory=dict)
    holds: dict[str, Placement] = field(default_factory=dict)
    awaiting: dict[str, str] = field(default_factory=dict)  # uid -> node bound to before it was known
    _view: ClusterView | None = None

    def node(self, event: NodeEvent) -> None:
        """A node upsert (its record replaced, present again), or its deletion (kept absent while pods hold)."""
        if event.kind == "deleted":
            if any(h.node == event.name for h in self.holds.values()):
                self.absent.add(event.name)
            else:
                self.nodes.pop(event.name, None)
        else:
            self.nodes[event.name] = node_record(event)
            self.absent.discard(event.name)
        self._view = None
        for uid in [u for u, n in self.awaiting.items() if n == event.name and event.kind != "deleted"]:
            self._charge_bound(uid, self.awaiting.pop(uid))

    def close_gpu(self, node: str, index: int) -> None:
        self.closed.add((node, index))
        self._view = None

    def pod(self, event: PodEvent, seen_ms: int | None = None) -> Row:
        """A pod seen (not deleted): its row, kept from its first event (`seen_ms`, its `first_seen_at`); INVALID
        when placement refuses it."""
        if event.uid not in self.pods:
            self.pods[event.uid] = {**pod_row(event), "first_seen_at": seen_ms}
            self.states[event.uid] = PodState.INVALID if event.managed and refusal(event) else PodState.PENDING
        return self.pods[event.uid]

    def waiting(self) -> list[Row]:
        """gpuplace's pods without a place (not refused)."""
        return [row for uid, row in self.pods.items()
                if row["managed"] and uid not in self.holds and self.states[uid] != PodState.INVALID]

    def bound(self, event: PodEvent) -> None:
        """A pod seen bound, or another scheduler's pod: charged, moved or confirmed (bound_change)."""
        uid, where = event.uid, bound_at(event)
        hold = self.holds.get(uid)
        change = bound_change(event, self.states.get(uid), hold.node if hold else self.awaiting.get(uid))
        if change == CONFIRM:
            self.states[uid] = PodState.BOUND
        elif change in (CHARGE, MOVE) and where:
            self.refund(uid)
            self.states[uid] = PodState.BOUND
            self._charge_bound(uid, where)

    def _charge_bound(self, uid: str, node: str) -> None:
        view = self.view()
        if not view.has_node(node):
            self.awaiting[uid] = node  # charged when the node arrives
            return
        row = self.pods[uid]
        grants = bound_grants(view, row, node)
        self.charge(uid, within_node(view, bound_hold(row, node, grants, over_committed(view, node, *grants))))

    def bind_failed(self, uid: str) -> None:
        """A bind failed: what the pod held is given back and it waits again."""
        self.refund(uid)
        if uid in self.states:
            self.states[uid] = PodState.PENDING

    def deleted(self, uid: str) -> bool:
        """A pod deleted: forgotten, its resources given back; True when it held some."""
        self.pods.pop(uid, None)
        self.states.pop(uid, None)
        self.awaiting.pop(uid, None)
        return self.refund(uid)

    def view(self) -> ClusterView:
        """The view as the service hydrates it: nodes by name, then every hold charged in order."""
        if self._view is None:
            rows = [fresh_rows(self.nodes[name], absent=name in self.absent,
                               closed=frozenset(i for n, i in self.closed if n == name)) for name in sorted(self.nodes)]
            self._view = ClusterView.hydrate(self.cluster, [n for n, _ in rows], [g for _, gs in rows for g in gs],
                                             [], [])
            for uid, hold in list(self.holds.items()):
                self._charge_view(uid, hold)
        return self._view

    def charge(self, uid: str, hold: Placement, state: PodState = PodState.BOUND) -> None:
        """`uid` holds `hold` now (what it held before given back)."""
        self.refund(uid)
        self.holds[uid] = hold
        if uid in self.states:
            self.states[uid] = state
        if self._view is not None:
            self._charge_view(uid, hold)

    def _charge_view(self, uid: str, hold: Placement) -> None:
        view = self._view
        assert view is not None
        try:
            view.charge(uid, hold)
        except ValueError:  # over-committed by another scheduler: the service's database refuses it too
            view.holds[uid] = hold

    def refund(self, uid: str) -> bool:
        """What `uid` holds given back (a node deleted under it goes with its last pod); True when it held some."""
        hold = self.holds.pop(uid, None)
        if hold is None:
            return False
        if self._view is not None:
            self._view.refund(uid)
        if hold.node in self.absent and not any(h.node == hold.node for h in self.holds.values()):
            self.absent.discard(hold.node)
            self.nodes.pop(hold.node, None)
            self._view = None
        return True


__all__ = ["CHARGE", "CONFIRM", "MOVE", "ClusterFromEvents", "bound_at", "bound_change", "bound_grants", "bound_hold",
           "fresh_rows", "node_record", "over_committed", "refunds_on_delete", "within_node"]
