"""Carry out a defragmentation plan: reserve every place first, evict through the API, bind, or abort.

The core's planner (core/defrag) says which running pods to move and where. The order of effects is what
keeps every promise (DESIGN §6):
1. one transaction moves each victim's GPUs to a `promised` row for its owner at the target (the place
   its replacement will adopt), reserves the beneficiary where the victims were, writes `defrag_planned`;
2. victims are evicted one by one through pods/eviction, so PodDisruptionBudgets hold; each success is
   an `evicted` event;
3. a refusal (429), any failure, or victims still running eviction_wait_s after their eviction abort: one
   transaction gives the victims still running their old GPUs back, drops their promises, releases the
   beneficiary, writes `defrag_aborted` with the reason. Victims already gone keep their promises: their
   replacements were promised a place. The waiting pods are tried again at once;
4. once the victims are gone, the beneficiary is bound (`defrag_completed`).
The replacement pod a controller creates adopts its owner's promise (Deciding._adopt_promise, usecases/deciding.py).
The defragmenter is a handler (usecases/messages.py): of PodWaits, which starts a plan, and of ClusterLoaded,
which recovers; it publishes PlanStarted and PlanSettled, on which placement binds the beneficiary or tries the
waiting pods again.

A beneficiary deleted mid-plan holds the victims' old GPUs, on which victims may still run: releasing
them at once would let another pod be placed over a running victim. BoundNews.forget therefore
marks it `deleted` but leaves its hold to the plan, which releases it as it settles (3 or 4) instead of
requeueing or binding the pod (_deleted_mid_plan).

A process that dies between 1 and 4 leaves a `reserved` (or deleted but holding) beneficiary on GPUs
victims may still run on. Step 1 therefore records the plan and its moves in their own rows (defrag_plans,
defrag_moves), and `recover()` settles the open ones before the restarted process binds anything: completed
if every victim is gone, aborted as in 3 otherwise. Evictions are not resumed.

Each plan is settled (3 or 4) exactly once: settling is a conditional update of its row (repositories.
Plans.settle_plan), and the first to make it wins. Any placement worker that loads the cluster runs recover() and
may settle a plan another live worker is still carrying out; the plan's own worker then finds it settled and
stops: it evicts no further victim, records nothing, binds nothing.

Each plan is counted (Metrics.defrag_plan) as it is planned, completed or aborted, by whoever records it, and
each eviction call with its outcome.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuplace.core.defrag import planner
from gpuplace.core.defrag.model import Limits, PastMove, Plan, Refusal, RunningPod
from gpuplace.usecases.background import Background
from gpuplace.usecases.cluster_view import ClusterView, core_pod, pod_stream
from gpuplace.usecases.clusters import Clusters
from gpuplace.usecases.decision_log import DecisionLog
from gpuplace.usecases.messages import ClusterLoaded, MessageBus, PlanSettled, PlanStarted, PodWaits, SettledAs
from gpuplace.usecases.pod_states import PLACED, WAITING, PodState
from gpuplace.usecases.ports import (
    NO_METRICS,
    ClusterApi,
    DefragPlanRecord,
    EvictOutcome,
    EvictResult,
    GpuGrant,
    Metrics,
    PlannedMove,
    PlanState,
    PodRow,
)
from gpuplace.usecases.repositories import UnitOfWork, UnitOfWorkFactory

log = logging.getLogger(__name__)
RESTARTED = "placement restarted mid-plan"
BENEFICIARY_DELETED = {"beneficiary": "deleted"}  # in the outcome's reasons: its hold released, nothing bound
SETTLED_ELSEWHERE = "settled by another placement worker"
_EVICT_RESULTS: dict[EvictOutcome, EvictResult] = {
    EvictOutcome.EVICTED: "evicted", EvictOutcome.REFUSED: "refused", EvictOutcome.GONE: "gone"}


@dataclass(frozen=True)
class DefragSettings:
    min_priority: int = 1  # pods below this priority never trigger moves
    limits: Limits = field(default_factory=Limits)
    restart_s: float = 30.0  # assumed restart time of a moved pod (the planner's cost)
    eviction_wait_s: float = 120.0  # how long evicted pods may take to go before the plan is aborted


class Defragmenter:
    """Plans and carries out moves for pods that wait (PodWaits), one plan at a time per cluster, and settles the
    plans a previous process left half done when a cluster is loaded (ClusterLoaded). It tells placement what
    it holds through messages (PlanStarted, PlanSettled) and takes a cluster only through Clusters.held."""

    def __init__(self, uow_factory: UnitOfWorkFactory, apis: Mapping[str, ClusterApi], clusters: Clusters,
                 decisions: DecisionLog, bus: MessageBus, background: Background,
                 policy_for: Callable[[ClusterView, Any, Any], Any], *, settings: DefragSettings | None = None,
                 clock: Callable[[], float] = time.monotonic, metrics: Metrics = NO_METRICS) -> None:
        self._uow_factory = uow_factory
        self._apis = apis
        self._clusters = clusters
        self._decisions = decisions  # where the plan's steps are recorded, with placement's decisions
        self._bus = bus
        self._background = background
        self._policy_for = policy_for
        self.settings = settings or DefragSettings()
        self._clock = clock
        self._metrics = metrics
        # Evictions this process made, per cluster: all the history Limits' hourly caps count. It lives in memory,
        # so a restart forgets it and each placement process keeps its own (see Limits.max_evictions_per_hour).
        self._history: dict[str, list[PastMove]] = {}
        self._busy: set[str] = set()  # clusters with a plan in flight: one at a time per cluster
        self._beneficiaries: set[str] = set()  # pods reserved by a plan in flight: bound by the plan, not before

    def wants(self, row: PodRow) -> bool:
        return row["priority"] >= self.settings.min_priority and row["cluster"] not in self._busy

    async def on_pod_waits(self, message: PodWaits) -> None:
        """A pod fits nowhere: plan room for it in the background, if it may have some made."""
        if message.nodes_known and self.wants(message.row):
            self._background.spawn(self.relieve(message.row))

    async def on_cluster_loaded(self, message: ClusterLoaded) -> None:
        """Settle the cluster's half-done plans before placement resumes it (recover), in the loader's hold."""
        if await self.recover(message.cluster):
            async with self._clusters.held(message.cluster) as state:
                await self._clusters.reread(state)

    async def relieve(self, row: PodRow) -> Plan | Refusal | None:
        """Plan moves for a blocked pod and carry them out; returns the plan, the refusal, or None.

        Its settling is published (PlanSettled) exactly once: `aborted` or `released` inside the hold that
        recorded it (the waiting pods are tried again in it), `completed` after it (the bind takes the cluster
        itself), `dropped` when it ends having reserved nothing."""
        cluster, uid = row["cluster"], row["uid"]
        if cluster in self._busy:
            return None
        self._busy.add(cluster)
        self._beneficiaries.add(uid)
        settled: list[SettledAs] = []
        try:
            await self._bus.publish(PlanStarted(cluster, uid))
            return await self._carry_out(row, settled)
        finally:
            try:
                if not settled:
                    await self._bus.publish(PlanSettled(cluster, uid, "dropped"))
            finally:
                self._busy.discard(cluster)
                self._beneficiaries.discard(uid)

    async def _carry_out(self, row: PodRow, settled: list[SettledAs]) -> Plan | Refusal | None:
        cluster = row["cluster"]
        async with self._clusters.held(cluster) as state:
            view = await self._clusters.reread(state)  # the cluster as it is now, not when the pod blocked
            if view.snapshot is None:
                return None
            plan, running = await self._plan(view, row)
            if not isinstance(plan, Plan):
                self._metrics.defrag_plan(cluster, "infeasible")
                return plan
            if not plan.moves:
                return plan
            reserved = await _reserve(self._uow_factory, self._decisions, row, plan, running)
            if reserved is None:
                self._metrics.defrag_plan(cluster, "stale")
                return None
            self._metrics.defrag_plan(cluster, "planned")
            plan_id, victims = reserved
            await self._clusters.reread(state)
        evicted, refusal = await self._evict_all(row, plan_id, plan, running)
        if not refusal and not await self._wait_gone(row, plan, running):
            refusal = f"evicted pods still running after {self.settings.eviction_wait_s:g} s"
        if refusal:
            gone = {v.uid for v in victims if v.uid in evicted and await self._gone(cluster, v)}
            async with self._clusters.held(cluster):
                await self._abort(row, plan_id, victims, gone, reason=refusal)
                await self._settled(row, "aborted", settled)
            return plan
        async with self._clusters.held(cluster):  # as placement's deletion: it finds the plan holding, or settled
            bind = await self._complete(row, plan_id, plan.node, {"moves": str(len(plan.moves))})
            self._beneficiaries.discard(row["uid"])  # settled: a deletion now releases it as any pod's
            if not bind:
                await self._settled(row, "released", settled)
        if bind:
            await self._settled(row, "completed", settled)
        return plan

    async def _settled(self, row: PodRow, outcome: SettledAs, settled: list[SettledAs]) -> None:
        settled.append(outcome)
        await self._bus.publish(PlanSettled(row["cluster"], row["uid"], outcome))

    # -- planning ------------------------------------------------------------------------------------------
    async def _plan(self, view: ClusterView, row: PodRow) -> tuple[Plan | Refusal, dict[str, RunningPod]]:
        assert view.snapshot is not None
        async with self._uow_factory() as uow:
            holders = await uow.pods.pods_in_state(row["cluster"], PLACED)
        by_uid = {p["uid"]: p for p in holders}
        running = {
            uid: RunningPod(uid=uid, pod=core_pod(by_uid[uid]), node_name=hold.node, gpu_indices=hold.gpu_indices,
                            share_milli=hold.share_milli, memory_mib=hold.gpu_memory_mib,
                            owner=by_uid[uid]["owner"], restart_s=self.settings.restart_s)
            for uid, hold in view.holds.items()
            if uid in by_uid and by_uid[uid]["state"] == PodState.BOUND and hold.gpu_indices and _movable(by_uid[uid])
        }
        pod = core_pod(row)
        policy = self._policy_for(view, pod, pod_stream(row, pod))
        history = self._history.setdefault(row["cluster"], [])
        result = planner.plan(view.snapshot.copy(), pod, list(running.values()), policy, self.settings.limits,
                              history, self._clock())
        return result, running

    # -- evicting ------------------------------------------------------------------------------------------
    async def _evict_all(self, row: PodRow, plan_id: str, plan: Plan, running: dict[str, RunningPod]
                         ) -> tuple[list[str], str]:
        """Step 2: evict in the plan's order; stop at the first refusal, or before the next eviction once the
        beneficiary is deleted (moving pods for nobody) or the plan was settled by another placement worker.
        Returns the uids evicted and why it stopped early ("" when every eviction went through)."""
        api = self._apis[row["cluster"]]
        evicted: list[str] = []
        for move in plan.moves:
            stop = await self._stop_reason(row, plan_id)
            if stop:
                return evicted, stop
            victim_row = await self._pod_row(row["cluster"], move.uid)
            try:
                outcome = await api.evict(victim_row["namespace"], victim_row["name"], move.uid)
            except Exception as exc:  # noqa: BLE001 - any failure aborts the plan cleanly
                self._metrics.eviction(row["cluster"], "error")
                return evicted, f"eviction of {victim_row['name']}: error: {exc}"
            self._metrics.eviction(row["cluster"], _EVICT_RESULTS[outcome])
            if outcome is EvictOutcome.REFUSED:
                return evicted, f"eviction of {victim_row['name']} refused by a PodDisruptionBudget"
            evicted.append(move.uid)
            self._history.setdefault(row["cluster"], []).append(
                PastMove(move.uid, running[move.uid].owner, self._clock()))
            async with self._uow_factory() as uow:
                await self._decisions.record(
                    uow, victim_row, "evicted", node=move.from_node,
                    reasons={"for": f"{row['namespace']}/{row['name']}", "to": move.to_node})
                await self._decisions.commit(uow)
        return evicted, ""

    async def _wait_gone(self, row: PodRow, plan: Plan, running: dict[str, RunningPod]) -> bool:
        """Bind the beneficiary only once the victims' processes left its GPUs: whether they all did within
        eviction_wait_s. If not, the plan is aborted and a victim still running gets its GPUs back (a pod
        stuck terminating, a finalizer), so nothing is ever placed over it."""
        api = self._apis[row["cluster"]]
        deadline = self._clock() + self.settings.eviction_wait_s
        for move in plan.moves:
            victim_row = await self._pod_row(row["cluster"], move.uid)
            while not _is_gone(await api.read_pod(victim_row["namespace"], victim_row["name"]), move.uid):
                if self._clock() >= deadline:
                    return False
                await asyncio.sleep(0.2)
        return True

    async def _complete(self, row: PodRow, plan_id: str, node: str | None, reasons: dict[str, str]) -> bool:
        """Step 4's record, one transaction: `defrag_completed`. Returns whether the beneficiary is to be
        bound; a beneficiary deleted mid-plan is not: its hold is released instead, as the victims left.
        A plan another worker already settled is left as it was settled (see _settle)."""
        async with self._uow_factory() as uow:
            deleted = await _deleted_mid_plan(uow, row)
            if not await _settle(uow, row, plan_id, PlanState.COMPLETED):
                return False
            if deleted:
                await _release_beneficiary(uow, row)
            await self._decisions.record(uow, row, "defrag_completed", node=node,
                                              reasons={**reasons, **(BENEFICIARY_DELETED if deleted else {})})
            await self._decisions.commit(uow)
        self._metrics.defrag_plan(row["cluster"], "completed")
        return not deleted

    async def _abort(self, row: PodRow, plan_id: str, victims: Sequence[PlannedMove], gone: Collection[str], *,
                     reason: str) -> None:
        """Step 3, one transaction: every reservation not yet used is released. Victims still running get
        their GPUs back and lose their promises; victims in `gone` (evicted and left) keep theirs. The beneficiary
        waits again, unless it was deleted mid-plan. Shared by a refused eviction (relieve) and a plan a
        restart interrupted (recover). A plan already settled, by another placement worker's recover, is left
        as it was settled (see _settle)."""
        cluster = row["cluster"]
        async with self._uow_factory() as uow:
            deleted = await _deleted_mid_plan(uow, row)
            if not await _settle(uow, row, plan_id, PlanState.ABORTED, reason):
                return
            await _release_beneficiary(uow, row)
            if not deleted:
                await uow.pods.set_pod_state(cluster, row["uid"], PodState.UNSCHEDULABLE, node=None,
                                             reason=f"defrag aborted: {reason}")
            for victim in victims:
                if victim.uid in gone:
                    continue
                await uow.allocations.release(cluster, victim.promise, cpu_milli=victim.cpu_milli,
                                              memory_mib=victim.pod_memory_mib)
                await uow.pods.delete_pod(cluster, victim.promise)
                refusal = await uow.allocations.reserve(
                    cluster=cluster, pod_uid=victim.uid, node=victim.from_node,
                    grants=[GpuGrant(g, victim.memory_mib, victim.share_milli) for g in victim.from_gpu_indices],
                    cpu_milli=victim.cpu_milli, memory_mib=victim.pod_memory_mib, decision_id="defrag-abort")
                if refusal:  # cannot happen: the beneficiary's hold on those GPUs was released above
                    raise RuntimeError(f"abort could not give {victim.uid} its GPUs back: {refusal}")
            await self._decisions.record(uow, row, "defrag_aborted", reasons={
                "reason": reason, "evicted": str(sum(v.uid in gone for v in victims)),
                **(BENEFICIARY_DELETED if deleted else {})})
            await self._decisions.commit(uow)
        self._metrics.defrag_plan(cluster, "aborted")

    # -- after a restart -----------------------------------------------------------------------------------
    async def recover(self, cluster: str) -> int:
        """Settle the plans a previous process left half done; returns how many there were.

        Run on ClusterLoaded before placement binds the cluster's reserved pods (bootstrap's order), so that no
        beneficiary is bound on GPUs a victim still runs on. A plan is interrupted when it is still open (its
        beneficiary is then `reserved`, or `deleted` but still holding GPUs). If every victim is gone, only the
        bind was left: `defrag_completed` is recorded and the caller binds the pod as it binds any reserved pod
        (a deleted one's hold is released instead). Otherwise the plan is aborted as a refusal aborts it.
        Evictions are not resumed: the process that planned them is gone, and the pod asks again when it is
        retried.
        """
        async with self._uow_factory() as uow:
            interrupted = []
            for plan in await uow.plans.open_plans(cluster):
                if plan.beneficiary_uid in self._beneficiaries:
                    continue  # this process carries the plan out still (its partitions were reassigned)
                row = await uow.pods.get_pod(cluster, plan.beneficiary_uid)
                if row is None:  # cannot happen: a beneficiary's row outlives its plan (deleted is a state)
                    log.error("defrag plan %s: its beneficiary %s has no row", plan.plan_id, plan.beneficiary_uid)
                    continue
                interrupted.append((row, plan))
        for row, plan in interrupted:
            if not plan.moves:  # from before plans had tables (migration 0008): whom to give GPUs back is unknown
                await self._abort(row, plan.plan_id, (), (), reason=f"{RESTARTED}; its moves were not recorded")
                continue
            gone = {v.uid for v in plan.moves if await self._gone(cluster, v)}
            if len(gone) < len(plan.moves):
                await self._abort(row, plan.plan_id, plan.moves, gone, reason=RESTARTED)
                continue
            await self._complete(row, plan.plan_id, row["node"], {"moves": str(len(plan.moves)),
                                                                  "recovered": RESTARTED})
        return len(interrupted)

    async def _gone(self, cluster: str, victim: PlannedMove) -> bool:
        """The victim's pod has left: deleted as the state saw it, or as the API answers (as _wait_gone).

        A read that fails counts as present: an abort is always safe, a bind over a running victim is not.
        """
        async with self._uow_factory() as uow:
            row = await uow.pods.get_pod(cluster, victim.uid)
        if row is None or row["state"] == PodState.DELETED:  # its GPUs were already released: never give them back
            return True
        try:
            live = await self._apis[cluster].read_pod(victim.namespace, victim.name)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.warning("cannot tell whether %s/%s is gone: %s", victim.namespace, victim.name, exc)
            return False
        return _is_gone(live, victim.uid)

    async def _stop_reason(self, row: PodRow, plan_id: str) -> str:
        """Why the plan must not evict its next victim: "" when it may."""
        async with self._uow_factory() as uow:
            if await _deleted_mid_plan(uow, row):
                return "beneficiary deleted"
            if await uow.plans.plan_state(row["cluster"], plan_id) is not PlanState.PLANNED:
                return SETTLED_ELSEWHERE
        return ""

    async def _pod_row(self, cluster: str, uid: str) -> PodRow:
        async with self._uow_factory() as uow:
            found = await uow.pods.get_pod(cluster, uid)
        assert found is not None, f"pod {uid} vanished from the state"
        return found


async def _reserve(uow_factory: UnitOfWorkFactory, decisions: DecisionLog, row: PodRow, plan: Plan,
                   running: dict[str, RunningPod]) -> tuple[str, list[PlannedMove]] | None:
    """Step 1, one transaction: victims' places promised at their targets, the beneficiary reserved.

    Returns the plan's id and its victims (one per move, in order, with their promises), or None when the
    plan no longer fits.
    """
    cluster, plan_id = row["cluster"], uuid.uuid4().hex[:12]
    promises = [f"promise-{plan_id}-{i}" for i in range(len(plan.moves))]
    victims: list[PlannedMove] = []
    async with uow_factory() as uow:
        current = await uow.pods.get_pod(cluster, row["uid"], for_update=True)
        if current is None or current["state"] not in WAITING:
            return None
        for i, move in enumerate(plan.moves):
            victim = running[move.uid]
            victim_row = await uow.pods.get_pod(cluster, move.uid, for_update=True)
            assert victim_row is not None, f"victim {move.uid} of the plan has no row"
            await uow.allocations.release(cluster, move.uid, cpu_milli=victim.pod.cpu_milli,
                                          memory_mib=victim.pod.memory_mib)
            promise = {**{k: victim_row[k] for k in ("namespace", "priority", "request", "cpu_milli", "memory_mib",
                                                     "deadline_ms", "frame_rate_hz", "workload", "service_ms",
                                                     "owner")},
                       "cluster": cluster, "uid": promises[i], "name": promises[i], "state": PodState.PROMISED}
            await uow.pods.upsert_pod(promise)
            victims.append(PlannedMove(
                uid=move.uid, namespace=victim_row["namespace"], name=victim_row["name"],
                from_node=victim.node_name, from_gpu_indices=victim.gpu_indices, share_milli=victim.share_milli,
                memory_mib=victim.memory_mib, cpu_milli=victim.pod.cpu_milli,
                pod_memory_mib=victim.pod.memory_mib, promise=promises[i]))
            refusal = await uow.allocations.reserve(
                cluster=cluster, pod_uid=promises[i], node=move.to_node,
                grants=[GpuGrant(g, move.memory_mib, move.share_milli) for g in move.to_gpu_indices],
                cpu_milli=victim.pod.cpu_milli, memory_mib=victim.pod.memory_mib, decision_id=plan_id)
            if refusal:
                log.info("defrag plan for %s no longer fits: %s", row["name"], refusal)
                return None
        refusal = await uow.allocations.reserve(
            cluster=cluster, pod_uid=row["uid"], node=plan.node,
            grants=[GpuGrant(g, plan.memory_mib, plan.share_milli) for g in plan.gpu_indices],
            cpu_milli=row["cpu_milli"], memory_mib=row["memory_mib"], decision_id=plan_id)
        if refusal:
            log.info("defrag plan for %s no longer fits: %s", row["name"], refusal)
            return None
        await uow.pods.set_pod_state(cluster, row["uid"], PodState.RESERVED, node=plan.node,
                                     reason=f"awaiting {len(plan.moves)} eviction(s)")
        await uow.plans.add_plan(DefragPlanRecord(cluster, plan_id, row["uid"], tuple(victims)))
        await decisions.record(uow, row, "defrag_planned", node=plan.node,
                                          reasons=_plan_reasons(plan, plan_id))
        await decisions.commit(uow)
    return plan_id, victims


async def _deleted_mid_plan(uow: UnitOfWork, row: PodRow) -> bool:
    """The one place that tells a plan its beneficiary was deleted while it ran (BoundNews.forget
    marked it `deleted` and left its hold to the plan): the plan then releases that hold as it settles,
    and neither binds nor requeues the pod. Locks the pod's row, as _forget does."""
    current = await uow.pods.get_pod(row["cluster"], row["uid"], for_update=True)
    return current is None or current["state"] == PodState.DELETED


async def _settle(uow: UnitOfWork, row: PodRow, plan_id: str, state: PlanState, reason: str | None = None) -> bool:
    """Settle the plan `plan_id` as `state`: False when it was settled already, and then left as it was.

    Settling is done once, whoever does it. Another placement worker that loads the cluster (a restart, a
    new worker) runs recover() and may settle a plan this process is still carrying out; the first to settle
    it wins, the other leaves it so: no second bind, no GPUs given back twice, no eviction after the abort.
    Call after _deleted_mid_plan, whose row lock orders the two.
    """
    if await uow.plans.settle_plan(row["cluster"], plan_id, state, reason):
        return True
    log.info("defrag plan of %s was settled by another placement worker", row["name"])
    return False


async def _release_beneficiary(uow: UnitOfWork, row: PodRow) -> None:
    await uow.allocations.release(row["cluster"], row["uid"], cpu_milli=row["cpu_milli"], memory_mib=row["memory_mib"])


def _plan_reasons(plan: Plan, plan_id: str) -> dict[str, str]:
    """For people: the plan's id (its rows in defrag_plans), the moves, the cost and the planner's reasons."""
    moves = "; ".join(f"{m.uid} {m.from_node}{list(m.from_gpu_indices)} -> {m.to_node}{list(m.to_gpu_indices)}"
                      for m in plan.moves)
    return {"plan": plan_id, "moves": moves, "cost": f"{plan.cost:.1f}",
            **{f"why{i}": r for i, r in enumerate(plan.reasons)}}


def _movable(row: PodRow) -> bool:
    """Only gpuplace's own pods are moved: another scheduler's pod is charged where it runs, never evicted."""
    return bool(row.get("managed", True))


def _is_gone(live: Mapping[str, Any] | None, uid: str) -> bool:
    """The API's answer for a pod's name says the pod `uid` has left (another pod may have taken the name)."""
    return live is None or live.get("metadata", {}).get("uid") not in (None, uid)


__all__ = ["Defragmenter", "DefragSettings"]
