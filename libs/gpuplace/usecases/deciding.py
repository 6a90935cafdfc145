"""Deciding pending pods (step 1 of usecases/placement.py): claim their events, record the pods, decide each with
the core against the cluster's view in queue order, reserve them together (the database re-checking capacity) and
write their decisions, in one transaction; then hand what committed to AfterCommit (binds, the queue).

When the database refuses what the view allowed (another worker, or a change the view missed), the transaction
is rolled back whole, the cluster re-read and each pod tried again on its own; a pod's third attempt records it
waiting instead, tried again on the next cluster change (retry_waiting, retry_for_nodes). Callers hold the cluster
(Clusters.held).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpuplace.contracts.events import PlacementEvent, PodEvent, Provenance
from gpuplace.core.latency.model import Stream
from gpuplace.core.model import Pod
from gpuplace.usecases import latency_learning, provenance
from gpuplace.usecases.after_commit import AfterCommit, Placed
from gpuplace.usecases.cluster_state import ClusterState
from gpuplace.usecases.cluster_view import ClusterView, Placement, core_pod, pod_rules, pod_stream
from gpuplace.usecases.clusters import Clusters
from gpuplace.usecases.decision_log import DecisionLog
from gpuplace.usecases.pod_rows import ADOPTED, CONSUMER, pod_row, queue_order, refusal
from gpuplace.usecases.pod_states import WAITING, PodState
from gpuplace.usecases.ports import Metrics, PodRow
from gpuplace.usecases.repositories import UnitOfWork, UnitOfWorkFactory

log = logging.getLogger(__name__)
MODEL_REFRESH_S = 5.0  # the latency model latency-ingest refits reaches decisions of pods with a frame rate this soon

Decide = Callable[[ClusterView, Pod, "Stream | None"], "Placement | dict[str, str]"]
"""The core's decision for one pod (and its frames, if it declares a frame rate): its Placement, or the
reasons it fits nowhere (node class -> why)."""


@dataclass
class _Batch:
    """A burst of pending pods' events as one transaction sorted them: the pods to decide (`candidates`), and
    those dealt with otherwise, acted on after the commit."""

    fresh: dict[str, PodEvent]  # uid -> the event claimed for it
    candidates: list[PodRow] = field(default_factory=list)
    resumed: list[PodRow] = field(default_factory=list)  # reserved before a restart: bound again
    adopted: list[PodRow] = field(default_factory=list)  # replacements that took a promised place
    invalid: list[tuple[PodRow, str]] = field(default_factory=list)  # refused, with what the pod is told


class Sources:
    """What each decision is decided from (contracts.Provenance). The policy's version, the configuration and the
    latency model change rarely: their digests are kept until they do (a view re-read brings a new model
    object), not computed per decision."""

    def __init__(self, decide: Decide, policy: str) -> None:
        self._decide = decide
        self._policy = policy
        self._digests: tuple[object, str, str | None, str] | None = None  # for the model first in it

    def of(self, state: ClusterState) -> Provenance:
        """What the next decision in `state`'s cluster is decided from, counted as one."""
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


