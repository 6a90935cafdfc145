"""The unit of work and its repositories, one per aggregate: each repository owns the rows of its tables and
answers for them alone, so that a use case says which part of the state it reads or writes
(`uow.pods.get_pod(...)`, `uow.allocations.reserve_many(...)`).

Nothing a method writes is seen by another unit of work before `commit()`; without it, all of it is undone. Rows
are read-only mappings (column -> value) whose fields are the columns of adapters/postgres/tables.py. Each
repository has a contract slice in tests/contract/, run on the fake and on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol

from gpuplace.usecases.pod_states import PodState
from gpuplace.usecases.ports import (
    AllocationRow,
    DecisionRow,
    DefragPlanRecord,
    GpuGrant,
    GpuRow,
    NodeRow,
    PlanState,
    PodRow,
    Reservation,
    RetentionStore,
    Row,
)


class EventClaims(Protocol):
    """Which events each consumer has processed (processed_events): what makes handling a redelivered
    event a no-op.

    Read and written inside one unit of work's transaction (UnitOfWork.events)."""

    async def claim_event(self, consumer: str, event_id: str, digest: str | None = None) -> bool:
        """Record `event_id` as processed by `consumer`: True the first time, False for a redelivery (skip it).

        Claims are per consumer. With a `digest` (Envelope.digest), an id claimed before with another digest
        raises Rejected: the same id reused for other content, not a redelivery."""
        ...

    async def claim_events(self, consumer: str, claims: Sequence[tuple[str, str | None]]) -> set[str]:
        """claim_event for many (event id, digest) pairs at once: the ids claimed now. Raises Rejected as
        claim_event does when one was claimed before with another digest."""
        ...


class Nodes(Protocol):
    """Nodes and their GPUs (nodes, gpus): the inventory, what each reports and what is assigned on it.

    Read and written inside one unit of work's transaction (UnitOfWork.nodes)."""

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

    async def cluster_names(self) -> list[str]:
        """Every cluster the store knows a node or a pod of, sorted: what a fleet-wide report goes over."""
        ...


class Pods(Protocol):
    """Pods and their lifecycle (pods): every move of a pod's state goes through pod_states.NEXT.

    Read and written inside one unit of work's transaction (UnitOfWork.pods)."""

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

    async def find_promise(self, cluster: str, namespace: str, owner: str) -> PodRow | None:
        """The oldest place promised (state `promised`) to a replacement pod of `owner` in `namespace`, None
        if there is none. Locked, and skipped by a concurrent caller: one adopter wins it."""
        ...

    async def delete_pod(self, cluster: str, uid: str) -> None:
        """Remove the pod's row and its GPU grants, without refunding them (release() first); a pod not there
        is no error."""
        ...

    async def mark_bound(self, cluster: str, uids: Sequence[str]) -> list[str]:
        """Move the pods of `uids` that are `reserved` to `bound`, stamping bound_at; the uids moved."""
        ...


class Allocations(Protocol):
    """What pods hold (allocations, and the assigned figures of nodes and GPUs they charge): the
    store checks capacity itself, so two units of work never over-commit a GPU between them.

    Read and written inside one unit of work's transaction (UnitOfWork.allocations)."""

    async def load_allocations(self, cluster: str) -> list[AllocationRow]:
        """Every GPU grant held in the cluster: (pod_uid, node, gpu_index, memory_mib, share_milli, ...)."""
        ...

    async def transfer_allocations(self, cluster: str, from_uid: str, to_uid: str) -> list[Row]:
        """Give `from_uid`'s GPU grants to `to_uid` (a promise adopted); returns the grants moved (node,
        gpu_index, memory_mib, share_milli). What the GPUs hold does not change."""
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


class Decisions(Protocol):
    """The decisions recorded about pods (decisions): each pod's story, as `gpuplace explain` tells it.

    Read and written inside one unit of work's transaction (UnitOfWork.decisions)."""

    async def add_decisions(self, decisions: Sequence[Mapping[str, Any]]) -> None:
        """Record decisions (the columns of `decisions`); read back by decisions_of and count_bound_twice."""
        ...

    async def decisions_of(self, cluster: str, pod_uid: str) -> list[DecisionRow]:
        """Every decision recorded about the pod, oldest first (by their unit of work's time), each with its
        `created_at`: the pod's history as `gpuplace explain` tells it."""
        ...

    async def decisions_with_reason(self, cluster: str, kind: str, key: str, value: str) -> list[DecisionRow]:
        """The cluster's decisions of `kind` whose reasons[key] is `value`, oldest first: e.g. the `decided` of
        the replacement that adopted a promise (reasons {"defrag": "place promised as <uid>"})."""
        ...

    async def count_bound_twice(self, cluster: str) -> int:
        """Pods with more than one `bound` decision: an invariant the benches check is always zero."""
        ...


class Plans(Protocol):
    """Defragmentation plans and their moves (defrag_plans, defrag_moves), each settled once.

    Read and written inside one unit of work's transaction (UnitOfWork.plans)."""

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


class Outbox(Protocol):
    """Events queued for Kafka in the unit of work (outbox); the relay reads them back as OutboxStore.

    Read and written inside one unit of work's transaction (UnitOfWork.outbox)."""

    async def add_outbox(self, topic: str, key: str, payload_json: str) -> None:
        """Queue an event for Kafka in this unit of work: the outbox relay publishes it once it is committed
        (OutboxStore), so nobody hears of a decision that was rolled back."""
        ...

    async def add_outbox_many(self, entries: Sequence[tuple[str, str, str]]) -> None:
        """add_outbox for many (topic, key, payload_json) at once, published in this order."""
        ...


class Latency(Protocol):
    """Latency windows, the latency model's state, and what it reads of the pods and GPUs it models
    (latency_windows, latency_models; flags on gpus and pods).

    Read and written inside one unit of work's transaction (UnitOfWork.latency)."""

    async def add_latency_window(self, window: Mapping[str, Any]) -> None:
        """Store one latency window a pod reported (the columns of `latency_windows`), for offline study."""
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


class UnitOfWork(Protocol):
    """One transaction over the fleet state: `async with uow_factory() as uow:`, then `await uow.commit()`.

    Leaving the block without commit() undoes every write; units of work running at once never see each
    other's uncommitted writes (PostgreSQL's READ COMMITTED plus the row locks its repositories take)."""

    # The repositories of this transaction, one per aggregate (above); usable only inside the
    # `async with` block.
    @property
    def events(self) -> EventClaims: ...

    @property
    def nodes(self) -> Nodes: ...

    @property
    def pods(self) -> Pods: ...

    @property
    def allocations(self) -> Allocations: ...

    @property
    def decisions(self) -> Decisions: ...

    @property
    def plans(self) -> Plans: ...

    @property
    def outbox(self) -> Outbox: ...

    @property
    def latency(self) -> Latency: ...

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


__all__ = ["Allocations", "Decisions", "EventClaims", "Latency", "Nodes", "Outbox", "Plans", "Pods", "UnitOfWork",
           "UnitOfWorkFactory"]
