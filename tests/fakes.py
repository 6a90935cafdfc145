"""Complete in-memory implementations of the use cases' ports (usecases/ports.py), for unit tests.

They pass the same contract suites as the real adapters (tests/contract/), so a use case tested against
them behaves the same against PostgreSQL and the Kubernetes API: FakeUnitOfWork is a UnitOfWork and an
OutboxUnitOfWork, FakeClusterApi a ClusterApi.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuplace.adapters.kube.vocabulary import ASSIGNMENT
from gpuplace.contracts.rejected import Rejected, reused_id
from gpuplace.usecases.pod_states import HOLDING, PLACED, WAITING, PodState, check, check_initial
from gpuplace.usecases.ports import (
    BindOutcome,
    DefragPlanRecord,
    EvictOutcome,
    GpuGrant,
    Json,
    NodeCapacity,
    PlanState,
    Reservation,
    Retained,
    Row,
)


@dataclass
class FakeDatabase:
    """The tables, as dicts. A unit of work copies them on begin and swaps them in on commit."""

    nodes: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    gpus: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    allocations: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    plans: dict[tuple[str, str], DefragPlanRecord] = field(default_factory=dict)  # (cluster, plan id), planned order
    outbox: list[dict[str, Any]] = field(default_factory=list)
    processed: dict[tuple[str, str], str | None] = field(default_factory=dict)  # (consumer, event id) -> digest
    processed_at: dict[tuple[str, str], datetime] = field(default_factory=dict)  # (consumer, event id) -> when
    retention_marks: dict[str, datetime] = field(default_factory=dict)  # Retained value -> pruned_before
    latency: list[dict[str, Any]] = field(default_factory=list)
    latency_models: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    clock: itertools.count = field(default_factory=lambda: itertools.count(1), repr=False)

    def tables(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("nodes", "gpus", "pods", "allocations", "decisions", "plans", "outbox",
                                              "processed", "processed_at", "latency", "latency_models",
                                              "retention_marks")}


def _percentile_cont(ordered: list[float], fraction: float) -> float:
    """PostgreSQL's percentile_cont: linear interpolation between the two nearest ranks."""
    at = fraction * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


class FakeTables:
    """What the fake repositories share: the unit of work's copy of the tables (FakeUnitOfWork), its clock,
    and the cascades PostgreSQL's foreign keys would do."""

    def __init__(self, tables: dict[str, Any], clock: itertools.count) -> None:
        self.t = tables
        self._clock = clock

    def _now(self) -> datetime:
        return datetime.fromtimestamp(next(self._clock), UTC)

    def _drop_gpu(self, gkey: tuple[str, str, int]) -> None:
        """A GPU row goes with the grants on it (PostgreSQL's ON DELETE CASCADE)."""
        del self.t["gpus"][gkey]
        for akey in [k for k, a in self.t["allocations"].items() if (a["cluster"], a["node"], a["gpu_index"]) == gkey]:
            del self.t["allocations"][akey]

    def _drop_node(self, cluster: str, name: str) -> None:
        self.t["nodes"].pop((cluster, name), None)
        for gkey in [k for k in self.t["gpus"] if k[:2] == (cluster, name)]:
            self._drop_gpu(gkey)

    def _holders(self, cluster: str, name: str) -> list[str]:
        return sorted({a["pod_uid"] for a in self.t["allocations"].values()
                       if a["cluster"] == cluster and a["node"] == name} |
                      {p["uid"] for (c, _), p in self.t["pods"].items()
                       if c == cluster and p.get("node") == name and p["state"] in HOLDING})



class FakeEventClaims(FakeTables):
    """repositories.EventClaims on the fake's tables."""

    async def claim_events(self, consumer: str, claims: Sequence[tuple[str, str | None]]) -> set[str]:
        return {event_id for event_id, digest in claims if await self.claim_event(consumer, event_id, digest)}

    async def claim_event(self, consumer: str, event_id: str, digest: str | None = None) -> bool:
        stored = self.t["processed"].get((consumer, event_id), False)
        if stored is False:
            self.t["processed"][(consumer, event_id)] = digest
            self.t["processed_at"][(consumer, event_id)] = self._now()
            return True
        if digest is not None and stored is not None and stored != digest:
            raise Rejected(reused_id(event_id, stored, digest))
        return False