class Deciding:
    def __init__(self, uow_factory: UnitOfWorkFactory, clusters: Clusters, decide: Decide, *, policy: str,
                 decisions: DecisionLog, after: AfterCommit, metrics: Metrics) -> None:
        self._uow_factory = uow_factory
        self._clusters = clusters
        self._decide = decide
        self._sources = Sources(decide, policy)
        self._decisions = decisions
        self._after = after
        self._metrics = metrics

    async def on_pending(self, state: ClusterState, events: list[PodEvent], attempt: int = 0) -> None:
        """Claim pending pods' events, record the pods and place them, in one transaction: a burst read together
        (on_pods) at once, decided one after another against the view in queue order and reserved together
        (_place). A refusal by the database is retried one pod at a time (module doc). A pod that is not simply
        waiting (an invalid request, a replacement adopting a promised place, one reserved before a restart) is
        dealt with inside the same transaction."""
        try:
            async with self._uow_factory() as uow:
                claimed = await uow.events.claim_events(CONSUMER, [(e.event_id, e.digest()) for e in events])
                batch = _Batch({e.uid: e for e in events if e.event_id in claimed})
                if not batch.fresh:
                    return
                await self._sort(uow, state, batch)
                placed = await self._place(uow, state, batch.candidates, last_attempt=attempt >= 2,
                                           events={uid: e.event_id for uid, e in batch.fresh.items()})
                if isinstance(placed, Placed):
                    await self._decisions.commit(uow)
        except BaseException:
            state.stale = True  # the view may hold charges the database never committed
            raise
        if not isinstance(placed, Placed):
            log.info("reserving %d pod(s) in %s lost a race: %s; re-read and tried again one by one",
                     len(batch.candidates), state.view.cluster, placed)
            await self._clusters.reread(state)
            for event in events:
                await self.on_pending(state, [event], attempt + 1)
            return
        for row, report in batch.invalid:
            self._after.report_unschedulable(row, report)
        await self._after.apply(state, placed)
        for row in batch.resumed:
            self._after.bind_again(state, row)  # reserved before a restart
        if batch.adopted:  # outside the transaction: re-reading the cluster opens its own
            await self._clusters.reread(state)
            for row in batch.adopted:
                self._after.bind_adopted(state, row)

    async def _sort(self, uow: UnitOfWork, state: ClusterState, batch: _Batch) -> None:
        """Inside `uow`: record the batch's pods and sort them (_Batch); a refused pod is recorded `invalid`, a
        replacement adopts its owner's promised place. Reads the latency model again if a pod to decide has a
        frame rate and the model was read over MODEL_REFRESH_S ago."""
        rows = await uow.pods.upsert_pods([pod_row(e) for e in batch.fresh.values()])
        promised = {(r["namespace"], r["owner"]) for r in await uow.pods.pods_in_state(
            state.view.cluster, (PodState.PROMISED,))} if any(r["owner"] for r in rows) else set()
        for row in rows:
            event = batch.fresh[row["uid"]]
            if row["state"] == PodState.PENDING and (problem := refusal(event)):
                await self._record_invalid(uow, row, problem.reason)
                batch.invalid.append((row, problem.report))
            elif row["state"] == PodState.PENDING and (row["namespace"], row["owner"]) in promised and \
                    await self._adopt_promise(uow, row):
                batch.adopted.append(row)
            elif row["state"] in WAITING:
                batch.candidates.append(row)
            elif row["state"] == PodState.RESERVED:
                batch.resumed.append(row)
        if any(row["frame_rate_hz"] for row in batch.candidates) and \
                time.monotonic() - state.model_read_at >= MODEL_REFRESH_S:
            # latency windows refit the model in the database (usecases/latency_learning.py)
            state.view.latency_model = await latency_learning.load_model(uow)
            state.model_read_at = time.monotonic()

    async def _place(self, uow: UnitOfWork, state: ClusterState, rows: list[PodRow], *, last_attempt: bool = False,
                     events: Mapping[str, str] | None = None) -> Placed | str:
        """Inside `uow`: decide `rows` one after another in queue order against the view (each charged on it, so
        the next sees it taken), reserve them all at once (reserve_many: four statements, the database
        re-checking capacity), and write their decisions. Returns what to do after the commit, or why the
        database refused: then the caller must roll back and re-read the view, which holds the batch's charges.
        On a `last_attempt` the pods are recorded waiting rather than decided. `events`: uid -> the event id
        that brought each pod (a decision's provenance)."""
        done = Placed()
        records: list[PlacementEvent] = []
        reservations = []
        for row in sorted(rows, key=queue_order):
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
        refused = await uow.allocations.reserve_many(state.view.cluster, reservations)
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
        pod = core_pod(row)
        stream = pod_stream(row, pod)
        state.remember(row["uid"], pod)
        seen = self._sources.of(state)
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

    async def try_place(self, state: ClusterState, row: PodRow) -> None:
        """Place a known pod in its own transaction; on a capacity conflict re-read and try again."""
        for _attempt in range(3):
            try:
                async with self._uow_factory() as uow:
                    current = await uow.pods.get_pod(row["cluster"], row["uid"], for_update=True)
                    if current is None or current["state"] not in WAITING:
                        if current is None or current["uid"] not in state.planned:  # a plan may abort: it waits again
                            state.waiting.pop(row["uid"], None)
                        return  # placed by an earlier delivery, reserved by a plan in flight, or gone
                    placed = await self._place(uow, state, [current])
                    if isinstance(placed, Placed):
                        await self._decisions.commit(uow)
            except BaseException:
                state.stale = True
                raise
            if isinstance(placed, Placed):
                await self._after.apply(state, placed)
                return
            log.info("reservation of %s/%s lost a race: %s", row["namespace"], row["name"], placed)
            await self._clusters.reread(state)
        state.waiting[row["uid"]] = row  # three lost races in a row: the next cluster change retries it

    async def _record_invalid(self, uow: UnitOfWork, row: PodRow, error: str) -> None:
        """Inside `uow`: a pod whose GPU request cannot be read waits as `invalid`, told why (after the commit)."""
        started = time.perf_counter()
        await uow.pods.set_pod_state(row["cluster"], row["uid"], PodState.INVALID, reason=error)
        await self._decisions.record(uow, row, "invalid_request", reasons={"request": error})
        self._metrics.scheduling_attempt(row["cluster"], "invalid", time.perf_counter() - started)

    async def _adopt_promise(self, uow: UnitOfWork, row: PodRow) -> bool:
        """A replacement pod of an owner the defragmenter moved takes the place promised to it. A pod of no
        owner replaces nobody: it adopts nothing (even where a moved pod of no owner left a promise)."""
        if row["owner"] is None:
            return False
        promise = await uow.pods.find_promise(row["cluster"], row["namespace"], row["owner"])
        if promise is None:
            return False
        grants = await uow.allocations.transfer_allocations(row["cluster"], promise["uid"], row["uid"])
        await uow.pods.delete_pod(row["cluster"], promise["uid"])
        node = grants[0]["node"] if grants else None
        await uow.pods.set_pod_state(row["cluster"], row["uid"], PodState.RESERVED, node=node,
                                     reason=f"adopted {promise['uid']}")
        hold = Placement(node or "", tuple(sorted(g["gpu_index"] for g in grants)),
                         grants[0]["share_milli"] if grants else 0, grants[0]["memory_mib"] if grants else 0,
                         row["cpu_milli"], row["memory_mib"])
        await self._decisions.record(uow, row, "decided", hold=hold, reasons={"defrag": ADOPTED + promise["uid"]})
        return True

    async def _record_waiting(self, uow: UnitOfWork, state: ClusterState, row: PodRow, reasons: dict[str, str],
                              seen: Provenance | None = None, into: list[PlacementEvent] | None = None
                              ) -> dict[str, str]:
        if state.last_reasons.get(row["uid"]) != reasons:  # report a new reason once, not on every retry
            await uow.pods.set_pod_state(row["cluster"], row["uid"], PodState.UNSCHEDULABLE,
                                         reason="; ".join(f"{k}: {v}" for k, v in reasons.items())[:2000])
            await self._decisions.record(uow, row, "unschedulable", reasons=reasons, seen=seen, into=into)
        return reasons

    async def retry_waiting(self, state: ClusterState, only: set[str] | None = None) -> None:
        """Try the waiting pods again (those of `only`, when given), in queue order."""
        if state.stale and state.waiting:
            await self._clusters.reread(state)
        for row in sorted(state.waiting.values(), key=queue_order):
            if only is None or row["uid"] in only:
                await self.try_place(state, row)

    async def retry_for_nodes(self, state: ClusterState, nodes: set[str]) -> None:
        """Try the waiting pods whose own rules allow one of `nodes` (where room may have appeared)."""
        view = state.view
        rows = [view.snapshot.index_of(n) for n in nodes if view.has_node(n)] if view.snapshot else []
        if rows:
            await self.retry_waiting(state, only={uid for uid, row in state.waiting.items()
                                                   if view.allows_any(pod_rules(row), rows)})


__all__ = ["MODEL_REFRESH_S", "Decide", "Deciding", "Sources"]
