"""Place pending pods: decide with the core, reserve in one transaction, then bind with the GPUs.

The order of effects is what keeps the fleet safe when any process dies at any instant (DESIGN §5):
1. one transaction claims the event ids, records the pods, reserves their GPUs (the database re-checks
   capacity), writes the decisions and their `decided` events to the outbox, and commits: for a burst read
   together (on_pods), the whole run of pending pods at once, decided one after another against the view;
2. the in-memory view charges the same resources;
3. the pod is bound through pods/binding, the Binding carrying its GPUs as an annotation (one call);
4. a second transaction records the outcome (`bound`, or the release after `bind_failed`), for the outcomes
   that came meanwhile together.
Step 1 is Deciding's (usecases/deciding.py), what follows a commit AfterCommit's (usecases/after_commit.py), steps 3
and 4 the binder's (usecases/binder.py); every decision and its event are written through the DecisionLog
(usecases/decision_log.py); what the worker holds of each cluster is a ClusterState (usecases/cluster_state.py),
owned, loaded and held by Clusters (usecases/clusters.py). This module is the entry points (one per topic, and
the handlers of the internal messages placement subscribes to, usecases/messages.py); the watcher's news of pods
bound and deleted is BoundNews' (usecases/bound_news.py), reconciliation Resync's (usecases/resync.py).
A crash after 1 leaves a `reserved` pod that hydration finds and binds again; a 409 on bind means the pod
is bound already, so we reconcile with what the API says instead of retrying.

Pods that do not fit wait in a queue (priority, then deadline, then arrival) and are tried again when the
cluster changes: a node arrives or a pod leaves.

What happens is counted through the Metrics port where it happens (each scheduling attempt and its result, each
bind); what the clusters look like (pods not bound yet and why, GPU stranded by fragmentation) is read from the
in-memory clusters when metrics are scraped (cluster_gauges).

Destructive input is believed only when the apiserver agrees (usecases/checks.py): a `deleted` pod that the
apiserver still runs is refused (contracts.Rejected, dead-lettered) rather than freeing GPUs another pod would take
at once; and what the event stream missed is found by comparing the database with the apiserver
(usecases/reconcile) when a cluster is taken and every `resync_s`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence

from gpuplace.contracts.events import NodeEvent, PlacementEvent, PodEvent
from gpuplace.usecases.after_commit import AfterCommit
from gpuplace.usecases.background import Background
from gpuplace.usecases.binder import BIND_CONCURRENCY, Binder
from gpuplace.usecases.bound_news import BoundNews
from gpuplace.usecases.checks import ApiserverChecks
from gpuplace.usecases.cluster_state import ClusterState
from gpuplace.usecases.clusters import Clusters
from gpuplace.usecases.deciding import MODEL_REFRESH_S, Decide, Deciding
from gpuplace.usecases.decision_log import DecisionLog
from gpuplace.usecases.gpu_gauges import cluster_gauges
from gpuplace.usecases.ingest import ingest_node
from gpuplace.usecases.messages import ClusterLoaded, MessageBus, PlanSettled, PlanStarted
from gpuplace.usecases.pod_rows import ADOPTED, AWAITING_NODE, CONSUMER, REASON_MAX, pod_row
from gpuplace.usecases.ports import NO_METRICS, ClusterApi, ClusterGauges, Metrics
from gpuplace.usecases.reconcile import Drift
from gpuplace.usecases.report_queue import Reporter
from gpuplace.usecases.repositories import UnitOfWorkFactory
from gpuplace.usecases.resync import Resync

log = logging.getLogger(__name__)
NODE_BURST_S = 0.25  # node events within this long of each other share one re-read and retry
BATCH_PODS = 32  # pending pods decided and reserved in one transaction (on_pods)
_pod_row = pod_row  # the very row placement writes for a PodEvent (bench/pg_capacity.py)


class PlacementService:
    """The placement worker's entry points. Built directly it has no defragmenter nor scale hinter; with them,
    gpuplace/bootstrap.placement_worker builds it, sharing its bus, clusters, decision log and background tasks."""

    def __init__(self, uow_factory: UnitOfWorkFactory, cluster_apis: Mapping[str, ClusterApi], decide: Decide, *,
                 policy: str, topic_suffix: str = "", bind_concurrency: int = BIND_CONCURRENCY,
                 outbox_written: Callable[[], None] = lambda: None,
                 resync_s: float | None = None, metrics: Metrics = NO_METRICS, bus: MessageBus | None = None,
                 clusters: Clusters | None = None, decisions: DecisionLog | None = None,
                 background: Background | None = None) -> None:
        self._uow_factory = uow_factory
        self._apis = cluster_apis
        self._decide = decide
        bus = bus if bus is not None else MessageBus()
        self._clusters = clusters if clusters is not None else Clusters(uow_factory, bus)
        decisions = decisions if decisions is not None else DecisionLog(policy, topic_suffix, outbox_written)
        self._feedback = Reporter()  # Events and PodScheduled, in the background (usecases/report_queue)
        self._binder = Binder(uow_factory, cluster_apis, self._clusters, decisions, metrics, self._feedback,
                              concurrency=bind_concurrency)
        # defragmentation plans, retries after node bursts
        self._background = background if background is not None else Background()
        self._checks = ApiserverChecks(cluster_apis)
        self._after = AfterCommit(uow_factory, cluster_apis, self._binder, self._feedback, bus)
        self._deciding = Deciding(uow_factory, self._clusters, decide, policy=policy, decisions=decisions,
                                  after=self._after, metrics=metrics)
        self._news = BoundNews(uow_factory, self._clusters, decisions, self._binder, self._checks)
        self._resync = Resync(uow_factory, cluster_apis, self._clusters, self._news, self._deciding, resync_s)
        bus.subscribe(ClusterLoaded, self._resume)
        bus.subscribe(PlanStarted, self._plan_started)
        bus.subscribe(PlanSettled, self._plan_settled)

    # -- entry points (one per topic) ---------------------------------------------------------------
    async def on_node(self, event: NodeEvent) -> None:
        self._checks.served(event.cluster)
        await self._clusters.load(event.cluster)
        await self._checks.node(self._clusters.state(event.cluster), event)
        if not await ingest_node(self._uow_factory, event, consumer=CONSUMER):
            return
        async with self._clusters.held(event.cluster) as state:
            if event.kind == "upsert" and event.name in state.awaiting_nodes:
                await self._news.charge_awaiting_node(state, event.name)
            state.stale = True
            state.changed_nodes.add(event.name)
            state.last_node_event = event.event_id
        if state.retry is None or state.retry.done():
            state.retry = self._background.spawn(self._retry_after_nodes(state))

    async def _retry_after_nodes(self, state: ClusterState) -> None:
        """Nodes arrived or changed: re-read the cluster and try the waiting pods, once for a whole burst of node
        events (a fleet coming up sends thousands), not once per event. Events that come while it runs are
        seen by its next round.

        Only pods whose own rules allow one of the changed nodes are tried (kube-scheduler's queueing hints, in
        their simplest form): a node a pod may never use cannot make room for it. Then the cluster is
        reconciled with its apiserver by resync(), at once or RELIST_RECONCILE_S after the last such reconcile."""
        while state.changed_nodes:
            await asyncio.sleep(NODE_BURST_S)
            async with self._clusters.held(state.view.cluster, load=False):
                changed, state.changed_nodes = state.changed_nodes, set()
                if state.stale:
                    await self._clusters.reread(state)
                await self._deciding.retry_for_nodes(state, changed)
        self._resync.relisted(state.view.cluster)  # a watcher that restarted re-lists every node

    async def on_pod(self, event: PodEvent) -> None:
        self._checks.served(event.cluster)
        if event.kind == "deleted":
            await self._checks.deleted(event)
        async with self._clusters.held(event.cluster) as state:
            state.last_pod_event = event.event_id
            if event.kind == "deleted":
                freed = await self._news.forget(state, event)
                if freed:
                    await self._deciding.retry_for_nodes(state, {freed})
            else:
                if state.stale:  # a node that just arrived must be in the view to charge or place pods on it
                    await self._clusters.reread(state)
                if event.kind == "bound" or not event.managed:
                    await self._news.confirm_bound(state, event)
                else:
                    await self._deciding.on_pending(state, [event])

    async def on_pods(self, events: Sequence[PodEvent]) -> None:
        """Pod events read together (a burst). Pending pods of one cluster are decided and reserved as one batch
        (_on_pending), and `bound` events of pods this worker recorded bound are acknowledged together; every
        other event is handled alone, as on_pod handles it, after everything before it.

        Between two events handled alone, the batches gather their kind's events of one cluster even where the
        other kind comes between them (a burst interleaves the watcher's pending and bound news): a recorded
        bound pod's event changes nothing a pending pod's decision reads, so only each kind's order is kept."""
        runs: dict[tuple[str, str], list[PodEvent]] = {}
        for event in events:
            kind = self._batch_kind(event)
            if kind is None:
                await self._on_runs(runs)
                await self.on_pod(event)
            else:
                runs.setdefault((kind, event.cluster), []).append(event)
        await self._on_runs(runs)

    async def _on_runs(self, runs: dict[tuple[str, str], list[PodEvent]]) -> None:
        """Each run in transactions of at most BATCH_PODS pods: a pod's bind starts when its transaction commits,
        so a long run decided whole would keep its first pods waiting for its last (and the event loop, which
        the binds need, busy deciding)."""
        for run in runs.values():
            for start in range(0, len(run), BATCH_PODS):
                await self._on_run(run[start:start + BATCH_PODS])
        runs.clear()

    def _batch_kind(self, event: PodEvent) -> str | None:
        if event.kind == "pending" and event.managed:
            return "pending"
        state = self._clusters.loaded(event.cluster)
        if event.kind == "bound" and state is not None and event.node_name and self._ours(state, event):
            return "bound"
        return None

    def _ours(self, state: ClusterState, event: PodEvent) -> bool:
        """Whether a `bound` event is the watcher's news of this worker's own bind to the same node: recorded bound,
        or bound there by a bind whose outcome is not recorded yet (the binder records it; BoundNews would only
        claim the event). Under load the watcher's news often outruns the outcome's transaction: handled alone,
        each such event cost a transaction of its own."""
        if state.recorded_bound.get(event.uid) == event.node_name:
            return True
        hold = state.view.holds.get(event.uid)
        return hold is not None and hold.node == event.node_name and self._binder.in_flight(event.cluster, event.uid)

    async def _on_run(self, run: list[PodEvent]) -> None:
        if len(run) == 1:
            await self.on_pod(run[0])
            return
        self._checks.served(run[0].cluster)
        async with self._clusters.held(run[0].cluster) as state:
            if state.stale:
                await self._clusters.reread(state)
            if run[0].kind == "pending":
                await self._deciding.on_pending(state, run)
            else:  # pods recorded bound: the watcher's news is no news; only its event ids are claimed
                async with self._uow_factory() as uow:
                    await uow.events.claim_events(CONSUMER, [(e.event_id, e.digest()) for e in run])
                    await uow.commit()
                state.last_pod_event = run[-1].event_id

    async def on_placement(self, event: PlacementEvent) -> None:
        """An SLO violation closed a GPU in the database: re-read the cluster so no new pod goes there."""
        if event.kind != "slo_violation" or event.cluster not in self._apis:
            return
        async with self._clusters.held(event.cluster) as state:
            await self._clusters.reread(state)

    async def reconcile(self, cluster: str) -> Drift:
        """Apply what the event stream missed in `cluster` (usecases/resync.py)."""
        return await self._resync.reconcile(cluster)

    async def resync(self, stop: asyncio.Event) -> None:
        """Reconcile the clusters this worker holds until `stop` (usecases/resync.py)."""
        await self._resync.run(stop)

    async def load(self, cluster: str) -> None:
        """Read and resume `cluster` now if it is not loaded, rather than on its next event."""
        await self._clusters.load(cluster)

    def reload_clusters(self) -> None:
        """The partitions this worker owns changed: what it knows of each cluster may be stale (another worker
        placed pods there meanwhile), so each is read and resumed again on its next event."""
        self._clusters.reload()

    async def drain(self) -> None:
        """Wait for binds, defragmentation plans and reports to Kubernetes in flight (shutdown, tests)."""
        while self._binder.tasks or self._background or self._feedback.tasks:
            await asyncio.gather(*list(self._binder.tasks), *self._background, *list(self._feedback.tasks),
                                 return_exceptions=True)
        self._feedback.summarize()

    def cluster_gauges(self) -> list[ClusterGauges]:
        """The clusters this worker holds, as metrics read them at a scrape (Metrics.watching): its pods not
        bound yet, by why, and the GPU stranded by fragmentation. Clusters it no longer owns (not loaded since
        its partitions moved) are left to their new owner."""
        return [cluster_gauges(state) for state in self._clusters.all_loaded()]

    async def retry_waiting(self, cluster: str) -> None:
        """Re-read the cluster and try its waiting pods now rather than on the next cluster change."""
        async with self._clusters.held(cluster) as state:
            await self._clusters.reread(state)
            await self._deciding.retry_waiting(state)

    # -- handlers of internal messages (usecases/messages.py) ---------------------------------------------
    async def _resume(self, message: ClusterLoaded) -> None:
        """A cluster was loaded (a restart, partitions regained): waiting pods go back in the queue;
        reserved-but-unbound pods are bound again (AfterCommit.requeue); with resync, the cluster is reconciled
        soon, in the background.

        Defragmentation plans the last process left half done were settled first (Defragmenter.recover, the
        handler before this one): their beneficiaries came out completed, bound here, or aborted, back in
        the queue; never bound while a victim may still run on their GPUs.
        """
        async with self._clusters.held(message.cluster) as state:  # the loader's hold, re-entered
            await self._after.requeue(state)
        if self._resync.every_s:  # what happened while no worker held the cluster (a restart)
            self._background.spawn(self._resync.reconcile_logged(message.cluster))

    async def _plan_started(self, message: PlanStarted) -> None:
        self._clusters.state(message.cluster).planned.add(message.uid)

    async def _plan_settled(self, message: PlanSettled) -> None:
        """A plan settled: its beneficiary is bound (completed), or the GPUs it held are free again (aborted,
        released) and the waiting pods are tried now, in the plan's own hold of the cluster."""
        self._clusters.state(message.cluster).planned.discard(message.uid)
        if message.outcome == "completed":
            async with self._clusters.held(message.cluster) as state:
                await self._clusters.reread(state)
                await self._after.bind_settled(state, message.uid)
        elif message.outcome in ("aborted", "released"):
            await self.retry_waiting(message.cluster)


__all__ = ["ADOPTED", "AWAITING_NODE", "BATCH_PODS", "CONSUMER", "MODEL_REFRESH_S", "NODE_BURST_S", "REASON_MAX",
           "Decide", "PlacementService", "pod_row"]
