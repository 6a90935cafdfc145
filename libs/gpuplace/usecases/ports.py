"""The ports the use cases drive, and the values they speak in: the rows of the fleet state (the unit of work and its
repositories, one per aggregate, are in repositories.py), the outbox as its relay reads it, each cluster's API, and
the metrics they report to the operator.

Adapters implement these structurally (adapters.postgres, adapters.kube) and may import this module for the
values the ports speak in (GpuGrant, the outcome enums): it imports nothing but the standard library. Tests use
in-memory fakes (tests/fakes.py); a fake and its adapter pass the same contract suite (tests/contract/), one
per port, and tests/unit/test_port_contracts.py fails when a port method has no contract case. Use cases import
only these Protocols, never an adapter.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Protocol, TypedDict

Row = Mapping[str, Any]
Json = dict[str, Any]


class PodRow(TypedDict):
    """A row of the pods table (adapters/postgres/tables.py) as the Pods repository returns it: what the
    use cases read of a pod, typed, so that a misspelt column is the type checker's error, not a KeyError in a
    burst."""

    cluster: str
    uid: str
    namespace: str
    name: str
    state: str
    """A PodState value (pod_states.py)."""
    priority: int
    request: Json | None
    """The GPU request as contracts.GpuRequest's JSON; None for a pod without GPUs."""
    cpu_milli: int
    memory_mib: int
    deadline_ms: float | None
    frame_rate_hz: float | None
    workload: str | None
    service_ms: float | None
    owner: str | None
    node: str | None
    reason: str | None
    first_seen_at: datetime
    reserved_at: datetime | None
    bound_at: datetime | None
    move_requested_at: datetime | None
    managed: bool
    rules: Json | None
    """Node rules and what rides with them (pod_rows._RULE_FIELDS)."""


class NodeRow(TypedDict):
    """A row of the nodes table as load_nodes returns it: a node's capacity and what is assigned on it."""

    cluster: str
    name: str
    region: str
    cpu_milli: int
    memory_mib: int
    cpu_assigned_milli: int
    memory_assigned_mib: int
    gpu_model: str | None
    gpu_count: int
    gpu_memory_mib: int
    ready: bool
    unschedulable: bool
    labels: dict[str, str]
    taints: list[str]
    """As kube prints them, "key=value:Effect"."""
    max_pods: int | None
    extended: dict[str, int]
    """Allocatable countable resources (MIG profiles, ...)."""
    updated_at: datetime
    absent_since: datetime | None
    """The node left the cluster while pods still held resources there (delete_node); None: present."""


class GpuRow(TypedDict):
    """A row of the gpus table as load_gpus returns it: one GPU, what is assigned on it and what it reports."""

    cluster: str
    node: str
    index: int
    uuid: str | None
    model: str | None
    memory_total_mib: int
    """What placement may fill: the memory reported, or what pods hold when they hold more (upsert_node)."""
    memory_assigned_mib: int
    share_assigned_milli: int
    memory_reported_mib: int | None
    """What the node reports now (None on rows older than the column: memory_total_mib)."""
    memory_observed_mib: int | None
    utilization_pct: float | None
    healthy: bool
    telemetry_at: datetime | None
    slo_blocked_at: datetime | None
    """Set when a pod here missed its deadline: no new pod goes here until cleared."""
    numa_node: int | None
    nvlink_domain: int | None


class AllocationRow(TypedDict):
    """A row of the allocations table: what one pod holds of one GPU."""

    cluster: str
    pod_uid: str
    gpu_index: int
    node: str
    memory_mib: int
    share_milli: int
    decision_id: str
    created_at: datetime


class DecisionRow(TypedDict):
    """A row of the decisions table as decisions_of returns it: one step of a pod's story."""

    id: str
    cluster: str
    namespace: str
    pod: str
    pod_uid: str
    kind: str
    node: str | None
    gpus: list[Json]
    policy: str | None
    reasons: dict[str, str]
    created_at: datetime


@dataclass(frozen=True)
class GpuGrant:
    """What one pod takes of one GPU: the argument of repositories.Allocations.reserve()."""

    index: int
    memory_mib: int
    share_milli: int


@dataclass(frozen=True)
class Reservation:
    """One pod's place in a batch of reservations (repositories.Allocations.reserve_many): what reserve()
    takes for it."""

    pod_uid: str
    node: str
    grants: tuple[GpuGrant, ...]
    cpu_milli: int
    memory_mib: int
    decision_id: str


class PlanState(enum.StrEnum):
    """Where a defragmentation plan stands (defrag_plans.state). It is settled once: planned -> completed, or
    planned -> aborted."""

    PLANNED = "planned"
    COMPLETED = "completed"
    ABORTED = "aborted"


