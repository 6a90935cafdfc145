"""Place pending pods: decide with the core, reserve in one transaction, then bind with the GPUs.

The order of effects is what keeps the fleet safe when any process dies at any instant (DESIGN §5):
1. one transaction claims the event ids, records the pods, reserves their GPUs (the database re-checks
   capacity), writes the decisions and their `decided` events to the outbox, and commits: for a burst read
   together (on_pods), the whole run of pending pods at once, decided one after another against the view;
2. the in-memory view charges the same resources;
3. the pod is bound through pods/binding, the Binding carrying its GPUs as an annotation (one call);
4. a second transaction records the outcome (`bound`, or the release after `bind_failed`), for the outcomes
   that came meanwhile together.
Steps 3 and 4 are the binder's (usecases/binder.py); every decision and its event are written through the
DecisionLog (usecases/decision_log.py); what the worker holds of each cluster is a ClusterState
(usecases/cluster_state.py). This module is the entry points and the deciding.
A crash after 1 leaves a `reserved` pod that hydration finds and binds again; a 409 on bind means the pod
is bound already, so we reconcile with what the API says instead of retrying.

Pods that do not fit wait in a queue (priority, then deadline, then arrival) and are tried again when the
cluster changes: a node arrives or a pod leaves.

What happens is counted through the Metrics port where it happens (each scheduling attempt and its result, each
bind); what the clusters look like (pods not bound yet and why, GPU stranded by fragmentation) is read from the
in-memory clusters when metrics are scraped (cluster_gauges).

Destructive input is believed only when the apiserver agrees: a `deleted` pod that the apiserver still runs is
refused (contracts.Rejected, dead-lettered) rather than freeing GPUs another pod would take at once; and what
the event stream missed is found by comparing the database with the apiserver (usecases/reconcile) when a
cluster is taken and every `resync_s`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from gpuplace.contracts.events import NodeEvent, PlacementEvent, PodEvent, Provenance
from gpuplace.contracts.rejected import Rejected
from gpuplace.core.fragmentation import fragmentation, stranded_gpu_memory
from gpuplace.core.latency.model import Stream
from gpuplace.core.model import Pod
from gpuplace.core.queue import queue_key
from gpuplace.core.workload import typical_workload
from gpuplace.usecases import dra, feedback, latency_learning, provenance
from gpuplace.usecases.binder import BIND_CONCURRENCY, Binder
from gpuplace.usecases.cluster_state import ClusterState
from gpuplace.usecases.cluster_view import ClusterView, Placement, core_pod, pod_rules, pod_stream
from gpuplace.usecases.decision_log import DecisionLog
from gpuplace.usecases.defrag import Defragmenter
from gpuplace.usecases.gpu_gauges import node_gpus
from gpuplace.usecases.ingest import ingest_node
from gpuplace.usecases.pod_states import HOLDING, TRACKED, WAITING, PodState
from gpuplace.usecases.ports import (
    NO_METRICS,
    ClusterApi,
    ClusterGauges,
    GpuGrant,
    Metrics,
    NodeCapacity,
    PendingReason,
    PodRow,
    UnitOfWork,
    UnitOfWorkFactory,
)
from gpuplace.usecases.reconcile import Drift, confirmed_gone, find_drift
from gpuplace.usecases.report_queue import FAILED_SCHEDULING, Reporter
from gpuplace.usecases.scale_hints import ClusterWaiting, ScaleHinter

log = logging.getLogger(__name__)
CONSUMER = "placement"
AWAITING_NODE = "bound to a node not yet known: charged when it arrives"
REASON_MAX = 1024  # characters of a refusal's reason: an Event's note holds 1 kB (events.k8s.io/v1 validation)
NODE_BURST_S = 0.25  # node events within this long of each other share one re-read and retry
# A burst of node events is also what cluster-watcher's re-list after a restart sends (it publishes every node
# again): the cluster is reconciled then, at most this often, so a pod deleted while no watcher ran is freed
# within seconds of its restart rather than at the next periodic reconcile (issue 40: up to 5 minutes).
RELIST_RECONCILE_S = 15.0
BATCH_PODS = 32  # pending pods decided and reserved in one transaction (on_pods)
MODEL_REFRESH_S = 5.0  # the latency model latency-ingest refits reaches decisions of pods with a frame rate this soon
RECENT_PODS = 2_000  # the pods decided last in a cluster: the typical workload its stranded GPU is measured against
_T = TypeVar("_T")


ADOPTED = "place promised as "  # reasons["defrag"] of a replacement's `decided`, then the promise's uid


Decide = Callable[[ClusterView, Pod, "Stream | None"], "Placement | dict[str, str]"]
"""The core's decision for one pod (and its frames, if it declares a frame rate): its Placement, or the
reasons it fits nowhere (node class -> why)."""


@dataclass
class _Placed:
    """A transaction's placements, applied once it committed: the pods reserved (already charged on the view)
    are bound, the pods that fit nowhere wait."""

    placed: list[tuple[PodRow, Placement]] = field(default_factory=list)
    waiting: list[tuple[PodRow, dict[str, str]]] = field(default_factory=list)

    def apply(self, service: PlacementService, state: ClusterState) -> None:
        for row, hold in self.placed:
            service._placed(state, row, hold)
        for row, reasons in self.waiting:
            service._waits(state, row, reasons)


class PlacementService:
    def __init__(self, uow_factory: UnitOfWorkFactory, cluster_apis: Mapping[str, ClusterApi], decide: Decide, *,
                 policy: str, topic_suffix: str = "", bind_concurrency: int = BIND_CONCURRENCY,
                 outbox_written: Callable[[], None] = lambda: None,
                 defrag: Callable[[PlacementService], Defragmenter] | None = None,
                 resync_s: float | None = None, metrics: Metrics = NO_METRICS, hints: ScaleHinter | None = None
                 ) -> None:
        self._uow_factory = uow_factory
        self._apis = cluster_apis
        self._decide = decide
        self._policy = policy
        self._clusters: dict[str, ClusterState] = {}
        self._decisions = DecisionLog(policy, topic_suffix, outbox_written)
        self._feedback = Reporter()  # Events and PodScheduled, in the background (usecases/report_queue)
        self._binder = Binder(uow_factory, cluster_apis, self._decisions, metrics, self._feedback,
                              concurrency=bind_concurrency)
        self._defrag = defrag(self) if defrag else None
        self._background: set[asyncio.Task[Any]] = set()  # defragmentation plans, retries after node bursts
        self._resync_s = resync_s  # reconcile with the apiserver on taking a cluster and this often; None: never
        self._relisted: set[str] = set()  # clusters to reconcile after a burst of node events (resync)
        self._relist_wake = asyncio.Event()
        self._metrics = metrics
        self._digests: tuple[object, str, str | None, str] | None = None  # _provenance's, for the model first in it
        self._hints = hints  # scale hints for clusters whose pods wait (usecases/scale_hints)

    # -- entry points (one per topic) ---------------------------------------------------------------
    async def on_node(self, event: NodeEvent) -> None:
        self._served(event.cluster)
        state = await self._cluster(event.cluster)
        await self._check_node(state, event)
        if not await ingest_node(self._uow_factory, event, consumer=CONSUMER):
            return
        async with state.lock:
            if event.kind == "upsert" and event.name in state.awaiting_nodes:
                await self._charge_awaiting_node(state, event.name)
            state.stale = True
            state.changed_nodes.add(event.name)
            state.last_node_event = event.event_id
        if state.retry is None or state.retry.done():
            state.retry = self._spawn_background(self._retry_after_nodes(state))

    async def _retry_after_nodes(self, state: ClusterState) -> None:
        """Nodes arrived or changed: re-read the cluster and try the waiting pods, once for a whole burst of node
        events (a fleet coming up sends thousands), not once per event. Events that come while it runs are
        seen by its next round.

        Only pods whose own rules allow one of the changed nodes are tried (kube-scheduler's queueing hints, in
        their simplest form): a node a pod may never use cannot make room for it. Then the cluster is
        reconciled with its apiserver by resync(), at once or RELIST_RECONCILE_S after the last such reconcile."""
        while state.changed_nodes:
            await asyncio.sleep(NODE_BURST_S)
            async with state.lock:
                changed, state.changed_nodes = state.changed_nodes, set()
                if state.stale:
                    await self._rehydrate(state)
                await self._retry_for_nodes(state, changed)
        if self._resync_s:  # resync() reconciles it soon (a watcher that restarted re-lists every node)
            self._relisted.add(state.view.cluster)
            self._relist_wake.set()

    async def _retry_for_nodes(self, state: ClusterState, nodes: set[str]) -> None:
        """Try the waiting pods whose own rules allow one of `nodes` (where room may have appeared)."""
        view = state.view
        rows = [view.snapshot.index_of(n) for n in nodes if view.has_node(n)] if view.snapshot else []
        if rows:
            await self._retry_waiting(state, only={uid for uid, row in state.waiting.items()
                                                   if view.allows_any(pod_rules(row), rows)})

    async def on_pod(self, event: PodEvent) -> None:
        self._served(event.cluster)
        if event.kind == "deleted":
            await self._check_deleted(event)
        state = await self._cluster(event.cluster)
        async with state.lock:
            state.last_pod_event = event.event_id
            if event.kind == "deleted":
                freed = await self._forget(state, event)
                if freed:
                    await self._retry_for_nodes(state, {freed})
            else:
                if state.stale:  # a node that just arrived must be in the view to charge or place pods on it
                    await self._rehydrate(state)
                if event.kind == "bound" or not event.managed:
                    await self._confirm_bound(state, event)
                else:
                    await self._on_pending(state, [event])

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
        state = self._clusters.get(event.cluster)
        if event.kind == "bound" and state is not None and state.loaded and event.node_name and \
                state.recorded_bound.get(event.uid) == event.node_name:
            return "bound"
        return None

    async def _on_run(self, run: list[PodEvent]) -> None:
        if len(run) == 1:
            await self.on_pod(run[0])
            return
        self._served(run[0].cluster)
        state = await self._cluster(run[0].cluster)
        async with state.lock:
            if state.stale:
                await self._rehydrate(state)
            if run[0].kind == "pending":
                await self._on_pending(state, run)
            else:  # pods recorded bound: the watcher's news is no news; only its event ids are claimed
                async with self._uow_factory() as uow:
                    await uow.state.claim_events(CONSUMER, [(e.event_id, e.digest()) for e in run])
                    await uow.commit()
                state.last_pod_event = run[-1].event_id

    async def on_placement(self, event: PlacementEvent) -> None:
        """An SLO violation closed a GPU in the database: re-read the cluster so no new pod goes there."""
        if event.kind != "slo_violation" or event.cluster not in self._apis:
            return
        state = await self._cluster(event.cluster)
        async with state.lock:
            await self._rehydrate(state)

    def _served(self, cluster: str) -> None:
        """Refuse an event for a cluster this worker has no apiserver for: it could not bind there, nor check
        a deletion, and rows written for it would be nobody's."""
        if cluster not in self._apis:
            raise Rejected(f"cluster {cluster!r} is not one this placement worker serves "
                           f"(its kubeconfigs name {', '.join(sorted(self._apis)) or 'none'})")

    async def _check_deleted(self, event: PodEvent) -> None:
        """A deletion frees GPUs the next pod takes at once, so it is applied only when the apiserver agrees the
        pod holds nothing: a `deleted` event for a pod still running (forged on the broker, or a bug upstream)
        is refused, never trusted (issue 20: one forged event put 24,576 MiB on a 16,384 MiB GPU)."""
        if not await confirmed_gone(self._apis[event.cluster], event.namespace, event.name, event.uid):
            raise Rejected(f"pod {event.namespace}/{event.name} (uid {event.uid}) still runs on the apiserver: "
                           "its deletion is not applied")

    async def _check_node(self, state: ClusterState, event: NodeEvent) -> None:
        """A node event that would let more be placed than before is applied only when the apiserver agrees: a
        deletion (it frees nothing now, but an absent node takes no pods) only when the node is gone, a capacity
        above what placement holds for the node only when the node object says so (issue 40: a forged record
        raised a GPU's memory and three pods landed on a 16 GiB GPU). New nodes, and GPUs a DRA driver's slices
        describe rather than the node object, are not checked."""
        api = self._apis[event.cluster]
        if event.kind == "deleted":
            if await api.node_capacity(event.name) is not None:
                raise Rejected(f"node {event.name} is still on the apiserver: its deletion is not applied")
            return
        claimed = NodeCapacity(event.cpu_milli, event.memory_mib, event.gpu_count, event.gpu_memory_mib)
        held = state.capacities.get(event.name)
        if event.dra_driver is None and held is not None and not held.holds(claimed):
            live = await api.node_capacity(event.name)
            if live is None or not live.holds(claimed):
                raise Rejected(f"node {event.name}: the event says {claimed}, the apiserver {live}: not applied")
        state.capacities[event.name] = claimed

    async def _check_bound(self, event: PodEvent, where: str) -> None:
        """A `bound` event that contradicts what placement holds (a pod it has waiting, or bound elsewhere) moves
        a pod's charge, so it is applied only when the apiserver agrees: the pod of that uid runs on (or is
        nominated for) `where`. A forged one (issue 40: it kept a pending pod unplaced for good) is refused."""
        live = await self._apis[event.cluster].read_pod(event.namespace, event.name)
        meta, spec, status = (live or {}).get("metadata") or {}, (live or {}).get("spec") or {}, \
            (live or {}).get("status") or {}
        if meta.get("uid") != event.uid or where not in (spec.get("nodeName"), status.get("nominatedNodeName")):
            raise Rejected(f"pod {event.namespace}/{event.name} (uid {event.uid}) is not bound to {where} on the "
                           "apiserver: its bound event is not applied")

    async def reconcile(self, cluster: str) -> Drift:
        """Apply what the event stream missed in `cluster` (usecases/reconcile): pods gone are released as a
        deletion releases them, pods bound elsewhere are charged where they run."""
        async with self._uow_factory() as uow:
            rows = await uow.state.pods_in_state(cluster, TRACKED)
        drift = await find_drift(self._apis[cluster], rows)
        if not drift:
            return drift
        log.warning("reconciling %s with its apiserver: %s", cluster, drift.summary())
        state = await self._cluster(cluster)
        async with state.lock:
            if state.stale:
                await self._rehydrate(state)
            freed: set[str | None] = set()
            for row in drift.gone:
                freed.add(await self._forget(state, _event_of(row, "deleted")))
            for row, node in drift.bound_elsewhere:
                await self._confirm_bound(state, _event_of(row, "bound", node_name=node))
            await self._retry_for_nodes(state, {node for node in freed if node is not None})
        return drift

    async def resync(self, stop: asyncio.Event) -> None:
        """Reconcile every cluster this worker holds each `resync_s`, and a cluster whose burst of node events
        ended (_retry_after_nodes) at once, at most every RELIST_RECONCILE_S, until `stop`; a failure (the
        apiserver away) is logged and tried again next round."""
        if not self._resync_s:
            return
        loop = asyncio.get_running_loop()
        every_cluster_at, relist_at = loop.time() + self._resync_s, loop.time()
        while not stop.is_set():
            now = loop.time()
            if self._relisted and now < relist_at:  # a re-list is waiting out the last one's reconcile
                await _first_of(stop, timeout_s=min(every_cluster_at, relist_at) - now)
            else:
                await _first_of(stop, self._relist_wake, timeout_s=every_cluster_at - now)
            self._relist_wake.clear()
            now = loop.time()
            if now >= every_cluster_at:
                every_cluster_at, due = now + self._resync_s, set(self._clusters)
            elif self._relisted and now >= relist_at:
                relist_at, due = now + RELIST_RECONCILE_S, set(self._relisted)
            else:
                continue
            self._relisted -= due
            for cluster in [c for c in due if c in self._clusters and self._clusters[c].loaded]:
                if not stop.is_set():
                    await self._reconcile_logged(cluster)

    async def _reconcile_logged(self, cluster: str) -> None:
        try:
            await self.reconcile(cluster)
        except Exception:  # noqa: BLE001 - the next round tries again; placement goes on meanwhile
            log.warning("reconciling %s failed", cluster, exc_info=True)

    async def load(self, cluster: str) -> None:
        """Read and resume `cluster` now if it is not loaded, rather than on its next event."""
        await self._cluster(cluster)

    def reload_clusters(self) -> None:
        """The partitions this worker owns changed: what it knows of each cluster may be stale (another worker
        placed pods there meanwhile), so each is read and resumed again on its next event."""
        for state in self._clusters.values():
            state.loaded = False

    async def drain(self) -> None:
        """Wait for binds, defragmentation plans and reports to Kubernetes in flight (shutdown, tests)."""
        while self._binder.tasks or self._background or self._feedback.tasks:
            await asyncio.gather(*list(self._binder.tasks), *list(self._background), *list(self._feedback.tasks),
                                 return_exceptions=True)
        self._feedback.summarize()

    def cluster_gauges(self) -> list[ClusterGauges]:
        """The clusters this worker holds, as metrics read them at a scrape (Metrics.watching): its pods not
        bound yet, by why, and the GPU stranded by fragmentation. Clusters it no longer owns (not loaded since
        its partitions moved) are left to their new owner."""
        found = []
        for cluster, state in self._clusters.items():
            if not state.loaded:
                continue
            pending: Counter[PendingReason] = Counter({reason: 0 for reason in _PENDING_REASONS})
            pending["binding"] += len(state.binding)
            for uid, row in state.waiting.items():
                pending["defrag" if self._plan_holds(row) else
                        "unschedulable" if uid in state.last_reasons or row["state"] == PodState.UNSCHEDULABLE else
                        "queued"] += 1
            share, memory = _stranded(state)
            found.append(ClusterGauges(cluster, dict(pending), share, memory, node_gpus(state.view)))
        return found

    def waiting_in(self, cluster: str) -> ClusterWaiting | None:
        """A loaded cluster's view, waiting pods and lock, for the scale hinter; None if not held here."""
        state = self._clusters.get(cluster)
        return ClusterWaiting(state.view, state.waiting, state.lock) if state is not None and state.loaded else None

    # -- what the defragmenter uses (usecases/defrag.PlacementHost) ------------------------------------
    @property
    def decisions(self) -> DecisionLog:
        return self._decisions

    async def reread(self, cluster: str) -> ClusterView:
        """The cluster as the database has it now. Caller holds the lock: a cluster marked for reloading is
        loaded only by the next event (_cluster would wait on that lock)."""
        state = self._clusters[cluster]
        await self._rehydrate(state)
        return state.view

    async def retry_waiting(self, cluster: str) -> None:
        """A plan settled without binding (aborted, or its beneficiary deleted): the GPUs it held are free
        again, so the waiting pods are tried now rather than on the next cluster change. Caller holds the lock."""
        await self.reread(cluster)
        await self._retry_waiting(self._clusters[cluster])

    async def bind_reserved(self, cluster: str, uid: str) -> None:
        state = await self._cluster(cluster)
        async with state.lock:
            await self._rehydrate(state)
            async with self._uow_factory() as uow:
                row = await uow.state.get_pod(cluster, uid)
            # not twice: a redelivered pending event may have started its bind once the plan settled
            if row is not None and row["state"] == PodState.RESERVED and uid in state.view.holds and \
                    not self._binder.in_flight(cluster, uid):
                state.waiting.pop(uid, None)
                self._binder.spawn(state, row, state.view.holds[uid])

    # -- pending pods --------------------------------------------------------------------------------
    async def _on_pending(self, state: ClusterState, events: list[PodEvent], attempt: int = 0) -> None:
        """Claim pending pods' events, record the pods and place them, in one transaction: a burst read together
        (on_pods) at once, decided one after another against the view in queue order and reserved together
        (_place). Caller holds the lock.

        When the database refuses what the view allowed (another worker, or a change the view missed), the
        transaction is rolled back whole (the claims included), the cluster re-read, and each event handled
        again on its own; a pod's third attempt records it waiting instead, tried again on the next change.
        A pod that is not simply waiting (an invalid request, a replacement adopting a promised place, one
        reserved before a restart) is dealt with inside the same transaction."""
        fresh: dict[str, PodEvent] = {}
        resumed: list[PodRow] = []
        adopted: list[PodRow] = []
        invalid: list[tuple[PodRow, str]] = []
        try:
            async with self._uow_factory() as uow:
                claimed = await uow.state.claim_events(CONSUMER, [(e.event_id, e.digest()) for e in events])
                for event in events:
                    if event.event_id in claimed:
                        fresh[event.uid] = event
                if not fresh:
                    return
                rows = await uow.state.upsert_pods([_pod_row(e) for e in fresh.values()])
                promised = {(r["namespace"], r["owner"]) for r in await uow.state.pods_in_state(
                    state.view.cluster, (PodState.PROMISED,))} if any(r["owner"] for r in rows) else set()
                candidates = []
                for row in rows:
                    event = fresh[row["uid"]]
                    if row["state"] == PodState.PENDING and (problem := refusal(event)):
                        await self._record_invalid(uow, row, problem.reason)
                        invalid.append((row, problem.report))
                    elif row["state"] == PodState.PENDING and (row["namespace"], row["owner"]) in promised and \
                            await self._adopt_promise(uow, row):
                        adopted.append(row)
                    elif row["state"] in WAITING:
                        candidates.append(row)
                    elif row["state"] == PodState.RESERVED:
                        resumed.append(row)
                if any(row["frame_rate_hz"] for row in candidates) and \
                        time.monotonic() - state.model_read_at >= MODEL_REFRESH_S:
                    # latency windows refit the model in the database (usecases/latency_learning.py)
                    state.view.latency_model = await latency_learning.load_model(uow)
                    state.model_read_at = time.monotonic()
                placed = await self._place(uow, state, candidates, last_attempt=attempt >= 2,
                                           events={uid: e.event_id for uid, e in fresh.items()})
                if isinstance(placed, _Placed):
                    await self._decisions.commit(uow)
        except BaseException:
            state.stale = True  # the view may hold charges the database never committed
            raise
        if not isinstance(placed, _Placed):
            log.info("reserving %d pod(s) in %s lost a race: %s; re-read and tried again one by one",
                     len(candidates), state.view.cluster, placed)
            await self._rehydrate(state)
            for event in events:
                await self._on_pending(state, [event], attempt + 1)
            return
        for row, report in invalid:
            self._report_unschedulable(row, report)
        placed.apply(self, state)
        for row in resumed:
            if row["uid"] in state.view.holds and not self._binder.in_flight(state.view.cluster, row["uid"]) and \
                    not self._plan_holds(row):
                self._binder.spawn(state, row, state.view.holds[row["uid"]])  # reserved before a restart
        if adopted:  # outside the transaction: re-reading the cluster opens its own
            await self._rehydrate(state)
            for row in adopted:
                self._binder.spawn(state, row, state.view.holds[row["uid"]])

    async def _place(self, uow: UnitOfWork, state: ClusterState, rows: list[PodRow], *, last_attempt: bool = False,
                     events: Mapping[str, str] | None = None) -> _Placed | str:
        """Inside `uow`: decide `rows` one after another in queue order against the view (each charged on it, so
        the next sees it taken), reserve them all at once (reserve_many: four statements, the database
        re-checking capacity), and write their decisions. Returns what to do after the commit, or why the
        database refused: then the caller must roll back and re-read the view, which holds the batch's charges.
        On a `last_attempt` the pods are recorded waiting rather than decided. `events`: uid -> the event id
        that brought each pod (a decision's provenance)."""
        done = _Placed()
        records: list[PlacementEvent] = []
        reservations = []
        for row in sorted(rows, key=_queue_order):
            if events is not None:
                state.last_pod_event = events[row["uid"]]
            if last_attempt:
                done.waiting.append((row, await self._record_waiting(uow, state, row, {
                    "reserve": "capacity changed under three attempts; retried on the next cluster change"},
                    into=records)))
                continue
            outcome = await self._decide_one(uow, state, row, records)
            if isinstance(outcome, dict):
                done.waiting.append((row, outcome))
                continue
            placement, decision_id = outcome
            state.view.charge(row["uid"], placement)
            done.placed.append((row, placement))
            reservations.append(placement.reservation(row["uid"], decision_id))
        refused = await uow.state.reserve_many(state.view.cluster, reservations)
        if refused is not None:
            self._metrics.scheduling_attempt(state.view.cluster, "conflict", 0.0)
            return refused
        await self._decisions.write(uow, records)
        return done

    async def _decide_one(self, uow: UnitOfWork, state: ClusterState, row: PodRow, into: list[PlacementEvent]
                          ) -> tuple[Placement, str] | dict[str, str]:
        """Inside `uow`: decide where a pod of a batch goes (its Placement and the id of the `decided` event
        written), or record why it waits (its reasons); one scheduling attempt, counted. The reservation is the
        batch's."""
        started = time.perf_counter()
        pod, stream = core_pod(row), pod_stream(row)
        _remember(state, row["uid"], pod)
        seen = self._provenance(state)
        decided = self._decide(state.view, pod, stream) if state.view.snapshot is not None else \
            {"cluster": "no schedulable node"}
        if isinstance(decided, Placement):
            decision_id = uuid.uuid4().hex
            await self._decisions.record(uow, row, "decided", hold=decided, decision_id=decision_id,
                                         reasons=decided.reasons(), seen=seen, into=into)
            self._metrics.scheduling_attempt(row["cluster"], "reserved", time.perf_counter() - started)
            return decided, decision_id
        reasons = await self._record_waiting(uow, state, row, decided, seen, into=into)
        self._metrics.scheduling_attempt(row["cluster"], "unschedulable", time.perf_counter() - started)
        return reasons

    async def _try_place(self, state: ClusterState, row: PodRow) -> None:
        """Place a known pod in its own transaction; on a capacity conflict re-read and try again."""
        for _attempt in range(3):
            try:
                async with self._uow_factory() as uow:
                    current = await uow.state.get_pod(row["cluster"], row["uid"], for_update=True)
                    if current is None or current["state"] not in WAITING:
                        if current is None or not self._plan_holds(current):  # a plan may abort: it waits again
                            state.waiting.pop(row["uid"], None)
                        return  # placed by an earlier delivery, reserved by a plan in flight, or gone
                    placed = await self._place(uow, state, [current])
                    if isinstance(placed, _Placed):
                        await self._decisions.commit(uow)
            except BaseException:
                state.stale = True
                raise
            if isinstance(placed, _Placed):
                placed.apply(self, state)
                return
            log.info("reservation of %s/%s lost a race: %s", row["namespace"], row["name"], placed)
            await self._rehydrate(state)
        state.waiting[row["uid"]] = row  # three lost races in a row: the next cluster change retries it

    def _spawn_background(self, work: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            name = getattr(task.get_coro(), "__qualname__", task.get_name())  # a coroutine's: the function's
            log.error("%s failed", name, exc_info=task.exception())

    def _plan_holds(self, row: PodRow) -> bool:
        """The pod is a defragmentation plan's beneficiary: the plan binds it once the victims are gone
        (or, deleted meanwhile, releases its hold)."""
        return self._defrag is not None and row["uid"] in self._defrag.beneficiaries

    async def _record_invalid(self, uow: UnitOfWork, row: PodRow, error: str) -> None:
        """Inside `uow`: a pod whose GPU request cannot be read waits as `invalid`, told why (after the commit)."""
        started = time.perf_counter()
        await uow.state.set_pod_state(row["cluster"], row["uid"], PodState.INVALID, reason=error)
        await self._decisions.record(uow, row, "invalid_request", reasons={"request": error})
        self._metrics.scheduling_attempt(row["cluster"], "invalid", time.perf_counter() - started)

    async def _adopt_promise(self, uow: UnitOfWork, row: PodRow) -> bool:
        """A replacement pod of an owner the defragmenter moved takes the place promised to it. A pod of no
        owner replaces nobody: it adopts nothing (even where a moved pod of no owner left a promise)."""
        if row["owner"] is None:
            return False
        promise = await uow.state.find_promise(row["cluster"], row["namespace"], row["owner"])
        if promise is None:
            return False
        grants = await uow.state.transfer_allocations(row["cluster"], promise["uid"], row["uid"])
        await uow.state.delete_pod(row["cluster"], promise["uid"])
        node = grants[0]["node"] if grants else None
        await uow.state.set_pod_state(row["cluster"], row["uid"], PodState.RESERVED, node=node,
                                      reason=f"adopted {promise['uid']}")
        hold = Placement(node or "", tuple(sorted(g["gpu_index"] for g in grants)),
                         grants[0]["share_milli"] if grants else 0, grants[0]["memory_mib"] if grants else 0,
                         row["cpu_milli"], row["memory_mib"])
        await self._decisions.record(uow, row, "decided", hold=hold, reasons={"defrag": ADOPTED + promise["uid"]})
        return True

    def _provenance(self, state: ClusterState) -> Provenance:
        """What the next decision in `state`'s cluster is decided from (contracts.Provenance), counted as one.
        The policy's version, the configuration and the latency model change rarely: their digests are kept
        until they do (a view re-read brings a new model object), not computed per decision."""
        model = state.view.latency_model
        if self._digests is None or self._digests[0] is not model:
            margin = getattr(self._decide, "latency_margin", None)
            self._digests = (model, provenance.policy_version(self._policy),
                             provenance.config_digest(self._policy, margin,
                                                      getattr(self._decide, "options", None))
                             if margin is not None else None,
                             provenance.latency_model_digest(model))
        _, version, config, model_digest = self._digests
        seen = Provenance(
            policy_version=version, config_digest=config, latency_model=model_digest,
            view_digest=provenance.view_digest(state.view.snapshot), attempt=state.attempts,
            last_pod_event=state.last_pod_event, last_node_event=state.last_node_event)
        state.attempts += 1
        return seen

    async def _record_waiting(self, uow: UnitOfWork, state: ClusterState, row: PodRow, reasons: dict[str, str],
                              seen: Provenance | None = None, into: list[PlacementEvent] | None = None
                              ) -> dict[str, str]:
        if state.last_reasons.get(row["uid"]) != reasons:  # report a new reason once, not on every retry
            await uow.state.set_pod_state(row["cluster"], row["uid"], PodState.UNSCHEDULABLE,
                                          reason="; ".join(f"{k}: {v}" for k, v in reasons.items())[:2000])
            await self._decisions.record(uow, row, "unschedulable", reasons=reasons, seen=seen, into=into)
        return reasons

    def _placed(self, state: ClusterState, row: PodRow, hold: Placement) -> None:
        """A reservation committed (and charged on the view): the pod leaves the queue and is bound."""
        state.waiting.pop(row["uid"], None)
        state.last_reasons.pop(row["uid"], None)
        self._binder.spawn(state, row, hold)

    def _waits(self, state: ClusterState, row: PodRow, reasons: dict[str, str]) -> None:
        """A pod fits nowhere (committed): it waits in the queue, is told why once, and may have room made."""
        if state.last_reasons.get(row["uid"]) != reasons:  # what _record_waiting recorded: a new reason
            self._report_unschedulable(row, feedback.message(reasons))
        state.waiting[row["uid"]] = row
        state.last_reasons[row["uid"]] = reasons
        if self._defrag is not None and state.view.snapshot is not None and self._defrag.wants(row):
            self._spawn_background(self._defrag.relieve(row, state.lock))
        if self._hints is not None:
            self._hints.note(row["cluster"], row["uid"], lambda: self.waiting_in(row["cluster"]))

    async def _retry_waiting(self, state: ClusterState, only: set[str] | None = None) -> None:
        """Try the waiting pods again (those of `only`, when given), in queue order."""
        if state.stale and state.waiting:
            await self._rehydrate(state)
        for row in sorted(state.waiting.values(), key=_queue_order):
            if only is None or row["uid"] in only:
                await self._try_place(state, row)

    # -- feedback in Kubernetes: after the commit, in the background, never failing placement --------------------
    def _report_unschedulable(self, row: PodRow, message: str) -> None:
        api, pod = self._apis[row["cluster"]], (row["namespace"], row["name"], row["uid"])
        self._feedback.spawn(row["cluster"] + row["uid"], FAILED_SCHEDULING, f"{pod[0]}/{pod[1]}",
                             lambda: api.report_unschedulable(*pod, message))

    async def _confirm_bound(self, state: ClusterState, event: PodEvent) -> None:
        """The watcher saw the pod bound: a bind whose outcome we lost (crash) is recorded now; a pod gpuplace
        never placed (another scheduler's, or created with its node set) is charged where it runs, or where
        its scheduler nominated it to run, and moves its charge when it lands elsewhere."""
        where = event.node_name or event.nominated_node_name
        async with self._uow_factory() as uow:
            if not where or not await uow.state.claim_event(CONSUMER, event.event_id, event.digest()):
                return
            row = await uow.state.get_pod(event.cluster, event.uid, for_update=True)
            hold = None
            unplaced = row is None or row["state"] in ("pending", "unschedulable", "invalid")
            # bound where the database does not have it: another scheduler's pod nominated for one node and
            # bound to another, or a pod whose move reconciliation found (usecases/reconcile)
            moved = row is not None and row["state"] == PodState.BOUND and row["node"] != where
            # a pod of gpuplace's that placement has no row for yet is checked too: a forged `bound` event that
            # came before its pending event charged it where it does not run and left it unplaced for good (bench
            # chaos, issue 40). Other schedulers' pods are charged unchecked when first seen: charging more than
            # runs never over-commits, and reconciliation releases what the apiserver does not have.
            if (row is not None or event.managed) and (unplaced or moved):
                await self._check_bound(event, where)
            if moved and row is not None:  # moved implies a row; said again for the type checker
                await uow.state.release(event.cluster, event.uid, cpu_milli=row["cpu_milli"],
                                        memory_mib=row["memory_mib"])
            if unplaced or moved:
                hold = await self._charge_bound_elsewhere(uow, state, event, where)
            elif row is not None and row["state"] == PodState.RESERVED and row["node"] == event.node_name:
                if not self._binder.in_flight(event.cluster, event.uid):
                    await uow.state.set_pod_state(event.cluster, event.uid, PodState.BOUND, mark_bound=True)
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

    async def _forget(self, state: ClusterState, event: PodEvent) -> str | None:
        """A deleted pod gives its resources back, unless a plan in flight reserved it on GPUs victims may
        still run on: it is marked deleted and the plan releases its hold as it settles (usecases/defrag).
        Returns the node it freed room on, if any."""
        held, freed = False, None
        async with self._uow_factory() as uow:
            if not await uow.state.claim_event(CONSUMER, event.event_id, event.digest()):
                return None
            row = await uow.state.get_pod(event.cluster, event.uid, for_update=True)
            if row is not None and row["state"] != PodState.DELETED:
                held = row["state"] == PodState.RESERVED and self._plan_holds(row)
                if not held:
                    freed = await uow.state.release(event.cluster, event.uid, cpu_milli=row["cpu_milli"],
                                                    memory_mib=row["memory_mib"])
                mid_plan: dict[str, Any] = {"reason": "deleted mid-plan"} if held else {}
                await uow.state.set_pod_state(event.cluster, event.uid, PodState.DELETED, **mid_plan)
            await self._decisions.commit(uow)
        if not held:
            state.view.refund(event.uid)
        state.recorded_bound.pop(event.uid, None)
        state.waiting.pop(event.uid, None)
        state.last_reasons.pop(event.uid, None)
        return freed

    async def _charge_bound_elsewhere(self, uow: UnitOfWork, state: ClusterState, event: PodEvent,
                                      node: str) -> Placement | None:
        """Inside `uow`: a pod bound without gpuplace takes its CPU, memory, slot and GPUs on `node` (the
        whole node counts, DESIGN §3); returns what to charge the view after commit. A node gpuplace has not
        heard of yet is charged when it arrives (_charge_awaiting_node)."""
        row = await uow.state.upsert_pod({**_pod_row(event), "state": PodState.BOUND})
        if not state.view.has_node(node):
            await uow.state.set_pod_state(event.cluster, event.uid, PodState.BOUND, node=node, reason=AWAITING_NODE,
                                          mark_bound=True)
            state.awaiting_nodes.add(node)
            return None
        return await self._charge_on_node(uow, state.view, row, node, mark_bound=True)

    def _charge_view(self, state: ClusterState, uid: str, hold: Placement) -> None:
        """What the database charged, charged on the view too; a view that disagrees is read again."""
        snapshot = state.view.snapshot
        assert snapshot is not None
        row = snapshot.index_of(hold.node)
        hold = replace(hold, cpu_milli=min(hold.cpu_milli, int(snapshot.cpu_free_milli[row])),
                       memory_mib=min(hold.memory_mib, int(snapshot.memory_free_mib[row])))
        try:
            state.view.charge(uid, hold)
        except ValueError:
            state.stale = True

    async def _charge_awaiting_node(self, state: ClusterState, node: str) -> None:
        """A node arrived: charge the pods bound to it that were seen before it (watch order across topics)."""
        cluster = state.view.cluster
        state.awaiting_nodes.discard(node)
        async with self._uow_factory() as uow:
            waiting = [r for r in await uow.state.pods_in_state(cluster, (PodState.BOUND,))
                       if r["reason"] == AWAITING_NODE and r["node"] == node]
        if not waiting:
            return
        await self._rehydrate(state)  # the view must know the node to choose GPUs on it
        async with self._uow_factory() as uow:
            for row in waiting:
                current = await uow.state.get_pod(cluster, row["uid"], for_update=True)
                if current is not None and current["state"] == PodState.BOUND and current["reason"] == AWAITING_NODE:
                    await self._charge_on_node(uow, state.view, current, node)
            await self._decisions.commit(uow)

    async def _charge_on_node(self, uow: UnitOfWork, view: ClusterView, row: PodRow, node: str, *,
                              mark_bound: bool = False) -> Placement:
        """Inside `uow`: charge a pod bound without gpuplace on `node`, where it runs (see gpus_for_bound_pod)."""
        pod = core_pod(row)
        claimed = view.gpus_for_claimed_pod(node, (row.get("rules") or {}).get("dra_claims") or ())
        gpu_indices, share, memory = claimed or view.gpus_for_bound_pod(node, pod)
        refused = await uow.state.charge_bound(
            cluster=row["cluster"], pod_uid=row["uid"], node=node,
            grants=[GpuGrant(i, memory, share) for i in gpu_indices], cpu_milli=row["cpu_milli"],
            memory_mib=row["memory_mib"], decision_id=uuid.uuid4().hex)
        reason = f"GPUs {refused} over-committed by another scheduler" if refused else None
        if refused:
            log.warning("pod %s/%s bound to %s by another scheduler: %s", row["namespace"], row["name"], node,
                        reason)
        await uow.state.set_pod_state(row["cluster"], row["uid"], PodState.BOUND, node=node, reason=reason,
                                      mark_bound=mark_bound)
        kept = tuple(i for i in gpu_indices if i not in refused)
        return Placement(node, kept, share if kept else 0, memory if kept else 0, row["cpu_milli"],
                         row["memory_mib"], pod_stream(row), pod.rules)

    # -- state ---------------------------------------------------------------------------------------
    async def _cluster(self, cluster: str) -> ClusterState:
        state = self._clusters.get(cluster)
        if state is None:
            state = self._clusters[cluster] = ClusterState(ClusterView(cluster, None))
        if not state.loaded:  # a first load that failed (the database away) is tried again by the next caller
            async with state.lock:
                if not state.loaded:
                    state.recorded_bound.clear()  # another worker may have held the cluster meanwhile
                    await self._rehydrate(state)
                    await self._resume(state)
                    state.loaded = True
                    if self._resync_s:  # what happened while no worker held the cluster (a restart)
                        self._spawn_background(self._reconcile_logged(cluster))
        return state

    async def _rehydrate(self, state: ClusterState) -> None:
        cluster = state.view.cluster
        state.stale = False  # what changes from here on marks it again
        async with self._uow_factory() as uow:
            nodes = await uow.state.load_nodes(cluster)
            gpus = await uow.state.load_gpus(cluster)
            allocations = await uow.state.load_allocations(cluster)
            holders = await uow.state.pods_in_state(cluster, HOLDING)
            model = await latency_learning.load_model(uow)
        state.model_read_at = time.monotonic()
        state.view = ClusterView.hydrate(cluster, nodes, gpus, allocations, holders, model)
        state.capacities = {n["name"]: NodeCapacity(n["cpu_milli"], n["memory_mib"], n["gpu_count"],
                                                    n["gpu_memory_mib"]) for n in nodes}
        if not state.recent:  # after a restart: the pods running are the workload seen so far
            for row in holders:
                _remember(state, row["uid"], core_pod(row))

    async def _resume(self, state: ClusterState) -> None:
        """After a restart: waiting pods go back in the queue; reserved-but-unbound pods are bound again.

        Defragmentation plans the last process left half done are settled first (Defragmenter.recover):
        their beneficiaries come out completed, bound below, or aborted, back in the queue; never bound
        while a victim may still run on their GPUs.
        """
        if self._defrag is not None and await self._defrag.recover(state.view.cluster):
            await self._rehydrate(state)
        async with self._uow_factory() as uow:
            rows = await uow.state.pods_in_state(state.view.cluster, TRACKED)
        for row in rows:
            if row["state"] == PodState.BOUND:
                if row["reason"] == AWAITING_NODE and row["node"]:
                    state.awaiting_nodes.add(row["node"])
            elif row["state"] == PodState.RESERVED and row["uid"] in state.view.holds and \
                    not self._plan_holds(row) and not self._binder.in_flight(row["cluster"], row["uid"]):
                self._binder.spawn(state, row, state.view.holds[row["uid"]])
            elif row["state"] != PodState.RESERVED:
                state.waiting[row["uid"]] = row



@dataclass(frozen=True)
class Refusal:
    """Why a pod is refused without a decision: stored as `reason`, told on the pod as `report`."""

    reason: str
    report: str


async def _first_of(*events: asyncio.Event, timeout_s: float) -> None:
    """Wait until one of `events` is set, or `timeout_s` passed."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=max(0.0, timeout_s), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


def refusal(event: PodEvent) -> Refusal | None:
    """A pod gpuplace cannot place as asked: its GPU request does not read (`request_error`), or its spec limits
    its node by fields gpuplace does not evaluate (`unevaluated`), which it never places as if absent. The reason
    is cut to REASON_MAX characters: it quotes the manifest, which may be megabytes (issue 40 stored 250,000)."""
    if event.request_error:
        error = _cut(event.request_error)
        return Refusal(error, _cut(f"invalid GPU request: {error}"))
    if event.unevaluated:
        fields = ", ".join(event.unevaluated)
        text = f"gpuplace does not evaluate {fields}; remove it or schedule the pod with kube-scheduler"
        return Refusal(text, text)
    return None


def _cut(text: str) -> str:
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 1] + "…"


def pod_row(event: PodEvent) -> dict[str, Any]:
    """The pods row a PodEvent writes (its state `pending` until placement moves it): also replay's pod."""
    return _pod_row(event)


def _pod_row(event: PodEvent) -> dict[str, Any]:
    request = event.gpu.model_dump(mode="json") if event.gpu else None
    rules = event.model_dump(mode="json", include=_RULE_FIELDS)
    if event.managed and event.dra_claims:  # only where the claim's driver publishes the GPUs (usecases/dra)
        rules = dra.require_driver(rules, event.dra_claims[0].driver)
    elif event.managed and event.gpu is not None:  # and GPUs of other vocabularies only where it does not
        rules = dra.avoid_dra_nodes(rules)
    return {
        "cluster": event.cluster, "uid": event.uid, "namespace": event.namespace, "name": event.name,
        "state": PodState.PENDING, "priority": event.priority, "request": request, "cpu_milli": event.cpu_milli,
        "memory_mib": event.memory_mib, "deadline_ms": event.deadline_ms, "frame_rate_hz": event.frame_rate_hz,
        "workload": event.workload, "service_ms": event.service_ms, "owner": event.owner, "managed": event.managed,
        "rules": rules,
    }


# PodEvent fields kept in the pods row's `rules` (JSON): the node rules (GPU sharing enforcement among them);
# `hami` and `dra_claims` ride along (not rules): HAMi's bind annotations and the DRA claim the binder allocates
# need them (ClusterApi.bind)
_RULE_FIELDS = {"node_selector", "required_terms", "preferred_terms", "tolerations", "host_ports", "extended",
                "resources", "hami", "dra_claims", "gpu_enforcement", "unenforced_sharing"}


def _event_of(row: PodRow, kind: str, **changes: Any) -> PodEvent:
    """The event the watcher would have sent for a tracked pod (what reconciliation found it missed)."""
    fields = ("cluster", "namespace", "name", "uid", "priority", "cpu_milli", "memory_mib", "deadline_ms",
              "frame_rate_hz", "workload", "service_ms", "owner", "managed")
    columns: Mapping[str, Any] = row
    return PodEvent.model_validate({**{k: columns[k] for k in fields}, **(row.get("rules") or {}), "kind": kind,
                                    "gpu": row["request"], **changes})


_PENDING_REASONS: tuple[PendingReason, ...] = ("unschedulable", "queued", "defrag", "binding")


def _remember(state: ClusterState, uid: str, pod: Pod) -> None:
    """Count a pod once in the cluster's recent workload, however often it is tried, dropping the oldest."""
    if uid not in state.recent:
        state.recent[uid] = pod
        if len(state.recent) > RECENT_PODS:
            state.recent.popitem(last=False)


def _stranded(state: ClusterState) -> tuple[float | None, float | None]:
    """GPU share and memory free but unusable by the cluster's typical workload (the FGD measure, DESIGN §6), M
    being the shapes of the pods decided last; as a fraction of the cluster's GPU share, and in MiB. None
    before the cluster has GPUs and pods to measure with."""
    snapshot = state.view.snapshot
    if snapshot is None or not state.recent or snapshot.total_gpu_milli == 0:
        return None, None
    workload = typical_workload(list(state.recent.values()), snapshot.gpu_types)
    share = float(fragmentation(snapshot, workload).sum()) / snapshot.total_gpu_milli
    return share, float(stranded_gpu_memory(snapshot, workload).sum())


def _queue_order(row: PodRow) -> tuple[int, float, Any]:
    return queue_key(priority=row["priority"], deadline_ms=row["deadline_ms"], arrival=row["first_seen_at"])


