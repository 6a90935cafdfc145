"""Binding reserved pods: one API call each, outside the cluster's lock; outcomes recorded in batches.

A pod reaches the binder once its reservation committed (usecases/placement.py). Its bind is one call to
pods/binding, the Binding carrying the GPU assignment as an annotation (ClusterApi.bind), so nothing ever sees
the pod on its node without its GPUs. The calls run concurrently (at most `concurrency` at once) and without the
cluster's lock, so decisions go on while the apiserver answers. Each outcome is then queued on the cluster and
recorded with the others that came meanwhile, in one transaction holding the cluster (_flush): `bound` for pods still
reserved, or the reservation released and the pod queued again after a failed bind.

A bind counts as in flight until its outcome is recorded (in_flight): nothing binds that pod again meanwhile, not
a redelivered event nor a restart's resume in another task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import UTC, datetime

from gpuplace.contracts.events import PlacementEvent
from gpuplace.usecases import enforcement, feedback
from gpuplace.usecases.cluster_state import BindOutcomeToRecord, ClusterState
from gpuplace.usecases.cluster_view import Placement
from gpuplace.usecases.clusters import Clusters
from gpuplace.usecases.decision_log import DecisionLog
from gpuplace.usecases.pod_states import PodState
from gpuplace.usecases.ports import BindOutcome, BindResult, ClusterApi, Metrics, PodRow
from gpuplace.usecases.report_queue import SCHEDULED, Reporter
from gpuplace.usecases.repositories import UnitOfWorkFactory

log = logging.getLogger(__name__)

BIND_CONCURRENCY = 64
"""Binds in flight at once by default (GPUPLACE_BIND_CONCURRENCY). At 16, a burst of 2,000 reserved pods waited
~3 s (p50) for a slot (`gpuplace bench pipeline --nodes 200 --pods 2000`); at 64, 0.4 s."""


class Binder:
    def __init__(self, uow_factory: UnitOfWorkFactory, cluster_apis: Mapping[str, ClusterApi], clusters: Clusters,
                 decisions: DecisionLog, metrics: Metrics, reporter: Reporter, *,
                 concurrency: int = BIND_CONCURRENCY) -> None:
        self._uow_factory = uow_factory
        self._apis = cluster_apis
        self._clusters = clusters
        self._decisions = decisions
        self._metrics = metrics
        self._reporter = reporter  # the Scheduled Event of a pod bound, in the background
        self._slots = asyncio.Semaphore(concurrency)
        self.tasks: set[asyncio.Task[None]] = set()
        """The binds in flight (until their outcome is recorded)."""
        self._pods: set[tuple[str, str]] = set()  # (cluster, uid) of each

    def in_flight(self, cluster: str, uid: str) -> bool:
        return (cluster, uid) in self._pods

    def spawn(self, state: ClusterState, row: PodRow, hold: Placement) -> None:
        """Bind the reserved pod `row` at `hold`, in the background."""
        pod = (row["cluster"], row["uid"])
        task = asyncio.create_task(self._bind(state, row, hold), name=row["cluster"] + row["uid"])
        self.tasks.add(task)
        self._pods.add(pod)
        state.binding.add(row["uid"])
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(lambda _: self._pods.discard(pod))
        task.add_done_callback(lambda _: state.binding.discard(row["uid"]))

    async def _bind(self, state: ClusterState, row: PodRow, hold: Placement) -> None:
        api = self._apis[row["cluster"]]
        assignment = {"node": hold.node, "gpus": [
            {"index": i, "memory_mib": hold.gpu_memory_mib, "share_milli": hold.share_milli}
            for i in hold.gpu_indices]}
        rules = row.get("rules") or {}
        claim = (rules.get("dra_claims") or [None])[0]  # allocated on these GPUs before the Binding
        async with self._slots:
            try:
                outcome = await api.bind(row["namespace"], row["name"], row["uid"], hold.node, assignment,
                                         rules.get("hami"), claim)
                if outcome is BindOutcome.CONFLICT:  # bound already: by our earlier try, or by someone else?
                    live = await api.read_pod(row["namespace"], row["name"])
                    on_node = live and live.get("spec", {}).get("nodeName")
                    outcome = BindOutcome.BOUND if on_node == hold.node else (
                        BindOutcome.GONE if live is None else BindOutcome.CONFLICT)
                outcome_name = outcome.value
            except Exception as exc:  # noqa: BLE001 - an API failure must release, not leak, the reservation
                log.warning("bind of %s/%s failed: %s", row["namespace"], row["name"], exc)
                outcome_name = "error"
        result: BindResult = "bound" if outcome_name == "bound" else "conflict" if outcome_name == "conflict" else \
            "gone" if outcome_name == "gone" else "error"
        self._metrics.bind(row["cluster"], result)
        recorded = asyncio.get_running_loop().create_future()
        state.outcomes.append(BindOutcomeToRecord(row, hold, outcome_name, recorded))
        if state.flusher is None or state.flusher.done():
            state.flusher = asyncio.create_task(self._flush(state))
        await recorded  # in flight until recorded: nothing binds the pod again meanwhile (in_flight)

    async def _flush(self, state: ClusterState) -> None:
        """Record bind outcomes a batch at a time, holding the cluster (Clusters.held): those that came while the
        last batch was written (or while the cluster was held for a decision) are written together."""
        while state.outcomes:
            async with self._clusters.held(state.view.cluster, load=False):
                batch, state.outcomes = state.outcomes, []
                try:
                    await self._record(state, batch)
                except Exception as exc:  # noqa: BLE001 - each bind task logs it; the pods stay reserved (resume)
                    for item in batch:
                        item.recorded.set_exception(exc)
                    continue
            for item in batch:
                item.recorded.set_result(None)

    async def _record(self, state: ClusterState, batch: list[BindOutcomeToRecord]) -> None:
        """One transaction for a batch of bind outcomes: pods still reserved become `bound` (their `bound` events
        written); a failed bind releases its reservation and the pod waits again (or is gone)."""
        cluster = state.view.cluster
        failed: list[BindOutcomeToRecord] = []
        async with self._uow_factory() as uow:
            bound = {item.row["uid"]: item for item in batch if item.outcome == "bound"}
            moved = await uow.pods.mark_bound(cluster, list(bound))
            events: list[PlacementEvent] = []
            for uid in moved:
                await self._decisions.record(uow, bound[uid].row, "bound", hold=bound[uid].hold, into=events)
            for item in batch:
                if item.outcome == "bound":
                    continue
                row, hold = item.row, item.hold
                current = await uow.pods.get_pod(cluster, row["uid"], for_update=True)
                if current is None or current["state"] != PodState.RESERVED:
                    continue
                await uow.allocations.release(cluster, row["uid"], cpu_milli=hold.cpu_milli, memory_mib=hold.memory_mib)
                next_state = PodState.DELETED if item.outcome == "gone" else PodState.PENDING
                await uow.pods.set_pod_state(cluster, row["uid"], next_state, node=None, reason=item.outcome)
                await self._decisions.record(uow, row, "bind_failed", hold=hold, reasons={"bind": item.outcome},
                                             into=events)
                failed.append(item)
            await self._decisions.write(uow, events)
            await self._decisions.commit(uow)
        now = datetime.now(UTC)
        for uid in moved:
            state.recorded_bound[uid] = bound[uid].hold.node
            self._report_scheduled(state, bound[uid].row, bound[uid].hold)
            # first_seen_at is the database's clock, `now` this process's: NTP keeps them well under a bucket apart
            waited_s = (now - bound[uid].row["first_seen_at"]).total_seconds()
            self._metrics.pod_scheduled(cluster, max(0.0, waited_s))
        for item in failed:
            state.view.refund(item.row["uid"])
            if item.outcome not in ("gone", "conflict"):
                state.waiting[item.row["uid"]] = {**item.row, "state": PodState.PENDING}

    def _report_scheduled(self, state: ClusterState, row: PodRow, hold: Placement) -> None:
        """A Scheduled Event naming the node and the GPUs, as kube-scheduler's, and a warning when nothing there
        enforces the pod's GPU share (usecases/enforcement); in the background, never failing."""
        api, pod = self._apis[row["cluster"]], (row["namespace"], row["name"], row["uid"])
        gpus = feedback.gpus_text(hold.gpu_indices, hold.gpu_memory_mib)
        self._reporter.spawn(row["cluster"] + row["uid"], SCHEDULED, f"{pod[0]}/{pod[1]}",
                             lambda: api.report_scheduled(*pod, hold.node, gpus))
        note = enforcement.unenforced_note(row.get("rules"), hold.node, state.view.node_labels(hold.node),
                                           hold.gpu_memory_mib, hold.gpu_indices)
        if note is not None:
            self._reporter.spawn(row["cluster"] + row["uid"], enforcement.UNENFORCED_REASON, f"{pod[0]}/{pod[1]}",
                                 lambda: api.report_warning(*pod, enforcement.UNENFORCED_REASON, note))


__all__ = ["Binder"]