@dataclass(frozen=True)
class PlannedMove:
    """One pod a defragmentation plan evicts, as the plan's record keeps it: all an abort needs to undo the
    move, so that a restarted process, which lost the planner's view, can undo it too."""

    uid: str
    namespace: str
    name: str
    from_node: str  # where it ran: an abort gives it these GPUs back
    from_gpu_indices: tuple[int, ...]
    share_milli: int  # per GPU it held there
    memory_mib: int  # per GPU it held there
    cpu_milli: int
    pod_memory_mib: int
    promise: str  # uid of the `promised` row its replacement adopts


@dataclass(frozen=True)
class DefragPlanRecord:
    """A defragmentation plan as the state keeps it (defrag_plans and its defrag_moves, in move order).
    A plan with no moves predates the table (migration 0008 found its record unreadable)."""

    cluster: str
    plan_id: str
    beneficiary_uid: str
    moves: tuple[PlannedMove, ...]
    state: PlanState = PlanState.PLANNED
    reason: str | None = None  # why it was aborted


class Retained(enum.StrEnum):
    """What the retention pruner removes once it is older than its setting (usecases/retention.py), each by the
    time the store stamped on it: ids of events processed (processed_at), outbox rows published (published_at;
    an unpublished row is never pruned), decisions (created_at), latency windows (window_end), and pods deleted
    (first_seen_at; a deleted pod still holding GPUs mid-plan is kept until it holds none)."""

    PROCESSED_EVENTS = "processed_events"
    OUTBOX = "outbox"
    DECISIONS = "decisions"
    LATENCY_WINDOWS = "latency_windows"
    DELETED_PODS = "deleted_pods"


class RetentionStore(Protocol):
    """Pruning the rows that only grow, a small batch per unit of work, by the store's own clock (the one that
    stamped the rows), so that a process's clock never decides what is old."""

    async def take_pruning_turn(self) -> bool:
        """Whether this unit of work may prune now: True holds the turn until the unit of work ends; False (another
        unit of work holds it: another replica prunes) returns at once, without waiting."""
        ...

    async def prune(self, kind: Retained, keep_s: float, limit: int) -> int:
        """Delete up to `limit` rows of `kind` stamped more than `keep_s` seconds ago, oldest first; how many went.
        Records the cut-off for pruned_before when any went. Never waits long on a lock a placement holds: it
        raises instead (the next round tries again)."""
        ...

    async def pruned_before(self, kind: Retained) -> datetime | None:
        """The cut-off of the latest prune that removed rows of `kind`: rows stamped before it may be gone. None
        when none was ever pruned."""
        ...


class OutboxStore(Protocol):
    """The outbox as its relay reads it: events added by repositories.Outbox.add_outbox and committed."""

    async def take_unpublished(self, limit: int) -> list[Row]:
        """Up to `limit` committed rows not yet marked published, lowest id first: (id, topic, key, payload),
        the payload decoded from its JSON. They stay locked until the unit of work ends, and a relay running
        at the same time skips them (it takes others, or none): a row is never taken by two relays at once."""
        ...

    async def mark_published(self, ids: Sequence[int]) -> None:
        """Mark rows published, for good once committed; a row taken but not marked is taken again later."""
        ...

    async def count_unpublished(self) -> int:
        """How many committed rows are not marked published yet (the relay's backlog, for its metric)."""
        ...


class OutboxUnitOfWork(Protocol):
    """A unit of work as the outbox relay uses it (PostgresUnitOfWork is one, and a UnitOfWork too)."""

    @property
    def outbox(self) -> OutboxStore: ...

    async def __aenter__(self) -> OutboxUnitOfWork: ...

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None: ...

    async def commit(self) -> None: ...


@dataclass(frozen=True)
class NodeCapacity:
    """A node as its apiserver describes it now, read as cluster-watcher reads it (NodeEvent's units): what a node
    event that raises a node's capacity is checked against."""

    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_memory_mib: int

    def holds(self, other: NodeCapacity) -> bool:
        """Whether every figure of `other` is at most this one's."""
        return other.cpu_milli <= self.cpu_milli and other.memory_mib <= self.memory_mib and \
            other.gpu_count <= self.gpu_count and other.gpu_memory_mib <= self.gpu_memory_mib


class BindOutcome(enum.Enum):
    """What a bind came to (ClusterApi.bind); failures that are none of these raise."""

    BOUND = "bound"
    CONFLICT = "conflict"  # 409: bound already (by us earlier, or by someone else), or a namesake: read the pod
    GONE = "gone"  # 404/410: no pod of that name any more


class EvictOutcome(enum.Enum):
    """What an eviction came to (ClusterApi.evict); failures that are none of these raise."""

    EVICTED = "evicted"  # its deletion started: the pod may run until its grace period ends
    REFUSED = "refused"  # 429: a PodDisruptionBudget does not allow it now; respect it
    GONE = "gone"  # 404, or 409 when the pod of that name has another uid: nothing of ours to evict