class FakeNodes(FakeTables):
    """repositories.Nodes on the fake's tables."""

    async def upsert_node(self, node: Mapping[str, Any]) -> list[int]:
        key = (node["cluster"], node["name"])
        current = self.t["nodes"].get(key, {"cpu_assigned_milli": 0, "memory_assigned_mib": 0})
        given = {k: node[k] for k in ("cluster", "name", "region", "cpu_milli", "memory_mib", "gpu_model", "gpu_count",
                                      "gpu_memory_mib", "ready", "unschedulable", "labels", "taints")}
        self.t["nodes"][key] = {**current, **given, "max_pods": node.get("max_pods"),
                                "extended": node.get("extended") or {}, "updated_at": self._now(), "absent_since": None}
        for i in range(node["gpu_count"]):
            gkey = (node["cluster"], node["name"], i)
            gpu = self.t["gpus"].get(gkey, {"cluster": node["cluster"], "node": node["name"], "index": i,
                                            "uuid": None, "memory_assigned_mib": 0, "share_assigned_milli": 0,
                                            "memory_observed_mib": None, "utilization_pct": None, "healthy": True,
                                            "telemetry_at": None, "slo_blocked_at": None})
            numa, nvlink = node.get("gpu_numa") or (), node.get("gpu_nvlink") or ()
            self.t["gpus"][gkey] = {**gpu, "model": node["gpu_model"], "memory_reported_mib": node["gpu_memory_mib"],
                                    "memory_total_mib": max(node["gpu_memory_mib"], gpu["memory_assigned_mib"]),
                                    "numa_node": numa[i] if len(numa) == node["gpu_count"] else None,
                                    "nvlink_domain": nvlink[i] if len(nvlink) == node["gpu_count"] else None}
        for gkey in [k for k in self.t["gpus"] if k[:2] == key and k[2] >= node["gpu_count"]]:
            self._drop_gpu(gkey)
        return sorted(g["index"] for k, g in self.t["gpus"].items()
                      if k[:2] == key and g["memory_reported_mib"] < g["memory_assigned_mib"])

    async def delete_node(self, cluster: str, name: str) -> list[str]:
        uids = self._holders(cluster, name)
        if uids:
            node = self.t["nodes"][(cluster, name)]
            node["absent_since"] = node.get("absent_since") or self._now()
        else:
            self._drop_node(cluster, name)
        return uids

    async def record_telemetry(self, cluster: str, node: str, index: int, **observed: Any) -> bool:
        gpu = self.t["gpus"].get((cluster, node, index))
        if gpu is None:
            return False
        gpu.update(observed, telemetry_at=self._now())
        return True

    async def load_nodes(self, cluster: str) -> list[Row]:
        return [dict(n) for k, n in sorted(self.t["nodes"].items()) if k[0] == cluster]

    async def load_gpus(self, cluster: str) -> list[Row]:
        return [dict(g) for k, g in sorted(self.t["gpus"].items()) if k[0] == cluster]

    async def cluster_names(self) -> list[str]:
        return sorted({c for c, _ in self.t["nodes"]} | {c for c, _ in self.t["pods"]})


