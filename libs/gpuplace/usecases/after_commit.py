"""What placement does once a transaction committed (step 2 on, usecases/placement.py): a reserved pod leaves the
queue and is bound (usecases/binder.py); a pod that fits nowhere waits in its cluster's queue, is told why once
(a FailedScheduling Event, in the background), and PodWaits is published so room may be made or asked for
(usecases/defrag.py, scale_hints.py). Also what a loaded cluster resumes: reserved pods bound again, waiting
ones queued again. Never before the commit: nothing is bound, told or planned on a decision that may roll back.
Callers hold the cluster."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuplace.usecases import feedback
from gpuplace.usecases.binder import Binder
from gpuplace.usecases.cluster_state import ClusterState
from gpuplace.usecases.cluster_view import Placement
from gpuplace.usecases.messages import MessageBus, PodWaits
from gpuplace.usecases.pod_rows import AWAITING_NODE
from gpuplace.usecases.pod_states import TRACKED, PodState
from gpuplace.usecases.ports import ClusterApi, PodRow
from gpuplace.usecases.report_queue import FAILED_SCHEDULING, Reporter
from gpuplace.usecases.repositories import UnitOfWorkFactory


@dataclass
class Placed:
    """A transaction's placements, applied once it committed: the pods reserved (already charged on the view)
    are bound, the pods that fit nowhere wait (with their reasons)."""

    placed: list[tuple[PodRow, Placement]] = field(default_factory=list)
    waiting: list[tuple[PodRow, dict[str, str]]] = field(default_factory=list)


class AfterCommit:
    def __init__(self, uow_factory: UnitOfWorkFactory, cluster_apis: Mapping[str, ClusterApi], binder: Binder,
                 reporter: Reporter, bus: MessageBus) -> None:
        self._uow_factory = uow_factory
        self._apis = cluster_apis
        self._binder = binder
        self._feedback = reporter  # Events and PodScheduled, in the background (usecases/report_queue)
        self._bus = bus

    async def apply(self, state: ClusterState, done: Placed) -> None:
        """A transaction's placements, once it committed: the pods reserved are bound, the others wait."""
        for row, hold in done.placed:
            self.placed(state, row, hold)
        for row, reasons in done.waiting:
            await self._waits(state, row, reasons)

    def placed(self, state: ClusterState, row: PodRow, hold: Placement) -> None:
        """A reservation committed (and charged on the view): the pod leaves the queue and is bound."""
        state.waiting.pop(row["uid"], None)
        state.last_reasons.pop(row["uid"], None)
        self._binder.spawn(state, row, hold)

    def bind_again(self, state: ClusterState, row: PodRow) -> None:
        """Bind a pod reserved earlier (before a restart, or by a plan that completed) on what the view holds for
        it; not twice (a bind in flight), and not while a plan in flight holds it (the plan binds it)."""
        uid = row["uid"]
        if uid in state.view.holds and not self._binder.in_flight(row["cluster"], uid) and uid not in state.planned:
            self._binder.spawn(state, row, state.view.holds[uid])

    def bind_adopted(self, state: ClusterState, row: PodRow) -> None:
        """A replacement took the place promised to its owner (committed, the view re-read): it is bound there."""
        self._binder.spawn(state, row, state.view.holds[row["uid"]])

    async def bind_settled(self, state: ClusterState, uid: str) -> None:
        """A plan completed: its beneficiary, still reserved, is bound on what the view holds for it."""
        async with self._uow_factory() as uow:
            row = await uow.pods.get_pod(state.view.cluster, uid)
        # not twice: a redelivered pending event may have started its bind once the plan settled
        if row is not None and row["state"] == PodState.RESERVED and uid in state.view.holds and \
                not self._binder.in_flight(state.view.cluster, uid):
            state.waiting.pop(uid, None)
            self._binder.spawn(state, row, state.view.holds[uid])

    async def _waits(self, state: ClusterState, row: PodRow, reasons: dict[str, str]) -> None:
        """A pod fits nowhere (committed): it waits in the queue, is told why once, and may have room made."""
        if state.last_reasons.get(row["uid"]) != reasons:  # what Deciding._record_waiting recorded: a new reason
            self.report_unschedulable(row, feedback.message(reasons))
        state.waiting[row["uid"]] = row
        state.last_reasons[row["uid"]] = reasons
        await self._bus.publish(PodWaits(row, nodes_known=state.view.snapshot is not None))

    def report_unschedulable(self, row: PodRow, message: str) -> None:
        """A FailedScheduling Event on the pod, in the background, never failing placement."""
        api, pod = self._apis[row["cluster"]], (row["namespace"], row["name"], row["uid"])
        self._feedback.spawn(row["cluster"] + row["uid"], FAILED_SCHEDULING, f"{pod[0]}/{pod[1]}",
                             lambda: api.report_unschedulable(*pod, message))

    async def requeue(self, state: ClusterState) -> None:
        """A cluster loaded: its reserved-but-unbound pods are bound again, its waiting pods queued again, and
        pods bound to nodes not known yet are charged when those arrive."""
        async with self._uow_factory() as uow:
            rows = await uow.pods.pods_in_state(state.view.cluster, TRACKED)
        for row in rows:
            if row["state"] == PodState.BOUND:
                if row["reason"] == AWAITING_NODE and row["node"]:
                    state.awaiting_nodes.add(row["node"])
            elif row["state"] == PodState.RESERVED:
                self.bind_again(state, row)
            else:
                state.waiting[row["uid"]] = row


__all__ = ["AfterCommit", "Placed"]
