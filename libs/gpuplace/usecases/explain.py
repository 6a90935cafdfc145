"""`gpuplace explain POD`: why a pod is where it is, why it waits, or why it was moved (DESIGN §7).

Everything comes from the fleet state: the pod's row, the GPUs it holds, and its decisions, which are the
placements topic's events written in the same transactions (usecases/placement._record), so the database and
the log tell the same story. A pod gpuplace placed shows where, by which policy, how long it waited and the
chosen node's score against the runners-up (`decided` records them); a waiting pod shows the reasons each node
class gave, with the filter that refused it, when it was first and last tried and the defragmentation plans
tried for it; a pod a plan evicted shows for whom, from where, and where its replacement went.

A retry that finds the same reasons as the last one is not recorded (placement reports a new reason once), so
`attempts` counts the attempts whose reasons were recorded, and `latest_attempt_at` is the latest of those.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from gpuplace.usecases.cluster_view import RUNNERS_UP_KEY, SCORE_KEY
from gpuplace.usecases.pod_rows import ADOPTED
from gpuplace.usecases.pod_states import WAITING, PodState
from gpuplace.usecases.ports import DecisionRow, Retained
from gpuplace.usecases.repositories import UnitOfWork, UnitOfWorkFactory

_PLAN_OUTCOMES = {"defrag_completed": "completed", "defrag_aborted": "aborted"}


class ExplainError(LookupError):
    """The pod cannot be explained: gpuplace never saw it, or its name is ambiguous (the message says which)."""


@dataclass(frozen=True)
class Gpu:
    node: str
    index: int
    model: str | None
    memory_mib: int
    share_milli: int


@dataclass(frozen=True)
class Candidate:
    node: str
    score: str


@dataclass
class DefragPlan:
    """One plan tried for the pod (it was the beneficiary): when, where it was to go, the moves, what became of it."""

    planned_at: datetime
    node: str | None
    moves: str
    outcome: str = "in progress"
    settled_at: datetime | None = None
    reason: str | None = None


@dataclass
class Move:
    """The pod was evicted by a plan: for whom, from where, and where its replacement went (if one adopted it)."""

    evicted_at: datetime
    beneficiary: str  # namespace/name
    from_node: str | None
    from_gpus: list[int]
    to_node: str | None
    replacement: str | None = None  # namespace/name of the pod that took the promised place
    replacement_node: str | None = None
    replacement_state: str | None = None


@dataclass
class Explanation:
    cluster: str
    namespace: str
    name: str
    uid: str
    state: str
    managed: bool
    first_seen_at: datetime
    bound_at: datetime | None = None
    node: str | None = None
    gpus: list[Gpu] = field(default_factory=list)
    policy: str | None = None
    placed_by: str | None = None  # "policy" or "defragmentation" or "promise" (a replacement adopting a place)
    score: str | None = None
    runners_up: list[Candidate] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # node class -> why, the latest recorded
    state_reason: str | None = None
    first_attempt_at: datetime | None = None
    latest_attempt_at: datetime | None = None
    attempts: int = 0
    defrag_plans: list[DefragPlan] = field(default_factory=list)
    moved: Move | None = None
    older_namesakes: int = 0  # earlier pods of the same name in this namespace and cluster
    # decisions stamped before this were pruned (usecases/retention.py), and the pod is older: its story as told
    # here may lack its first steps (None: nothing of it was pruned)
    decisions_pruned_before: datetime | None = None

    @property
    def waiting(self) -> bool:
        return self.state in WAITING

    @property
    def waited_s(self) -> float | None:
        """From first seen to bound: the time the pod waited for its place."""
        return (self.bound_at - self.first_seen_at).total_seconds() if self.bound_at else None

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(waiting=self.waiting, waited_s=self.waited_s)
        decoded: dict[str, Any] = json.loads(json.dumps(out, default=_iso))
        return decoded

    def text(self) -> str:
        """A short report, in the words of a platform engineer."""
        lines = [f"{self.namespace}/{self.name} in cluster {self.cluster} (uid {self.uid}): {self.state}"]
        if not self.managed:
            lines.append("  not gpuplace's pod: another scheduler placed it; gpuplace only charges its resources")
        if self.node and self.state in ("bound", "reserved"):
            lines.append(f"  on node {self.node}" + (f", GPU(s): {_gpus_text(self.gpus)}" if self.gpus else
                                                    ", no GPU"))
        if self.placed_by == "policy":
            lines.append(f"  placed by policy {self.policy}" + (f", score {self.score}" if self.score else ""))
            if self.runners_up:
                lines.append("  runners-up: " + ", ".join(f"{c.node} (score {c.score})" for c in self.runners_up))
            elif self.score is not None:
                lines.append("  runners-up: none (no other node could take it)")
        elif self.placed_by == "defragmentation":
            lines.append("  placed by a defragmentation plan that moved other pods out of its way")
        elif self.placed_by == "promise":
            lines.append("  took the place promised to its owner's evicted pod (defragmentation)")
        lines.append(f"  first seen {_at(self.first_seen_at)}" +
                     (f", bound {_at(self.bound_at)} (waited {self.waited_s:.1f} s)" if self.bound_at else ""))
        if self.waiting:
            lines.append(f"  waits: {self.state_reason or 'not tried yet'}" if not self.reasons else "  waits because:")
            lines.extend(f"    {node_class}: {why}" for node_class, why in self.reasons.items())
        if self.attempts:
            lines.append(f"  attempts with a new reason: {self.attempts} (first {_at(self.first_attempt_at)}, "
                         f"latest {_at(self.latest_attempt_at)})")
        for plan in self.defrag_plans:
            why = f" ({plan.reason})" if plan.reason else ""
            lines.append(f"  defrag plan {_at(plan.planned_at)} to {plan.node}: {plan.outcome}{why}"
                         + (f"; moves {plan.moves}" if plan.moves else ""))
        if self.moved:
            m = self.moved
            lines.append(f"  evicted {_at(m.evicted_at)} by a defragmentation plan for {m.beneficiary}, from node "
                         f"{m.from_node}" + (f" GPU(s) {', '.join(map(str, m.from_gpus))}" if m.from_gpus else "")
                         + f", its place promised on {m.to_node}")
            lines.append(f"  replacement: {m.replacement} on {m.replacement_node} ({m.replacement_state})"
                         if m.replacement else "  replacement: none adopted the promised place yet")
        if self.older_namesakes:
            lines.append(f"  ({self.older_namesakes} earlier pod(s) had this name here; this is the newest)")
        if self.decisions_pruned_before:
            lines.append(f"  decisions before {_at(self.decisions_pruned_before)} were pruned (retention, "
                         "GPUPLACE_RETENTION_DECISIONS_DAYS): what happened to it before then is not told")
        return "\n".join(lines)


async def explain(uow_factory: UnitOfWorkFactory, pod: str, *, namespace: str | None = None,
                  cluster: str | None = None) -> Explanation:
    """Explain the pod `pod` (`name` or `namespace/name`); ExplainError when unknown or ambiguous."""
    if "/" in pod:
        ns, _, name = pod.partition("/")
        if namespace is not None and namespace != ns:
            raise ExplainError(f"pod {pod!r} and --namespace {namespace!r} disagree")
        namespace = ns
    else:
        name = pod
    async with uow_factory() as uow:
        found = [p for p in await uow.pods.find_pods(name, namespace=namespace, cluster=cluster)
                 if p["state"] != PodState.PROMISED]
        if not found:
            where = " ".join(f"{k} {v}" for k, v in (("namespace", namespace), ("cluster", cluster)) if v)
            pruned = await uow.retention.pruned_before(Retained.DELETED_PODS)
            raise ExplainError(f"gpuplace never saw a pod named {name!r}" + (f" ({where})" if where else "") + (
                f", or it was deleted and pruned (deleted pods first seen before {_at(pruned)} are pruned: "
                "GPUPLACE_RETENTION_DECISIONS_DAYS)" if pruned else ""))
        places = sorted({(p["cluster"], p["namespace"]) for p in found})
        if len(places) > 1:
            raise ExplainError(f"pod name {name!r} is ambiguous: " + ", ".join(
                f"{c}/{ns}/{name}" for c, ns in places) + "; give --cluster and/or namespace/name")
        row = found[0]  # newest first
        explanation = Explanation(
            cluster=row["cluster"], namespace=row["namespace"], name=row["name"], uid=row["uid"], state=row["state"],
            managed=bool(row.get("managed", True)), first_seen_at=row["first_seen_at"], bound_at=row.get("bound_at"),
            node=row.get("node"), state_reason=row.get("reason"), older_namesakes=len(found) - 1)
        decisions = await uow.decisions.decisions_of(row["cluster"], row["uid"])
        pruned = await uow.retention.pruned_before(Retained.DECISIONS)
        if pruned is not None and row["first_seen_at"] < pruned:
            explanation.decisions_pruned_before = pruned
        await _where(uow, explanation)
        _history(explanation, decisions)
        await _moves(uow, explanation, decisions)
    return explanation


async def _where(uow: UnitOfWork, e: Explanation) -> None:
    """The GPUs the pod holds now, with their model."""
    held = [a for a in await uow.allocations.load_allocations(e.cluster) if a["pod_uid"] == e.uid]
    if not held:
        return
    models = {(g["node"], g["index"]): g["model"] for g in await uow.nodes.load_gpus(e.cluster)}
    e.gpus = [Gpu(a["node"], a["gpu_index"], models.get((a["node"], a["gpu_index"])), a["memory_mib"],
                  a["share_milli"]) for a in sorted(held, key=lambda a: (a["node"], a["gpu_index"]))]
    e.node = e.node or e.gpus[0].node


def _history(e: Explanation, decisions: list[DecisionRow]) -> None:
    """Policy and score, the attempts and reasons, and the plans tried, from the pod's decisions in order."""
    for d in decisions:
        kind, reasons = d["kind"], d["reasons"] or {}
        if kind == "decided":
            e.policy = d["policy"]
            e.placed_by = "promise" if str(reasons.get("defrag", "")).startswith(ADOPTED) else "policy"
            e.score = reasons.get(SCORE_KEY)
            e.runners_up = [Candidate(*item.rsplit("=", 1)) for item in
                            filter(None, (reasons.get(RUNNERS_UP_KEY) or "").split(", "))]
        elif kind == "unschedulable":
            e.attempts += 1
            e.first_attempt_at = e.first_attempt_at or d["created_at"]
            e.latest_attempt_at = d["created_at"]
            e.reasons = dict(reasons)
        elif kind == "defrag_planned":
            e.defrag_plans.append(DefragPlan(d["created_at"], d["node"], reasons.get("moves", "")))
        elif kind in _PLAN_OUTCOMES and e.defrag_plans and e.defrag_plans[-1].settled_at is None:
            plan = e.defrag_plans[-1]
            plan.outcome, plan.settled_at, plan.reason = _PLAN_OUTCOMES[kind], d["created_at"], reasons.get("reason")
            if kind == "defrag_completed":
                e.policy, e.placed_by, e.score, e.runners_up = d["policy"], "defragmentation", None, []
        elif kind == "bound" and e.bound_at is None:
            e.bound_at = d["created_at"]
    if e.state not in WAITING:
        e.reasons = {}