class FakePods(FakeTables):
    """repositories.Pods on the fake's tables."""

    async def upsert_pods(self, pods: Sequence[Mapping[str, Any]]) -> list[Row]:
        return [await self.upsert_pod(pod) for pod in pods]

    async def upsert_pod(self, pod: Mapping[str, Any]) -> Row:
        key = (pod["cluster"], pod["uid"])
        current = self.t["pods"].get(key)
        check_initial(pod["state"])  # as PostgreSQL's: checked on every call, not only on insert
        if current is None:
            current = {"node": None, "reason": None, "first_seen_at": self._now(), "reserved_at": None,
                       "bound_at": None, "move_requested_at": None, "managed": True, "service_ms": None,
                       "rules": None, **pod}
        else:
            current.update({k: v for k, v in pod.items() if k not in ("cluster", "uid", "state", "node", "reason")})
        self.t["pods"][key] = current
        return dict(current)

    async def get_pod(self, cluster: str, uid: str, *, for_update: bool = False) -> Row | None:
        pod = self.t["pods"].get((cluster, uid))
        return dict(pod) if pod else None

    async def set_pod_state(self, cluster: str, uid: str, state: PodState, *, mark_bound: bool = False,
                            **fields: Any) -> None:
        pod = self.t["pods"].get((cluster, uid))
        if pod is None:
            return
        check(pod["state"], state)
        pod.update(state=state, **fields)
        if mark_bound:
            pod["bound_at"] = self._now()
        if state is PodState.RESERVED:
            pod["reserved_at"] = self._now()

    async def pods_in_state(self, cluster: str, states: Sequence[PodState]) -> list[Row]:
        rows = [dict(p) for (c, _), p in self.t["pods"].items() if c == cluster and p["state"] in states]
        return sorted(rows, key=lambda p: p["first_seen_at"])

    async def find_pods(self, name: str, *, namespace: str | None = None, cluster: str | None = None) -> list[Row]:
        found = [dict(p) for (c, _), p in self.t["pods"].items() if p["name"] == name
                 and namespace in (None, p["namespace"]) and cluster in (None, c)]
        return sorted(found, key=lambda p: (-p["first_seen_at"].timestamp(), p["cluster"], p["uid"]))

    async def count_pods_by_state(self, clusters: Sequence[str]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for (c, _), pod in self.t["pods"].items():
            if c in clusters and pod.get("managed", True):
                counts[pod["state"]] = counts.get(pod["state"], 0) + 1
        return counts

    async def find_promise(self, cluster: str, namespace: str, owner: str) -> Row | None:
        found = sorted((p for (c, _), p in self.t["pods"].items()
                        if c == cluster and p["namespace"] == namespace and p.get("owner") == owner
                        and p["state"] == PodState.PROMISED), key=lambda p: (p["first_seen_at"], p["uid"]))
        return dict(found[0]) if found else None

    async def delete_pod(self, cluster: str, uid: str) -> None:
        self.t["pods"].pop((cluster, uid), None)
        for akey in [k for k, a in self.t["allocations"].items() if a["cluster"] == cluster and a["pod_uid"] == uid]:
            del self.t["allocations"][akey]  # PostgreSQL's ON DELETE CASCADE: gone, not refunded

    async def mark_bound(self, cluster: str, uids: Sequence[str]) -> list[str]:
        moved = [uid for uid in uids
                 if (pod := self.t["pods"].get((cluster, uid))) and pod["state"] == PodState.RESERVED]
        for uid in moved:
            await self.set_pod_state(cluster, uid, PodState.BOUND, mark_bound=True)
        return moved


class FakeAllocations(FakeTables):
    """repositories.Allocations on the fake's tables."""

    async def transfer_allocations(self, cluster: str, from_uid: str, to_uid: str) -> list[Row]:
        moved: list[Row] = []
        held = [k for k, a in self.t["allocations"].items() if a["cluster"] == cluster and a["pod_uid"] == from_uid]
        for key in held:
            a = self.t["allocations"].pop(key)
            a["pod_uid"] = to_uid
            self.t["allocations"][(cluster, to_uid, a["gpu_index"])] = a
            moved.append(dict(a))
        return moved

    async def load_allocations(self, cluster: str) -> list[Row]:
        return [dict(a) for a in self.t["allocations"].values() if a["cluster"] == cluster]

    async def reserve(self, *, cluster: str, pod_uid: str, node: str, grants: Iterable[GpuGrant], cpu_milli: int,
                      memory_mib: int, decision_id: str) -> str | None:
        n = self.t["nodes"].get((cluster, node))
        if n is None or n["cpu_assigned_milli"] + cpu_milli > n["cpu_milli"] or \
                n["memory_assigned_mib"] + memory_mib > n["memory_mib"]:
            return f"node {node}: CPU or memory no longer fits"
        n["cpu_assigned_milli"] += cpu_milli
        n["memory_assigned_mib"] += memory_mib
        for g in grants:
            gpu = self.t["gpus"].get((cluster, node, g.index))
            if gpu is None or gpu["memory_assigned_mib"] + g.memory_mib > gpu["memory_total_mib"] or \
                    gpu["share_assigned_milli"] + g.share_milli > 1000:
                return f"node {node} GPU {g.index}: no longer has {g.memory_mib} MiB free"
            gpu["memory_assigned_mib"] += g.memory_mib
            gpu["share_assigned_milli"] += g.share_milli
            key = (cluster, pod_uid, g.index)
            if key in self.t["allocations"]:
                raise ValueError(f"duplicate allocation {key}")  # the primary key would refuse it
            self.t["allocations"][key] = {"cluster": cluster, "pod_uid": pod_uid, "gpu_index": g.index,
                                          "node": node, "memory_mib": g.memory_mib, "share_milli": g.share_milli,
                                          "decision_id": decision_id, "created_at": self._now()}
        return None

    async def reserve_many(self, cluster: str, reservations: Sequence[Reservation]) -> str | None:
        for r in reservations:
            if self.t["pods"][(cluster, r.pod_uid)]["state"] not in WAITING:
                return f"pod {r.pod_uid} is no longer waiting"
            refused = await self.reserve(cluster=cluster, pod_uid=r.pod_uid, node=r.node, grants=r.grants,
                                         cpu_milli=r.cpu_milli, memory_mib=r.memory_mib, decision_id=r.decision_id)
            if refused:
                return refused
            pods = FakePods(self.t, self._clock)  # the batch moves its pods too, as PostgreSQL's reserve_many does
            await pods.set_pod_state(cluster, r.pod_uid, PodState.RESERVED, node=r.node, reason=None)
        return None

    async def charge_bound(self, *, cluster: str, pod_uid: str, node: str, grants: Iterable[GpuGrant], cpu_milli: int,
                           memory_mib: int, decision_id: str) -> list[int]:
        n = self.t["nodes"].get((cluster, node))
        if n is not None:
            n["cpu_assigned_milli"] += cpu_milli
            n["memory_assigned_mib"] += memory_mib
        refused = []
        for g in grants:
            gpu = self.t["gpus"].get((cluster, node, g.index))
            if gpu is None or gpu["memory_assigned_mib"] + g.memory_mib > gpu["memory_total_mib"] or \
                    gpu["share_assigned_milli"] + g.share_milli > 1000:
                refused.append(g.index)
                continue
            gpu["memory_assigned_mib"] += g.memory_mib
            gpu["share_assigned_milli"] += g.share_milli
            self.t["allocations"][(cluster, pod_uid, g.index)] = {
                "cluster": cluster, "pod_uid": pod_uid, "gpu_index": g.index, "node": node,
                "memory_mib": g.memory_mib, "share_milli": g.share_milli, "decision_id": decision_id,
                "created_at": self._now()}
        return refused

    async def release(self, cluster: str, pod_uid: str, *, cpu_milli: int, memory_mib: int) -> str | None:
        held = [k for k, a in self.t["allocations"].items() if a["cluster"] == cluster and a["pod_uid"] == pod_uid]
        pod = self.t["pods"].get((cluster, pod_uid))
        node = pod["node"] if pod and pod["state"] in HOLDING else None
        for key in held:
            a = self.t["allocations"].pop(key)
            node = a["node"]
            gpu = self.t["gpus"].get((cluster, a["node"], a["gpu_index"]))
            if gpu is not None:
                gpu["memory_assigned_mib"] -= a["memory_mib"]
                gpu["share_assigned_milli"] -= a["share_milli"]
                reported = gpu.get("memory_reported_mib")
                gpu["memory_total_mib"] = max(gpu["memory_total_mib"] if reported is None else reported,
                                              gpu["memory_assigned_mib"])
        if node is not None and (cluster, node) in self.t["nodes"]:
            self.t["nodes"][(cluster, node)]["cpu_assigned_milli"] -= cpu_milli
            self.t["nodes"][(cluster, node)]["memory_assigned_mib"] -= memory_mib
            if self.t["nodes"][(cluster, node)].get("absent_since") and \
                    not set(self._holders(cluster, node)) - {pod_uid}:
                self._drop_node(cluster, node)  # the last holder of an absent node: it goes too
        return node


class FakeDecisions(FakeTables):
    """repositories.Decisions on the fake's tables."""

    async def add_decisions(self, decisions: Sequence[Mapping[str, Any]]) -> None:
        self.t["decisions"].extend({"created_at": self._now(), **decision} for decision in decisions)

    async def decisions_of(self, cluster: str, pod_uid: str) -> list[Row]:
        return [copy.deepcopy(d) for d in self.t["decisions"] if d["cluster"] == cluster and d["pod_uid"] == pod_uid]

    async def decisions_with_reason(self, cluster: str, kind: str, key: str, value: str) -> list[Row]:
        return [copy.deepcopy(d) for d in self.t["decisions"]
                if d["cluster"] == cluster and d["kind"] == kind and d["reasons"].get(key) == value]

    async def count_bound_twice(self, cluster: str) -> int:
        bound = [d["pod_uid"] for d in self.t["decisions"] if d["cluster"] == cluster and d["kind"] == "bound"]
        return sum(1 for uid in set(bound) if bound.count(uid) > 1)


class FakePlans(FakeTables):
    """repositories.Plans on the fake's tables."""

    async def add_plan(self, plan: DefragPlanRecord) -> None:
        self.t["plans"][(plan.cluster, plan.plan_id)] = plan  # insertion order: the order they were planned

    async def open_plans(self, cluster: str) -> list[DefragPlanRecord]:
        return [p for (c, _), p in self.t["plans"].items() if c == cluster and p.state is PlanState.PLANNED]

    async def plan_state(self, cluster: str, plan_id: str) -> PlanState | None:
        plan = self.t["plans"].get((cluster, plan_id))
        return plan.state if plan else None

    async def settle_plan(self, cluster: str, plan_id: str, state: PlanState, reason: str | None = None) -> bool:
        plan = self.t["plans"].get((cluster, plan_id))
        if plan is None or plan.state is not PlanState.PLANNED:
            return False
        self.t["plans"][(cluster, plan_id)] = replace(plan, state=state, reason=reason)
        return True

    async def plan_moving(self, cluster: str, uid: str) -> DefragPlanRecord | None:
        return next((p for (c, _), p in reversed(self.t["plans"].items())
                     if c == cluster and any(m.uid == uid for m in p.moves)), None)


class FakeOutbox(FakeTables):
    """repositories.Outbox on the fake's tables."""

    async def add_outbox(self, topic: str, key: str, payload_json: str) -> None:
        """The row keeps the payload as JSON text (what tests read back); take_unpublished decodes it, as
        PostgreSQL's JSONB column does."""
        self.t["outbox"].append({"id": len(self.t["outbox"]) + 1, "topic": topic, "key": key,
                                 "payload": payload_json, "published_at": None})

    async def add_outbox_many(self, entries: Sequence[tuple[str, str, str]]) -> None:
        for topic, key, payload_json in entries:
            await self.add_outbox(topic, key, payload_json)

    async def take_unpublished(self, limit: int) -> list[Row]:
        """No SKIP LOCKED needed: a unit of work holds the whole database until it ends (FakeUnitOfWork)."""
        rows = sorted((r for r in self.t["outbox"] if r["published_at"] is None), key=lambda r: r["id"])[:limit]
        return [{**r, "payload": json.loads(r["payload"])} for r in rows]

    async def mark_published(self, ids: Sequence[int]) -> None:
        now = self._now()
        for row in self.t["outbox"]:
            if row["id"] in ids:
                row["published_at"] = now

    async def count_unpublished(self) -> int:
        return sum(1 for r in self.t["outbox"] if r["published_at"] is None)


class FakeLatency(FakeTables):
    """repositories.Latency on the fake's tables."""

    async def add_latency_window(self, window: Mapping[str, Any]) -> None:
        self.t["latency"].append(dict(window))

    async def latency_by_workload(self, cluster: str) -> list[Row]:
        by_workload: dict[str, list[dict[str, Any]]] = {}
        for w in self.t["latency"]:
            if w["cluster"] == cluster:
                by_workload.setdefault(w["workload"], []).append(w)
        found = []
        for workload, windows in sorted(by_workload.items()):
            deadlines = [w["deadline_ms"] for w in windows if w.get("deadline_ms") is not None]
            found.append({
                "workload": workload, "windows": len(windows), "frames": sum(w["frames"] for w in windows),
                "deadline_misses": sum(w["deadline_misses"] for w in windows),
                "p95_ms": _percentile_cont(sorted(w["p95_ms"] for w in windows), 0.95),
                "worst_p95_ms": max(w["p95_ms"] for w in windows), "deadline_ms": min(deadlines, default=None)})
        return found

    async def flag_slo_violation(self, cluster: str, pod_uid: str, node: str, gpu_index: int) -> bool:
        gpu, pod = self.t["gpus"].get((cluster, node, gpu_index)), self.t["pods"].get((cluster, pod_uid))
        changed = False
        if gpu is not None and gpu.get("slo_blocked_at") is None:
            gpu["slo_blocked_at"], changed = self._now(), True
        if pod is not None and pod.get("move_requested_at") is None:
            pod["move_requested_at"], changed = self._now(), True
        return changed

    async def load_latency_model(self, name: str, *, for_update: bool = False) -> dict[str, Any] | None:
        return copy.deepcopy(self.t["latency_models"].get(name))

    async def save_latency_model(self, name: str, state: Mapping[str, Any]) -> None:
        self.t["latency_models"][name] = copy.deepcopy(dict(state))

    async def co_runners(self, cluster: str, node: str, gpu_index: int, *, exclude_uid: str) -> list[Row]:
        here = (cluster, node, gpu_index)
        uids = {a["pod_uid"] for a in self.t["allocations"].values()
                if (a["cluster"], a["node"], a["gpu_index"]) == here and a["pod_uid"] != exclude_uid}
        fields = ("frame_rate_hz", "workload", "deadline_ms")
        return [{"uid": uid, **{k: self.t["pods"][(cluster, uid)][k] for k in fields}} for uid in sorted(uids)]

    async def gpu_of_pod(self, cluster: str, namespace: str, name: str) -> Row | None:
        for (c, uid), pod in self.t["pods"].items():
            if c == cluster and pod["namespace"] == namespace and pod["name"] == name and \
                    pod["state"] in PLACED:
                for a in self.t["allocations"].values():
                    if a["cluster"] == cluster and a["pod_uid"] == uid:
                        gpu = self.t["gpus"].get((cluster, a["node"], a["gpu_index"]), {})
                        return {"node": a["node"], "gpu_index": a["gpu_index"], "uid": uid,
                                "deadline_ms": pod.get("deadline_ms"), "frame_rate_hz": pod.get("frame_rate_hz"),
                                "workload": pod.get("workload"), "model": gpu.get("model")}
        return None


class FakeRetentionRepository(FakeTables):
    """ports.RetentionStore on the fake's tables. Units of work run one at a time, so the turn is always free."""

    async def take_pruning_turn(self) -> bool:
        return True

    async def prune(self, kind: Retained, keep_s: float, limit: int) -> int:
        if keep_s < 0 or limit < 1:
            raise ValueError(f"prune {kind}: keep_s must be >= 0 and limit >= 1 (got {keep_s}, {limit})")
        cutoff = datetime.fromtimestamp(next(self._clock), UTC) - timedelta(seconds=keep_s)
        gone = self._prune(kind, cutoff, limit)
        if gone:
            self.t["retention_marks"][kind.value] = max(cutoff, self.t["retention_marks"].get(kind.value, cutoff))
        return gone

    def _prune(self, kind: Retained, cutoff: datetime, limit: int) -> int:
        """Remove up to `limit` of the oldest rows of `kind` stamped before `cutoff`; how many went."""
        t = self.t
        if kind is Retained.PROCESSED_EVENTS:
            old = sorted((at, key) for key, at in t["processed_at"].items() if at < cutoff)[:limit]
            for _, key in old:
                del t["processed"][key], t["processed_at"][key]
            return len(old)
        if kind is Retained.DELETED_PODS:
            holding = {(a["cluster"], a["pod_uid"]) for a in t["allocations"].values()}
            pods = sorted((p["first_seen_at"], key) for key, p in t["pods"].items()
                          if p["state"] == PodState.DELETED and p["first_seen_at"] < cutoff and key not in holding)
            for _, key in pods[:limit]:
                del t["pods"][key]
            return len(pods[:limit])
        name, stamp = {Retained.OUTBOX: ("outbox", "published_at"), Retained.DECISIONS: ("decisions", "created_at"),
                       Retained.LATENCY_WINDOWS: ("latency", "window_end")}[kind]
        order = stamp if kind is not Retained.OUTBOX else "id"  # the outbox goes in id order, as PostgreSQL's
        rows = t[name]
        old = sorted((r for r in rows if r.get(stamp) is not None and r[stamp] < cutoff), key=lambda r: r[order])
        gone = {id(r) for r in old[:limit]}
        rows[:] = [r for r in rows if id(r) not in gone]
        return len(gone)

    async def pruned_before(self, kind: Retained) -> datetime | None:
        at: datetime | None = self.t["retention_marks"].get(kind.value)
        return at


class FakeUnitOfWork:
    """Serialisable transactions: one at a time (a lock), working on a deep copy swapped in on commit."""

    def __init__(self, db: FakeDatabase) -> None:
        self.db = db
        self.committed = False

    async def __aenter__(self) -> FakeUnitOfWork:
        await self.db.lock.acquire()
        self._work = copy.deepcopy(self.db.tables())
        self._open_repositories()
        return self

    def _open_repositories(self) -> None:
        """One repository per aggregate, all on this unit of work's copy of the tables."""
        work, clock = self._work, self.db.clock
        self.events, self.nodes, self.pods = FakeEventClaims(work, clock), FakeNodes(work, clock), FakePods(work, clock)
        self.allocations, self.decisions = FakeAllocations(work, clock), FakeDecisions(work, clock)
        self.plans, self.outbox = FakePlans(work, clock), FakeOutbox(work, clock)
        self.latency = FakeLatency(work, clock)
        self.retention = FakeRetentionRepository(work, clock)

    async def commit(self) -> None:
        for name, value in self._work.items():
            setattr(self.db, name, value)
        self._work = copy.deepcopy(self.db.tables())
        self._open_repositories()
        self.committed = True

    async def __aexit__(self, *exc: object) -> None:
        self.db.lock.release()


class FakeUnitOfWorkFactory:
    def __init__(self, db: FakeDatabase | None = None) -> None:
        self.db = db or FakeDatabase()

    def __call__(self) -> FakeUnitOfWork:
        return FakeUnitOfWork(self.db)


@dataclass
class FakeClusterApi:
    """One cluster's apiserver, as far as placement needs one: every pod not `gone` exists (pending unless
    bound), so unit tests create pods by their events alone; `create_pod` gives one a uid, as the apiserver would.

    `conflicts`/`gone` name pods whose bind answers 409/404; `refuse_eviction` names pods a PodDisruptionBudget
    protects (429). Feedback is recorded in order as ("unschedulable", namespace, name, message) and
    ("scheduled", namespace, name, node, gpus_text) in `reports`."""

    bound: dict[tuple[str, str], str] = field(default_factory=dict)
    assignments: dict[tuple[str, str], Json] = field(default_factory=dict)
    hami_requests: dict[tuple[str, str], Json | None] = field(default_factory=dict)  # what bind was given
    claims: dict[tuple[str, str], Json | None] = field(default_factory=dict)  # the DRA claim bind was given
    conflicts: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)
    refuse_eviction: set[str] = field(default_factory=set)
    evicted: list[str] = field(default_factory=list)
    reports: list[tuple[str, ...]] = field(default_factory=list)
    uids: dict[tuple[str, str], str] = field(default_factory=dict)  # of the pods created or bound, for list()
    # pods another scheduler bound, as the apiserver has them: (namespace, name) -> node (runs_elsewhere)
    elsewhere: dict[tuple[str, str], str] = field(default_factory=dict)
    nodes: dict[str, NodeCapacity] = field(default_factory=dict)  # the nodes the apiserver has (node_capacity)
    bind_calls: int = 0

    def runs_elsewhere(self, event: Any) -> None:
        """The apiserver has the pod of `event` (a PodEvent) bound where the event says, by someone else."""
        key = (event.namespace, event.name)
        self.uids[key], self.elsewhere[key] = event.uid, event.node_name

    def create_pod(self, namespace: str, name: str) -> str:
        """A pod by this name, created (again) with a fresh uid; returns the uid."""
        self.gone.discard(name)
        self.bound.pop((namespace, name), None)
        uid = self.uids[(namespace, name)] = str(uuid.uuid4())
        return uid

    def delete_pod(self, namespace: str, name: str) -> None:
        self.gone.add(name)
        self.bound.pop((namespace, name), None)

    def _namesake(self, namespace: str, name: str, uid: str | None) -> bool:
        """The pod of this name has another uid than the caller's (the apiserver's uid precondition fails)."""
        known = self.uids.get((namespace, name))
        return uid is not None and known is not None and known != uid

    async def bind(self, namespace: str, name: str, uid: str, node: str, assignment: Json,
                   hami_request: Json | None = None, claim: Json | None = None) -> BindOutcome:
        self.bind_calls += 1
        self.hami_requests[(namespace, name)] = hami_request
        self.claims[(namespace, name)] = claim
        if name in self.gone:
            return BindOutcome.GONE
        if name in self.conflicts or (namespace, name) in self.bound or self._namesake(namespace, name, uid):
            return BindOutcome.CONFLICT
        self.bound[(namespace, name)] = node
        self.uids[(namespace, name)] = uid
        self.assignments[(namespace, name)] = assignment
        return BindOutcome.BOUND

    async def evict(self, namespace: str, name: str, uid: str | None = None) -> EvictOutcome:
        if name in self.gone or self._namesake(namespace, name, uid):
            return EvictOutcome.GONE
        if name in self.refuse_eviction:
            return EvictOutcome.REFUSED
        self.evicted.append(name)
        self.delete_pod(namespace, name)
        return EvictOutcome.EVICTED

    async def read_pod(self, namespace: str, name: str) -> Json | None:
        """Every pod not `gone` exists (pending unless bound); its uid is known once created or bound."""
        if name in self.gone:
            return None
        key = (namespace, name)
        node, uid = self.bound.get(key) or self.elsewhere.get(key), self.uids.get(key)
        annotations = {ASSIGNMENT: json.dumps(self.assignments[key])} if key in self.assignments and node else {}
        return {"metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {}),
                             "annotations": annotations},
                "spec": {"nodeName": node}, "status": {"phase": "Running" if node else "Pending"}}

    async def node_capacity(self, name: str) -> NodeCapacity | None:
        return self.nodes.get(name)

    async def list(self, kind: str, **selectors: str) -> tuple[list[Json], str]:
        """The pods created or bound (others have no uid here: reconciliation confirms them by read_pod)."""
        if kind != "pods" or selectors:
            raise NotImplementedError("FakeClusterApi lists all pods only")
        pods = [await self.read_pod(ns, name) for (ns, name) in dict.fromkeys([*self.uids, *self.bound])]
        return [p for p in pods if p is not None], "1"

    async def report_unschedulable(self, namespace: str, name: str, uid: str, message: str) -> None:
        if name in self.gone or (namespace, name) in self.bound or self._namesake(namespace, name, uid):
            return  # stale news, dropped as KubeClusterApi drops it
        self.reports.append(("unschedulable", namespace, name, message))

    async def report_scheduled(self, namespace: str, name: str, uid: str, node: str, gpus_text: str) -> None:
        self.reports.append(("scheduled", namespace, name, node, gpus_text))

    async def report_warning(self, namespace: str, name: str, uid: str, reason: str, note: str) -> None:
        self.reports.append(("warning", namespace, name, reason, note))
