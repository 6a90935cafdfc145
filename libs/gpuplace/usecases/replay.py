"""Replay a cluster's event log through the placement core: reproduce the recorded decisions, or a what-if.

The placement service decides on a ClusterView hydrated from PostgreSQL; replay builds the same view from the
log (nodes.v1 upserts and deletions, pods.v1 pods, other schedulers' bound pods charged where they run,
placements.v1 decisions, failed binds) by the service's own rules (usecases/event_rules.py, ClusterFromEvents)
and, at each recorded `decided` or `unschedulable`, calls the same Decider on the state as it stood then.

- With the recorded policy, the replayed decision must equal the recorded one (node and GPUs, or
  unschedulable); the state then follows the recorded decision. A difference says whether the state differed
  (the view digest recorded in the decision's provenance is not the replay's: an input the log lacks, such as
  telemetry, or events applied in another order) or the decision did on the same state.
- With another policy it is a what-if: the replay applies its own decisions, tries its waiting pods again when
  a pod leaves, and reports pods placed, stranded GPU (core/fragmentation) and time pending beside the record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import ValidationError

from gpuplace.contracts import topics
from gpuplace.contracts.events import NodeEvent, PlacementEvent, PodEvent
from gpuplace.core.filters.latency_fit import DEFAULT_MARGIN
from gpuplace.core.fragmentation import fragmentation
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.model import Pod
from gpuplace.core.workload import typical_workload
from gpuplace.usecases import provenance
from gpuplace.usecases.cluster_view import ClusterView, Placement, core_pod, pod_rules, pod_stream
from gpuplace.usecases.decide import Decider
from gpuplace.usecases.event_rules import ClusterFromEvents
from gpuplace.usecases.pod_rows import ADOPTED, queue_order
from gpuplace.usecases.pod_states import PodState
from gpuplace.usecases.ports import PodRow, Row


@dataclass(frozen=True)
class Entry:
    """One record of the log: its topic (without a stack's suffix), Kafka timestamp (ms) and event JSON."""

    topic: str
    timestamp_ms: int
    event: Mapping[str, Any]


@dataclass(frozen=True)
class Outcome:
    """A decision: a node and GPUs, or unschedulable (node None)."""

    node: str | None
    gpus: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"{self.node} GPUs {list(self.gpus)}" if self.node else "unschedulable"


@dataclass(frozen=True)
class Difference:
    pod: str
    at_ms: int
    recorded: Outcome
    replayed: Outcome
    state_differed: bool | None  # None: the recorded decision carries no view digest


@dataclass
class RunFigures:
    """One run's figures (the recorded one, or the replay's own)."""

    pods_placed: int = 0
    pods_waiting: int = 0
    stranded_gpu_pct: float | None = None
    pending_ms: list[float] = field(default_factory=list)  # per placed pod: first pending -> decided
    timeline: list[tuple[int, int]] = field(default_factory=list)  # (ms since start, pods placed so far)
    slo_attainment_pct: float | None = None  # frames within deadline, from latency.v1 (the recorded run only)

    def mean_pending_ms(self) -> float | None:
        return sum(self.pending_ms) / len(self.pending_ms) if self.pending_ms else None


@dataclass
class ReplayResult:
    cluster: str
    policy: str
    recorded_policy: str | None
    what_if: bool
    compared: int = 0
    differences: list[Difference] = field(default_factory=list)
    state_differences: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # what replay did not decide again, by why
    replayed: RunFigures = field(default_factory=RunFigures)
    recorded: RunFigures = field(default_factory=RunFigures)

    @property
    def matched(self) -> int:
        return self.compared - len(self.differences)


@dataclass(frozen=True)
class FinalState:
    """A replayed cluster at the end of its log: the view (every hold charged), the rows of the pods holding a
    place and of gpuplace's pods waiting for one, and each node's region."""

    view: ClusterView
    holders: list[Row]
    waiting: list[Row]
    regions: dict[str, str]


class Replayer:
    """Replays one cluster's entries in order (`feed`, then `finish`). How each node and pod event changes the
    cluster is placement's own rules (usecases/event_rules.py, `ClusterFromEvents`); what is replay's alone is
    deciding again at each recorded decision, comparing, and the what-if's own placements."""

    def __init__(self, cluster: str, *, policy: str | None = None, latency_margin: float = DEFAULT_MARGIN,
                 options: PolicyContext | None = None, start_ms: int | None = None) -> None:
        self.cluster = cluster
        self._compare_from = start_ms  # before it the recorded decisions are applied: the state at T1
        self._policy_override = policy
        self._margin = latency_margin
        self._options = options  # the operator's policy settings placement ran with (decide.policy_options)
        self._decider: Decider | None = None
        self.events = ClusterFromEvents(cluster)
        self._first_seen: dict[str, int] = {}  # uid -> ms of its first pending event
        self._waiting: dict[str, Row] = {}  # what-if: pods the replay could not place yet
        self._recorded_placed: set[str] = set()
        self._decided: set[str | None] = set()
        self.slo_frames = 0  # latency.v1 windows of the recorded run: frames and deadline misses
        self.slo_misses = 0
        self._start_ms: int | None = None
        self.result: ReplayResult | None = None

    # -- driving -----------------------------------------------------------------------------------------
    def feed(self, entries: Iterable[Entry]) -> ReplayResult:
        entries = list(entries)
        # gpuplace's own decisions: their pods' `bound` events charge nothing (the decision did), even when the
        # watcher's event reached the log before the outbox published the decision (they race after the commit)
        self._decided = {e.event.get("pod_uid") for e in entries
                         if e.topic == topics.PLACEMENTS and e.event.get("kind") == "decided"}
        for entry in entries:
            if entry.event.get("cluster") != self.cluster:
                continue
            if self._start_ms is None and (self._compare_from is None or entry.timestamp_ms >= self._compare_from):
                self._start_ms = entry.timestamp_ms
            if entry.topic == topics.NODES and (node := _parse(NodeEvent, entry)) is not None:
                self.events.node(node)
            elif entry.topic == topics.PODS:
                self._on_pod(entry)
            elif entry.topic == topics.PLACEMENTS:
                self._on_placement(entry)
            elif entry.topic == topics.LATENCY and self._start_ms is not None:
                self.slo_frames += int(entry.event.get("frames") or 0)
                self.slo_misses += int(entry.event.get("deadline_misses") or 0)
        return self.finish()

    def finish(self) -> ReplayResult:
        result = self._result_or_new(None)
        result.replayed.pods_waiting = len(self.events.waiting())
        result.recorded.pods_placed = len(self._recorded_placed)
        pods = [core_pod(r) for uid, r in self.events.pods.items()
                if r["managed"] and self.events.states[uid] != PodState.INVALID]
        result.replayed.stranded_gpu_pct = self._stranded(pods)
        if self.slo_frames:
            result.recorded.slo_attainment_pct = 100.0 * (1 - self.slo_misses / self.slo_frames)
            if not result.what_if:
                result.replayed.slo_attainment_pct = result.recorded.slo_attainment_pct
        return result

    def final_state(self) -> FinalState:
        """The state the log leaves the cluster in, after `feed`: what `gpuplace report --fleet --log` reads."""
        events = self.events
        return FinalState(
            view=events.view(), holders=[events.pods[uid] for uid in events.holds if uid in events.pods],
            waiting=events.waiting(), regions={name: node["region"] for name, node in events.nodes.items()})

    def _result_or_new(self, recorded_policy: str | None) -> ReplayResult:
        if self.result is None:
            policy = self._policy_override or recorded_policy or "gpuplace"
            self.result = ReplayResult(self.cluster, policy, recorded_policy,
                                       what_if=self._policy_override not in (None, recorded_policy))
            self._decider = Decider(policy, latency_margin=self._margin, options=self._options)
        return self.result

    # -- inputs ------------------------------------------------------------------------------------------
    def _on_pod(self, entry: Entry) -> None:
        event = _parse(PodEvent, entry)
        if event is None:
            return
        if event.kind == "deleted":
            self._waiting.pop(event.uid, None)
            if self.events.deleted(event.uid):
                self._retry_waiting(entry.timestamp_ms)
            return
        self.events.pod(event, entry.timestamp_ms)
        self._first_seen.setdefault(event.uid, entry.timestamp_ms)
        # gpuplace's own pod seen bound before the log has its decision (they race after the commit) waits for
        # it, and a what-if's own decisions place its pods; the rest is placement's rule (event_rules.bound_change)
        own = event.managed and (self._what_if() or (event.uid in self._decided and event.uid not in self.events.holds))
        if (event.kind == "bound" or not event.managed) and not own:
            self.events.bound(event)

    def _what_if(self) -> bool:
        return self.result.what_if if self.result is not None else self._policy_override is not None

    def _on_placement(self, entry: Entry) -> None:
        event = _parse(PlacementEvent, entry)
        if event is None or event.pod_uid is None:
            return
        result = self._result_or_new(event.policy)
        uid = event.pod_uid
        if event.kind == "decided" and event.reasons.get("defrag", "").startswith(ADOPTED):
            result.skipped["adopted a defragmentation promise"] = \
                result.skipped.get("adopted a defragmentation promise", 0) + 1
            if not result.what_if:
                self._charge_recorded(uid, event)
            return
        if event.kind in ("decided", "unschedulable") and self._compare_from is not None and \
                entry.timestamp_ms < self._compare_from:
            if uid in self.events.pods:  # decided again, unseen: a policy that learns the arrivals learns them
                self._decide(self.events.view(), self.events.pods[uid])
            if event.kind == "decided":  # before T1: the state the range starts from
                self._charge_recorded(uid, event)
                self._waiting.pop(uid, None)
            elif result.what_if and uid in self.events.pods:  # waiting at T1 in the what-if too
                self._waiting[uid] = self.events.pods[uid]
        elif event.kind in ("decided", "unschedulable"):
            self._decision_point(entry, event)
        elif event.kind == "bind_failed" and not result.what_if:
            self.events.bind_failed(uid)
        elif event.kind == "slo_violation" and event.node and event.reasons.get("gpu_index", "").isdigit():
            self.events.close_gpu(event.node, int(event.reasons["gpu_index"]))  # the service re-reads the cluster
        elif event.kind in ("defrag_planned", "evicted", "defrag_completed", "defrag_aborted"):
            result.skipped[event.kind] = result.skipped.get(event.kind, 0) + 1

    # -- decisions ---------------------------------------------------------------------------------------
    def _decision_point(self, entry: Entry, event: PlacementEvent) -> None:
        result = self._result_or_new(event.policy)
        uid = event.pod_uid or ""
        row = self.events.pods.get(uid)
        recorded = Outcome(event.node, tuple(g.index for g in event.gpus)) if event.kind == "decided" else Outcome(None)
        if event.kind == "decided":
            self._recorded_placed.add(uid)
            result.recorded.pending_ms.append(entry.timestamp_ms - self._first_seen.get(uid, entry.timestamp_ms))
            result.recorded.timeline.append((self._since_start(entry), len(self._recorded_placed)))
        if row is None:
            result.skipped["pod never seen on pods.v1"] = result.skipped.get("pod never seen on pods.v1", 0) + 1
            if not result.what_if and event.kind == "decided":
                self._charge_recorded(uid, event)
            return
        if result.what_if:
            if uid not in self.events.holds:
                self._place_own(uid, row, entry.timestamp_ms)
            return
        view = self.events.view()
        digest = provenance.view_digest(view.snapshot)
        replayed = self._decide(view, row)
        result.compared += 1
        if replayed != recorded:
            recorded_digest = event.provenance.view_digest if event.provenance else None
            differed = None if recorded_digest is None else recorded_digest != digest
            result.state_differences += bool(differed)
            result.differences.append(Difference(f"{row['namespace']}/{row['name']}", self._since_start(entry),
                                                 recorded, replayed, differed))
        if event.kind == "decided":
            self._charge_recorded(uid, event)
            result.replayed.pods_placed += 1
            result.replayed.pending_ms.append(entry.timestamp_ms - self._first_seen.get(uid, entry.timestamp_ms))
            result.replayed.timeline.append((self._since_start(entry), result.replayed.pods_placed))

    def _decide(self, view: ClusterView, row: Row) -> Outcome:
        assert self._decider is not None
        if view.snapshot is None:
            return Outcome(None)
        pod = core_pod(row)
        decided = self._decider(view, pod, pod_stream(row, pod))
        return Outcome(decided.node, decided.gpu_indices) if isinstance(decided, Placement) else Outcome(None)

    def _place_own(self, uid: str, row: Row, now_ms: int) -> bool:
        """What-if: decide with the replay's policy and apply its own decision."""
        assert self._decider is not None and self.result is not None
        view = self.events.view()
        decided = self._decider(view, core_pod(row), pod_stream(row)) if view.snapshot is not None else None
        if not isinstance(decided, Placement):
            self._waiting[uid] = row
            return False
        self._waiting.pop(uid, None)
        self.events.charge(uid, decided, PodState.RESERVED)
        figures = self.result.replayed
        figures.pods_placed += 1
        figures.pending_ms.append(now_ms - self._first_seen.get(uid, now_ms))
        figures.timeline.append((now_ms - (self._start_ms or now_ms), figures.pods_placed))
        return True

    def _retry_waiting(self, now_ms: int) -> None:
        if self.result is None or not self.result.what_if:
            return
        for uid, row in sorted(self._waiting.items(), key=lambda item: queue_order(cast(PodRow, item[1]))):
            self._place_own(uid, row, now_ms)

    def _charge_recorded(self, uid: str, event: PlacementEvent) -> None:
        """A recorded decision's place, held by its pod (reserved) as placement's reservation holds it."""
        row = self.events.pods.get(uid)
        gpus = event.gpus
        hold = Placement(event.node or "", tuple(sorted(g.index for g in gpus)),
                         gpus[0].share_milli if gpus else 0, gpus[0].memory_mib if gpus else 0,
                         row["cpu_milli"] if row else 0, row["memory_mib"] if row else 0,
                         pod_stream(row) if row else None, pod_rules(row) if row else pod_rules({}))
        self.events.charge(uid, hold, PodState.RESERVED)

    def _stranded(self, pods: list[Pod]) -> float | None:
        snapshot = self.events.view().snapshot
        if snapshot is None or not pods or snapshot.total_gpu_milli == 0:
            return None
        workload = typical_workload(pods, snapshot.gpu_types)
        return 100.0 * float(fragmentation(snapshot, workload).sum()) / snapshot.total_gpu_milli

    def _since_start(self, entry: Entry) -> int:
        return entry.timestamp_ms - (self._start_ms or entry.timestamp_ms)


def _parse(model: Any, entry: Entry) -> Any:
    try:
        return model.model_validate(dict(entry.event))
    except ValidationError:  # dead-lettered by the consumers when it was recorded: skipped here too
        return None


def replay(cluster: str, entries: Iterable[Entry], *, policy: str | None = None,
           latency_margin: float = DEFAULT_MARGIN, options: PolicyContext | None = None,
           start_ms: int | None = None) -> ReplayResult:
    """Replay `cluster`'s entries (log order) with its recorded policy, or with `policy` as a what-if; decisions
    before `start_ms` are applied as recorded (the state at T1), not decided again."""
    return Replayer(cluster, policy=policy, latency_margin=latency_margin, options=options,
                    start_ms=start_ms).feed(entries)


def what_if(cluster: str, entries: Sequence[Entry], policy: str, *, latency_margin: float = DEFAULT_MARGIN,
            options: PolicyContext | None = None, start_ms: int | None = None) -> tuple[ReplayResult, ReplayResult]:
    """The recorded run (replayed with its own policy: its figures, and whether it reproduces) beside a replay
    with `policy` that applies its own decisions."""
    recorded = replay(cluster, entries, latency_margin=latency_margin, options=options, start_ms=start_ms)
    return recorded, replay(cluster, entries, policy=policy, latency_margin=latency_margin, options=options,
                            start_ms=start_ms)


__all__ = ["Difference", "Entry", "FinalState", "Outcome", "ReplayResult", "Replayer", "RunFigures", "replay",
           "what_if"]