async def _moves(uow: UnitOfWork, e: Explanation, decisions: list[DecisionRow]) -> None:
    """Was the pod evicted by a plan? For whom, from which GPUs (the plan's record), and who took its place."""
    evicted = [d for d in decisions if d["kind"] == "evicted"]
    if not evicted:
        return
    d = evicted[-1]
    reasons = d["reasons"] or {}
    move = Move(d["created_at"], reasons.get("for", "?"), d["node"], [], reasons.get("to"))
    e.moved = move
    plan = await uow.plans.plan_moving(e.cluster, e.uid)
    victim = next((m for m in plan.moves if m.uid == e.uid), None) if plan else None
    if victim is None:
        return
    move.from_gpus = list(victim.from_gpu_indices)
    for adopted in await uow.decisions.decisions_with_reason(e.cluster, "decided", "defrag", ADOPTED + victim.promise):
        replacement = await uow.pods.get_pod(e.cluster, adopted["pod_uid"])
        move.replacement = f"{adopted['namespace']}/{adopted['pod']}"
        move.replacement_node = adopted["node"]
        move.replacement_state = replacement["state"] if replacement else "gone"


def _gpus_text(gpus: list[Gpu]) -> str:
    return ", ".join(f"{g.index} ({g.model or 'unknown model'}: {g.memory_mib} MiB, {g.share_milli}m)" for g in gpus)


def _at(when: datetime | None) -> str:
    return when.isoformat(timespec="seconds") if when else "?"


def _iso(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


__all__ = ["Explanation", "ExplainError", "explain"]
