"""What the watcher says of pods placement did not just decide: a pod seen bound (a bind whose outcome was lost,
or another scheduler's pod, charged where it runs so gpuplace never places over it), and a pod deleted (its
resources given back, unless a defragmentation plan in flight holds it). Callers hold the cluster (Clusters.held);
each event's id is claimed in the transaction that applies it, so a redelivery changes nothing.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from gpuplace.contracts.events import PodEvent
from gpuplace.usecases.binder import Binder
from gpuplace.usecases.checks import ApiserverChecks
from gpuplace.usecases.cluster_state import ClusterState
from gpuplace.usecases.cluster_view import ClusterView, Placement
from gpuplace.usecases.clusters import Clusters
from gpuplace.usecases.decision_log import DecisionLog
from gpuplace.usecases.event_rules import (
    CHARGE,
    CONFIRM,
    MOVE,
    bound_at,
    bound_change,
    bound_grants,
    bound_hold,
    refunds_on_delete,
    within_node,
)
from gpuplace.usecases.pod_rows import AWAITING_NODE, CONSUMER, pod_row
from gpuplace.usecases.pod_states import PodState
from gpuplace.usecases.ports import GpuGrant, PodRow
from gpuplace.usecases.repositories import UnitOfWork, UnitOfWorkFactory

log = logging.getLogger(__name__)


class BoundNews:
    def __init__(self, uow_factory: UnitOfWorkFactory, clusters: Clusters, decisions: DecisionLog, binder: Binder,
                 checks: ApiserverChecks) -> None:
        self._uow_factory = uow_factory
        self._clusters = clusters
        self._decisions = decisions
        self._binder = binder
        self._checks = checks

    async def confirm_bound(self, state: ClusterState, event: PodEvent) -> None:
        """The watcher saw the pod bound: a bind whose outcome we lost (crash) is recorded now; a pod gpuplace
        never placed (another scheduler's, or created with its node set) is charged where it runs, or where
        its scheduler nominated it to run, and moves its charge when it lands elsewhere."""
        where = bound_at(event)
        async with self._uow_factory() as uow:
            if not where or not await uow.events.claim_event(CONSUMER, event.event_id, event.digest()):
                return
            row = await uow.pods.get_pod(event.cluster, event.uid, for_update=True)
            hold = None
            # what it changes is placement's rule, which replay applies too (usecases/event_rules): MOVE is a pod
            # bound where the database does not have it, another scheduler's pod nominated for one node and bound
            # to another, or a pod whose move reconciliation found (usecases/reconcile)
            change = bound_change(event, row["state"] if row else None, row["node"] if row else None)
            unplaced, moved = change == CHARGE, change == MOVE
            # a pod of gpuplace's that placement has no row for yet is checked too: a forged `bound` event that
            # came before its pending event charged it where it does not run and left it unplaced for good (bench
            # chaos, issue 40). Other schedulers' pods are charged unchecked when first seen: charging more than
            # runs never over-commits, and reconciliation releases what the apiserver does not have.
            if (row is not None or event.managed) and (unplaced or moved):
                await self._checks.bound(event, where)
            if moved and row is not None:  # moved implies a row; said again for the type checker
                await uow.allocations.release(event.cluster, event.uid, cpu_milli=row["cpu_milli"],
                                              memory_mib=row["memory_mib"])
            if unplaced or moved:
                hold = await self._charge_elsewhere(uow, state, event, where)
            elif row is not None and change == CONFIRM:
                if not self._binder.in_flight(event.cluster, event.uid):
                    await uow.pods.set_pod_state(event.cluster, event.uid, PodState.BOUND, mark_bound=True)
                    await self._decisions.record(uow, row, "bound", node=event.node_name)
            await self._decisions.commit(uow)
        if moved:
            state.view.refund(event.uid)
        if moved or unplaced:
            state.recorded_bound.pop(event.uid, None)
        if unplaced:
            state.waiting.pop(event.uid, None)
            state.last_reasons.pop(event.uid, None)
        if hold is not None:
            self._charge_view(state, event.uid, hold)

    async def forget(self, state: ClusterState, event: PodEvent) -> str | None:
        """A deleted pod gives its resources back, unless a plan in flight reserved it on GPUs victims may
        still run on: it is marked deleted and the plan releases its hold as it settles (usecases/defrag).
        Returns the node it freed room on, if any."""
        held, freed = False, None
        async with self._uow_factory() as uow:
            if not await uow.events.claim_event(CONSUMER, event.event_id, event.digest()):
                return None
            row = await uow.pods.get_pod(event.cluster, event.uid, for_update=True)
            if row is not None and row["state"] != PodState.DELETED:
                held = not refunds_on_delete(row["state"], row["uid"] in state.planned)
                if not held:
                    freed = await uow.allocations.release(event.cluster, event.uid, cpu_milli=row["cpu_milli"],
                                                          memory_mib=row["memory_mib"])
                mid_plan: dict[str, Any] = {"reason": "deleted mid-plan"} if held else {}
                await uow.pods.set_pod_state(event.cluster, event.uid, PodState.DELETED, **mid_plan)
            await self._decisions.commit(uow)
        if not held:
            state.view.refund(event.uid)
        state.recorded_bound.pop(event.uid, None)
        state.waiting.pop(event.uid, None)
        state.last_reasons.pop(event.uid, None)
        return freed

    async def _charge_elsewhere(self, uow: UnitOfWork, state: ClusterState, event: PodEvent,
                                      node: str) -> Placement | None:
        """Inside `uow`: a pod bound without gpuplace takes its CPU, memory, slot and GPUs on `node` (the
        whole node counts, DESIGN §3); returns what to charge the view after commit. A node gpuplace has not
        heard of yet is charged when it arrives (charge_awaiting_node)."""
        row = await uow.pods.upsert_pod({**pod_row(event), "state": PodState.BOUND})
        if not state.view.has_node(node):
            await uow.pods.set_pod_state(event.cluster, event.uid, PodState.BOUND, node=node, reason=AWAITING_NODE,
                                         mark_bound=True)
            state.awaiting_nodes.add(node)
            return None
        return await self._charge_on_node(uow, state.view, row, node, mark_bound=True)

    def _charge_view(self, state: ClusterState, uid: str, hold: Placement) -> None:
        """What the database charged, charged on the view too; a view that disagrees is read again."""
        try:
            state.view.charge(uid, within_node(state.view, hold))
        except ValueError:
            state.stale = True

    async def charge_awaiting_node(self, state: ClusterState, node: str) -> None:
        """A node arrived: charge the pods bound to it that were seen before it (watch order across topics)."""
        cluster = state.view.cluster
        state.awaiting_nodes.discard(node)
        async with self._uow_factory() as uow:
            waiting = [r for r in await uow.pods.pods_in_state(cluster, (PodState.BOUND,))
                       if r["reason"] == AWAITING_NODE and r["node"] == node]
        if not waiting:
            return
        await self._clusters.reread(state)  # the view must know the node to choose GPUs on it
        async with self._uow_factory() as uow:
            for row in waiting:
                current = await uow.pods.get_pod(cluster, row["uid"], for_update=True)
                if current is not None and current["state"] == PodState.BOUND and current["reason"] == AWAITING_NODE:
                    await self._charge_on_node(uow, state.view, current, node)
            await self._decisions.commit(uow)

    async def _charge_on_node(self, uow: UnitOfWork, view: ClusterView, row: PodRow, node: str, *,
                              mark_bound: bool = False) -> Placement:
        """Inside `uow`: charge a pod bound without gpuplace on `node`, where it runs (see gpus_for_bound_pod)."""
        grants = bound_grants(view, row, node)
        gpu_indices, share, memory = grants
        refused = await uow.allocations.charge_bound(
            cluster=row["cluster"], pod_uid=row["uid"], node=node,
            grants=[GpuGrant(i, memory, share) for i in gpu_indices], cpu_milli=row["cpu_milli"],
            memory_mib=row["memory_mib"], decision_id=uuid.uuid4().hex)
        reason = f"GPUs {refused} over-committed by another scheduler" if refused else None
        if refused:
            log.warning("pod %s/%s bound to %s by another scheduler: %s", row["namespace"], row["name"], node,
                        reason)
        await uow.pods.set_pod_state(row["cluster"], row["uid"], PodState.BOUND, node=node, reason=reason,
                                     mark_bound=mark_bound)
        return bound_hold(row, node, grants, refused)


__all__ = ["BoundNews"]
