"""The ports the use cases drive: a unit of work over the fleet state, the outbox as its relay reads it, each
cluster's API, and the metrics they report to the operator.

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

from gpuplace.usecases.pod_states import PodState

Row = Mapping[str, Any]
Json = dict[str, Any]


class PodRow(TypedDict):
    """A row of the pods table (adapters/postgres/tables.py) as the state repository returns it: what the
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
    """What one pod takes of one GPU: the argument of StateRepository.reserve()."""

    index: int
    memory_mib: int
    share_milli: int


@dataclass(frozen=True)
class Reservation:
    """One pod's place in a batch of reservations (StateRepository.reserve_many): what reserve() takes for it."""

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


class StateRepository(Protocol):
    """The fleet state, read and written inside one unit of work's transaction.

    Nothing a method writes is seen by another unit of work before `commit()`; without it, all of it is undone.
    Rows are read-only mappings (column -> value) whose fields are the columns of adapters/postgres/tables.py.
    """

    async def claim_event(self, consumer: str, event_id: str, digest: str | None = None) -> bool:
        """Record `event_id` as processed by `consumer`: True the first time, False for a redelivery (skip it).

        Claims are per consumer. With a `digest` (Envelope.digest), an id claimed before with another digest
        raises Rejected: the same id reused for other content, not a redelivery."""
        ...

    async def claim_events(self, consumer: str, claims: Sequence[tuple[str, str | None]]) -> set[str]:
        """claim_event for many (event id, digest) pairs at once: the ids claimed now. Raises Rejected as
        claim_event does when one was claimed before with another digest."""
        ...

    async def upsert_node(self, node: Mapping[str, Any]) -> list[int]:
        """Insert or refresh a node (present again, if it was absent); its GPU rows become indices
        0..gpu_count-1: what they hold is kept, GPUs past the new count are dropped with the grants on them. A GPU
        whose reported memory is below what pods hold keeps memory_total_mib at what they hold (nothing new fits)
        until release brings it down to the report; returns the indices of such GPUs (over-committed by the node's
        own report, not by placement)."""
        ...

    async def delete_node(self, cluster: str, name: str) -> list[str]:
        """A node left the cluster: remove it with its GPUs, or, while pods still hold resources there (GPU
        allocations, or CPU as a reserved or bound pod), keep it `absent_since` now with everything they hold, so
        that the node registering again under its name (upsert_node clears the mark) is charged with them. Pods,
        not nodes, are the truth: a reservation lasts as long as its pod. Returns the uids of the pods holding
        there (each once); a node that is not there returns []."""
        ...

    async def record_telemetry(self, cluster: str, node: str, index: int, **observed: Any) -> bool:
        """Store what a GPU reports of itself (`observed`: uuid, memory_observed_mib, utilization_pct, healthy);
        False, storing nothing, when the GPU is not in the inventory."""
        ...

    async def load_nodes(self, cluster: str) -> list[NodeRow]:
        """The cluster's nodes, by name, with what is assigned on each (cpu_assigned_milli, ...)."""
        ...

    async def load_gpus(self, cluster: str) -> list[GpuRow]:
        """The cluster's GPUs, by node then index, with what is assigned and observed on each."""
        ...

    async def upsert_pod(self, pod: Mapping[str, Any]) -> PodRow:
        """Insert a pod seen for the first time, or refresh its request; returns the stored row.

        `state`, `node` and `reason` are only set on insert (after that they move through set_pod_state), and
        `first_seen_at` is the first insert's. A new row's state must be one of pod_states.INITIAL
        (IllegalTransition otherwise)."""
        ...

    async def upsert_pods(self, pods: Sequence[Mapping[str, Any]]) -> list[PodRow]:
        """upsert_pod for many pods at once (each (cluster, uid) once); the stored rows, in the order given."""
        ...

    async def get_pod(self, cluster: str, uid: str, *, for_update: bool = False) -> PodRow | None:
        """The pod's row, None if there is none; `for_update` locks it until the unit of work ends."""
        ...

    async def set_pod_state(self, cluster: str, uid: str, state: PodState, *, mark_bound: bool = False,
                            **fields: Any) -> None:
        """Move a pod to `state`, setting `fields` too; `mark_bound` stamps bound_at with the store's clock.
        A move pod_states.NEXT does not allow raises IllegalTransition, nothing written; no pod, no change."""
        ...

    async def pods_in_state(self, cluster: str, states: Sequence[PodState]) -> list[PodRow]:
        """The cluster's pods in one of `states`, oldest first (first_seen_at)."""
        ...

    async def find_pods(self, name: str, *, namespace: str | None = None, cluster: str | None = None) -> list[PodRow]:
        """The pods named `name` (in `namespace`, in `cluster`, when given), whatever their state, newest first
        (first_seen_at): a name may have been used by several pods over time, and in several clusters."""
        ...

    async def count_pods_by_state(self, clusters: Sequence[str]) -> dict[str, int]:
        """gpuplace's own pods (`managed`) in `clusters`, counted by state; pods it only charges are not counted."""
        ...

    async def load_allocations(self, cluster: str) -> list[AllocationRow]:
        """Every GPU grant held in the cluster: (pod_uid, node, gpu_index, memory_mib, share_milli, ...)."""
        ...

    async def find_promise(self, cluster: str, namespace: str, owner: str) -> PodRow | None:
        """The oldest place promised (state `promised`) to a replacement pod of `owner` in `namespace`, None
        if there is none. Locked, and skipped by a concurrent caller: one adopter wins it."""
        ...

    async def transfer_allocations(self, cluster: str, from_uid: str, to_uid: str) -> list[Row]:
        """Give `from_uid`'s GPU grants to `to_uid` (a promise adopted); returns the grants moved (node,
        gpu_index, memory_mib, share_milli). What the GPUs hold does not change."""
        ...

    async def delete_pod(self, cluster: str, uid: str) -> None:
        """Remove the pod's row and its GPU grants, without refunding them (release() first); a pod not there
        is no error."""
        ...

    async def reserve(self, *, cluster: str, pod_uid: str, node: str, grants: Iterable[GpuGrant], cpu_milli: int,
                      memory_mib: int, decision_id: str) -> str | None:
        """Take `grants` and the pod's CPU and memory on `node`: None when it all fits, else why it no longer
        does. The store checks capacity itself, so two units of work never over-commit a GPU between them.
        After a refusal the unit of work holds partial updates: the caller must not commit it."""
        ...

    async def reserve_many(self, cluster: str, reservations: Sequence[Reservation]) -> str | None:
        """reserve() for many pods at once, each pod moved to `reserved` on its node: None when all of it fits
        and every pod is still waiting (pending or unschedulable), else why not: a GPU or node that no longer
        fits, or a pod reserved meanwhile (by another worker). Then, as for reserve(), the caller must not commit."""
        ...

    async def mark_bound(self, cluster: str, uids: Sequence[str]) -> list[str]:
        """Move the pods of `uids` that are `reserved` to `bound`, stamping bound_at; the uids moved."""
        ...

    async def charge_bound(self, *, cluster: str, pod_uid: str, node: str, grants: Iterable[GpuGrant],
                           cpu_milli: int, memory_mib: int, decision_id: str) -> list[int]:
        """Charge a pod another scheduler bound: its CPU and memory always (the node runs it, whatever gpuplace
        thought was free), each GPU grant only where the GPU still has room; returns the GPU indices refused."""
        ...

    async def release(self, cluster: str, pod_uid: str, *, cpu_milli: int, memory_mib: int) -> str | None:
        """Give back everything the pod holds: its GPU grants, and `cpu_milli`/`memory_mib` on their node (for a
        pod without GPUs, on the node its row names while reserved, bound or promised); returns that node, None
        when it held nothing. An absent node (delete_node) goes with the last pod holding there, and a GPU that
        reports less than was held (upsert_node) comes down to its report as the holders go."""
        ...

    async def add_decisions(self, decisions: Sequence[Mapping[str, Any]]) -> None:
        """Record decisions (the columns of `decisions`); read back by decisions_of and count_bound_twice."""
        ...

    async def add_plan(self, plan: DefragPlanRecord) -> None:
        """Record a new plan (state planned) with its moves."""
        ...

    async def open_plans(self, cluster: str) -> list[DefragPlanRecord]:
        """The cluster's plans not yet settled, oldest first."""
        ...

    async def plan_state(self, cluster: str, plan_id: str) -> PlanState | None:
        """Where the plan stands; None for a plan the state does not know."""
        ...

    async def settle_plan(self, cluster: str, plan_id: str, state: PlanState, reason: str | None = None) -> bool:
        """Move a planned plan to `state` (completed or aborted): True if this call settled it, False if it was
        settled already (or is unknown). Locks the plan's row, so of two units of work settling the same plan
        the second waits and gets False."""
        ...

    async def plan_moving(self, cluster: str, uid: str) -> DefragPlanRecord | None:
        """The latest plan that moved the pod `uid`, None if none did."""
        ...

    async def decisions_of(self, cluster: str, pod_uid: str) -> list[DecisionRow]:
        """Every decision recorded about the pod, oldest first (by their unit of work's time), each with its
        `created_at`: the pod's history as `gpuplace explain` tells it."""
        ...

    async def decisions_with_reason(self, cluster: str, kind: str, key: str, value: str) -> list[DecisionRow]:
        """The cluster's decisions of `kind` whose reasons[key] is `value`, oldest first: e.g. the `decided` of
        the replacement that adopted a promise (reasons {"defrag": "place promised as <uid>"})."""
        ...

    async def add_outbox(self, topic: str, key: str, payload_json: str) -> None:
        """Queue an event for Kafka in this unit of work: the outbox relay publishes it once it is committed
        (OutboxStore), so nobody hears of a decision that was rolled back."""
        ...

    async def add_outbox_many(self, entries: Sequence[tuple[str, str, str]]) -> None:
        """add_outbox for many (topic, key, payload_json) at once, published in this order."""
        ...

    async def count_bound_twice(self, cluster: str) -> int:
        """Pods with more than one `bound` decision: an invariant the benches check is always zero."""
        ...

    async def add_latency_window(self, window: Mapping[str, Any]) -> None:
        """Store one latency window a pod reported (the columns of `latency_windows`), for offline study."""
        ...

    async def cluster_names(self) -> list[str]:
        """Every cluster the store knows a node or a pod of, sorted: what a fleet-wide report goes over."""
        ...

    async def latency_by_workload(self, cluster: str) -> list[Row]:
        """The cluster's latency windows summed per workload, by workload name: `windows`, `frames`,
        `deadline_misses`, `p95_ms` (the 95th percentile of the windows' p95, interpolated as PostgreSQL's
        percentile_cont), `worst_p95_ms` (the largest window p95) and `deadline_ms` (the tightest deadline a
        window declared; None when none did). Summed in the store: the windows are many, their summary small."""
        ...

    async def flag_slo_violation(self, cluster: str, pod_uid: str, node: str, gpu_index: int) -> bool:
        """Close the GPU to new pods (slo_blocked_at) and mark the pod for a move (move_requested_at); False
        when both already were, so a violation is announced once per GPU and pod, not once per window."""
        ...

    async def load_latency_model(self, name: str, *, for_update: bool = False) -> dict[str, Any] | None:
        """The latency model's saved state, None before the first save; `for_update` locks it until the unit of
        work ends (one learner at a time)."""
        ...

    async def save_latency_model(self, name: str, state: Mapping[str, Any]) -> None:
        """Replace the model's state (insert on the first save)."""
        ...

    async def co_runners(self, cluster: str, node: str, gpu_index: int, *, exclude_uid: str) -> list[Row]:
        """The other pods holding this GPU, with what the latency model needs of them (uid, frame_rate_hz,
        workload, deadline_ms)."""
        ...

    async def gpu_of_pod(self, cluster: str, namespace: str, name: str) -> Row | None:
        """Where a reserved or bound pod runs (node, gpu_index, the GPU's model) and its latency fields (uid,
        deadline_ms, frame_rate_hz, workload); None for a pod holding no GPU or in another state."""
        ...


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


class UnitOfWork(Protocol):
    """One transaction over the fleet state: `async with uow_factory() as uow:`, then `await uow.commit()`.

    Leaving the block without commit() undoes every write; units of work running at once never see each
    other's uncommitted writes (PostgreSQL's READ COMMITTED plus the row locks the repository takes)."""

    @property
    def state(self) -> StateRepository:
        """The repository of this transaction; usable only inside the `async with` block."""
        ...

    @property
    def retention(self) -> RetentionStore:
        """Pruning, in this transaction (usecases/retention.py); usable only inside the `async with` block."""
        ...

    async def __aenter__(self) -> UnitOfWork: ...

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        """End the transaction, undoing what was not committed; never swallows the block's exception."""
        ...

    async def commit(self) -> None:
        """Make the writes durable and visible to other units of work."""
        ...


UnitOfWorkFactory = Callable[[], UnitOfWork]


class OutboxStore(Protocol):
    """The outbox as its relay reads it: events added by StateRepository.add_outbox and committed."""

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
    def state(self) -> OutboxStore: ...

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
    "StateRepository", "UnitOfWork", "UnitOfWorkFactory",
]