class PodReader(Protocol):
    """Reading one cluster's pods: what reconciliation compares the fleet state with."""

    async def read_pod(self, namespace: str, name: str) -> Json | None:
        """The pod as the apiserver's JSON (metadata.uid, spec.nodeName, status.phase, ...), None when no pod
        has that name. Whether it is still the pod we mean is for the caller to check, by metadata.uid."""
        ...

    async def list(self, kind: str, **selectors: str) -> tuple[list[Json], str]:
        """Every pod of the cluster (kind "pods", all namespaces; "nodes" lists the nodes) as JSON, and the
        list's resourceVersion (a watch starts from it). `selectors` (label_selector=, field_selector=) go to
        the apiserver as they are."""
        ...

    async def node_capacity(self, name: str) -> NodeCapacity | None:
        """Node `name` as the apiserver has it now, read from its labels, allocatable and HAMi's registration as
        cluster-watcher reads them (not from DRA ResourceSlices); None when there is no such node."""
        ...


class ClusterApi(PodReader, Protocol):
    """One cluster's apiserver as placement and defragmentation use it.

    Outcomes a caller must act on are values, not exceptions (BindOutcome, EvictOutcome); any other failure
    (the apiserver away, 5xx, 403) raises. Feedback is the exception the other way: it never raises."""

    async def bind(self, namespace: str, name: str, uid: str, node: str, assignment: Json,
                   hami_request: Json | None = None, claim: Json | None = None) -> BindOutcome:
        """Bind pod `uid` to `node`, its GPU `assignment` (the gpuplace.io/gpu-assignment annotation) in the
        same write, so nothing ever sees the pod on the node without its GPUs. `hami_request` (PodEvent.hami, a
        request in HAMi's vocabulary) adds, on a node HAMi registered, the annotations HAMi's device plugin reads.
        `claim` (one of PodEvent.dra_claims) is allocated on the assignment's GPUs and reserved for the pod first;
        a bind that does not bind the pod gives it back.

        Not idempotent, and never to be retried blindly: binding a pod bound already is a CONFLICT, as is
        binding a namesake (the uid is a precondition); a pod that no longer exists is GONE."""
        ...

    async def evict(self, namespace: str, name: str, uid: str | None = None) -> EvictOutcome:
        """Evict through the Eviction API, so PodDisruptionBudgets hold; with `uid`, only that pod (a namesake
        is left alone: GONE). EVICTED starts its deletion (poll read_pod for the end); REFUSED leaves it running;
        a pod not there (or no longer ours) is GONE."""
        ...

    async def report_unschedulable(self, namespace: str, name: str, uid: str, message: str) -> None:
        """Tell the pod's owner why it waits, as kube-scheduler does (PodScheduled=False and a FailedScheduling
        Event with `message`). Stale news is dropped: nothing for a pod gone, a namesake, or bound meanwhile.
        Never raises."""
        ...

    async def report_scheduled(self, namespace: str, name: str, uid: str, node: str, gpus_text: str) -> None:
        """A Scheduled Event naming `node` and the GPUs (`gpus_text`), as kube-scheduler's. Never raises."""
        ...

    async def report_warning(self, namespace: str, name: str, uid: str, reason: str, note: str) -> None:
        """A Warning Event about the pod: what its owner must know of the place it got (a GPU share nothing
        enforces there, usecases/enforcement). Never raises."""
        ...


# -- metrics: the label values each counter takes, a closed vocabulary (a free-text reason would be a new time
# series per pod). The README's "Metrics and health" table lists them.
AttemptResult = Literal["reserved", "unschedulable", "conflict", "invalid", "error"]
"""What one scheduling attempt (decide, then reserve, in one transaction) came to: the pod `reserved` on a node
and GPUs (its bind follows), `unschedulable` (it fits nowhere and waits), `conflict` (the database refused what
the in-memory view allowed: re-read and tried again), `invalid` (its GPU request cannot be read), `error` (an
exception, such as the database going away)."""
BindResult = Literal["bound", "conflict", "gone", "error"]
"""A bind's outcome: BindOutcome's values (a CONFLICT found to be our own earlier bind counts as bound), or
`error` when the call failed (the apiserver away, 5xx, 403)."""
EvictResult = Literal["evicted", "refused", "gone", "error"]
"""An eviction's outcome: EvictOutcome's values, or `error` when the call failed."""
PlanOutcome = Literal["planned", "completed", "aborted", "infeasible", "stale"]
"""What became of a defragmentation attempt: `planned` (places reserved, evictions start), `completed` (the
blocked pod is bound), `aborted` (a PodDisruptionBudget refusal, a failure, victims still running, a restart),
`infeasible` (the planner found no set of moves within the limits), `stale` (the plan no longer fitted the
cluster when its places were reserved)."""
PendingReason = Literal["unschedulable", "queued", "defrag", "binding"]
"""Why a pod gpuplace places is not bound yet: `unschedulable` (tried, fits nowhere now), `queued` (waiting for
its next try: after a failed bind, or read back after a restart), `defrag` (a plan is moving other pods out of
its way), `binding` (reserved, its bind call in flight)."""


@dataclass(frozen=True)
class NodeGpus:
    """One node's GPUs as placement holds them: what there is and what pods were given of it."""

    node: str
    model: str
    gpus: int
    memory_mib: int  # over all its GPUs
    memory_allocated_mib: int
    share_allocated_milli: int  # summed over its GPUs: 1000 per whole GPU given


@dataclass(frozen=True)
class ClusterGauges:
    """One cluster as a placement worker holds it, read when metrics are scraped."""

    cluster: str
    pending: Mapping[PendingReason, int]  # pods not bound yet, by why
    stranded_share: float | None  # F(M) summed over nodes / the cluster's GPU share; None: no workload seen yet
    stranded_memory_mib: float | None  # the free GPU memory the same shapes could not use
    gpus: Sequence[NodeGpus] = ()  # per node with GPUs: capacity and allocation (usecases/gpu_gauges.py)


class Metrics(Protocol):
    """What the use cases tell the operator, counted where it happens (adapters/metrics.py: Prometheus).

    Methods are called synchronously in the event loop, are cheap and never raise: a metric must not fail the
    work it measures. Label values come from the vocabularies above."""

    def scheduling_attempt(self, cluster: str, result: AttemptResult, seconds: float) -> None:
        """One attempt to place a pod, and how long deciding and reserving took."""
        ...

    def bind(self, cluster: str, result: BindResult) -> None:
        """One bind call's outcome."""
        ...

    def pod_scheduled(self, cluster: str, seconds: float) -> None:
        """A pod gpuplace placed was recorded bound, `seconds` after placement first saw it pending (over every
        attempt it took: kube-scheduler's pod_scheduling_sli_duration_seconds)."""
        ...

    def eviction(self, cluster: str, result: EvictResult) -> None:
        """One eviction call's outcome (defragmentation)."""
        ...

    def defrag_plan(self, cluster: str, outcome: PlanOutcome) -> None:
        """A defragmentation plan moved to `outcome`."""
        ...

    def latency_window(self, cluster: str, workload: str, frames: int, deadline_misses: int) -> None:
        """A pod's latency window: `frames` frames, `deadline_misses` of them past their deadline."""
        ...

    def scale_hint(self, cluster: str, additions: Sequence[tuple[str, str, int]]) -> None:
        """A cluster's latest scale hint: (node shape, what blocks the pods it places, nodes to add) per addition;
        empty when nothing needs a node. Replaces what the cluster reported before."""
        ...

    def watching(self, source: Callable[[], Iterable[ClusterGauges]]) -> AbstractContextManager[None]:
        """While the block runs, `source` is called at each scrape for the gauges of the clusters it holds
        (it must be cheap and synchronous); after the block it no longer is, so a placement service that
        stopped reports nothing. Registering does not call it."""
        ...


class NullMetrics:
    """Metrics that go nowhere: the default of every use case, so one built without wiring (unit tests, the
    simulators) needs none."""

    def scheduling_attempt(self, cluster: str, result: AttemptResult, seconds: float) -> None:
        pass

    def bind(self, cluster: str, result: BindResult) -> None:
        pass

    def pod_scheduled(self, cluster: str, seconds: float) -> None:
        pass

    def eviction(self, cluster: str, result: EvictResult) -> None:
        pass

    def defrag_plan(self, cluster: str, outcome: PlanOutcome) -> None:
        pass

    def latency_window(self, cluster: str, workload: str, frames: int, deadline_misses: int) -> None:
        pass

    def scale_hint(self, cluster: str, additions: Sequence[tuple[str, str, int]]) -> None:
        pass

    @contextlib.contextmanager
    def watching(self, source: Callable[[], Iterable[ClusterGauges]]) -> Iterator[None]:
        yield


NO_METRICS: Metrics = NullMetrics()


__all__ = [
    "AllocationRow", "AttemptResult", "BindOutcome", "BindResult", "ClusterApi", "ClusterGauges", "DecisionRow",
    "DefragPlanRecord", "EvictOutcome", "EvictResult", "GpuGrant", "GpuRow", "Json", "Metrics", "NO_METRICS",
    "NodeCapacity", "NodeGpus", "NodeRow", "NullMetrics", "OutboxStore", "OutboxUnitOfWork", "PendingReason",
    "PlanOutcome", "PlanState", "PlannedMove", "PodReader", "PodRow", "Retained", "RetentionStore", "Row",

]
