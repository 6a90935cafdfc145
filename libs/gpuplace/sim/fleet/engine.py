"""The fleet simulator: a seeded, deterministic discrete-event run of plan.py's fleet under one policy.

Events, in time order (ties in the order they were scheduled): pod submissions (training, CPU-only), pod ends,
the deployments' autoscaler tick (every `scale_interval_s`: replicas follow the daily sine), rollouts, node
additions and drains, hourly samples, and with `defrag` the planner's tick. After each event the touched
clusters settle: deployments are reconciled (scale up and down; a rolling update with maxSurge 25% and
maxUnavailable 0: an old replica is deleted when a new one runs) and each cluster with something new or freed
makes one bounded pass over its queue (cluster.py); a pass cut short comes back one simulated second later.

Defragmentation (`defrag=True`): every DEFRAG_INTERVAL_S each cluster with GPU pods waiting asks the core's
planner (core/defrag/planner.py) for at most PLANS_PER_TICK of them, in queue order, under `limits` (per plan,
per pod -- cool-down and moves per hour --, per owner, per cluster and hour) with that cluster's own move
history, as the placement service does (usecases/defrag.py); a plan is applied in the executor's order
(core/defrag/apply.py) and its beneficiary placed. A request the planner refused is not asked again until
something is freed in the cluster (cluster.py's `freed_count`) or the set of pods allowed to move changes.
Then, with `consolidation` (the default with `defrag`), the planner runs with no pod blocked: up to
CONSOLIDATIONS_PER_TICK single-GPU moves per cluster, each lowering the cluster's stranded GPU memory by at least
CONSOLIDATION_MIN_GAIN_MIB (core/defrag/consolidate.py), under the same limits and move history, leaving
CONSOLIDATION_KEEP_EVICTIONS of the hourly cap to blocked pods. The result says what they gained against what
they moved (`consolidation_moves`, `consolidation_gain_gib`: the stranded memory each removed when it was made,
summed) and, from the moves made, the most moves of one pod in any hour and the shortest gap between two moves
of one pod, beside the limits.

Latency (`latency=True`, the default): every pod with a frame rate goes through the latency filter in front of the
policy, as the placement service decides (usecases/decide.py), with the scenario's truth model; `latency=False`
runs the policy as the registry builds it, for comparison (`gpuplace sim --scenario fleet --no-latency`).

Autoscaling (`autoscale=Autoscale()`, off by default): every `interval_s` the acting autoscaler (scaling.py) removes
the nodes it added that stayed empty and requests the nodes the hint-driven autoscaler computes for the pods waiting
past a grace period; each joins its cluster after the provisioning delay (a "join" event).

Hook for other evaluations (the autoscaler comparison): `FleetSim.clusters` holds each cluster's live
`snapshot` and `waiting_pods()`, and `observer(sim, now_s)` is called at every hourly sample.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuplace.core.defrag.apply import apply_moves, apply_plan
from gpuplace.core.defrag.consolidate import consolidate
from gpuplace.core.defrag.eligibility import HOUR_S, resting
from gpuplace.core.defrag.model import Limits, PastMove, Plan
from gpuplace.core.defrag.planner import plan as plan_moves
from gpuplace.core.filters.latency_room import MixTerms
from gpuplace.core.fragmentation import stranded_gpu_memory
from gpuplace.core.latency.model import DEFAULT_MODEL, LatencyModel, Stream
from gpuplace.core.model import MILLI_PER_GPU, Node
from gpuplace.core.snapshot import ClusterSnapshot, GpuType
from gpuplace.core.workload import TypicalWorkload, typical_workload
from gpuplace.sim.fleet.cluster import Cluster, Placed, Waiting
from gpuplace.sim.fleet.kpis import (
    FRAGMENTATION_STRANDED,
    GIB,
    TIME_STRANDED,
    Integrals,
    SloLedger,
    by_model,
    percentiles,
    stranded_split,
)
from gpuplace.sim.fleet.plan import (
    CLASSES,
    CPU_ONLY,
    PERCEPTION,
    TRAINING,
    Deployment,
    FleetPlan,
    Job,
    NodeEvent,
    perception_pod,
    replicas,
)
from gpuplace.sim.fleet.scaling import AddedNode, Autoscale, FleetAutoscaler
from gpuplace.sim.scenarios.robotics import truth_model

DEFRAG_INTERVAL_S = 300.0
"""Each plan costs tens of milliseconds (diagnosis, candidate clearings, scratch copies): every five minutes per
cluster keeps a week of a 1,000-GPU fleet within minutes."""
PLANS_PER_TICK = 2
CONSOLIDATIONS_PER_TICK = 2
"""Consolidation moves per cluster and tick at most (each one move, priced against the typical workload)."""
CONSOLIDATION_MIN_GAIN_MIB = 4096.0
"""A consolidation move must lower the cluster's stranded GPU memory by this much (a move is never free)."""
CONSOLIDATION_KEEP_EVICTIONS = 5
"""Of the hourly cap on a cluster's evictions, what consolidation leaves to plans for blocked pods."""
SAMPLE_INTERVAL_S = HOUR_S
MAX_SURGE = 0.25
FLEET_LIMITS = Limits(max_victims_per_plan=3, pod_cooldown_s=600.0, max_moves_per_pod_per_hour=2,
                      max_evictions_per_owner_per_hour=2, max_evictions_per_hour=20, max_chain_depth=1)
"""The production defaults per pod and plan; per cluster at most 20 evictions an hour."""
_SETTLE_ROUNDS = 64


@dataclass
class _Deployment:
    spec: Deployment
    version: int = 0
    serial: int = 0
    pods: dict[str, int] = field(default_factory=dict)  # uid -> template version, running or waiting


@dataclass(frozen=True)
class Move:
    at_s: float
    cluster: str
    uid: str
    consolidation: bool = False
    gain_mib: float = 0.0
    """For a consolidation move: the stranded GPU memory it removed when it was made."""


class FleetSim:
    """One run: `FleetSim(plan, "gpuplace").run()` -> the result dict (see `result`)."""

    def __init__(self, plan: FleetPlan, policy: str, *, defrag: bool = False, limits: Limits = FLEET_LIMITS,
                 consolidation: bool = True,
                 latency: bool = True, model: LatencyModel = DEFAULT_MODEL, autoscale: Autoscale | None = None,
                 progress: Callable[[float, float], None] | None = None,
                 observer: Callable[[FleetSim, float], None] | None = None) -> None:
        self.plan, self.policy_name, self.defrag, self.limits = plan, policy, defrag, limits
        self.latency = latency
        self.consolidation = defrag and consolidation
        self.progress, self.observer = progress, observer
        self.autoscaler = FleetAutoscaler(autoscale) if autoscale is not None else None
        self.truth = truth_model(model)
        self.streams: dict[str, Stream] = {}
        self.ledger = SloLedger(self.truth)
        self.clusters: dict[str, Cluster] = {}
        self.workloads: dict[str, TypicalWorkload] = {}
        self.mixes = {spec.name: MixTerms.of(self.truth, _streams(plan, spec.name)) for spec in plan.clusters}
        """Per cluster, every stream its deployments bring (each version): the mix time-stranded memory is judged
        against (kpis.stranded_split)."""
        for spec in plan.clusters:
            self.workloads[spec.name] = workload = typical_workload(
                plan.typical_pods[spec.name], _types(spec.nodes))
            self.clusters[spec.name] = Cluster(
                spec.name, spec.region, spec.nodes, policy, workload, plan.seed, self.streams,
                self.truth if latency else None, defrag=defrag, on_gpu=self._on_gpu,
                expected_shapes=plan.expected_shapes)
        self.regions = tuple(dict.fromkeys(c.region for c in self.clusters.values()))
        self._deployments = {d.name: _Deployment(d) for d in plan.deployments}
        self._events: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        self._now = 0.0
        self._durations: dict[str, float] = {}
        self._epoch: dict[str, int] = defaultdict(int)
        self._to_reconcile: set[str] = set()
        self._retry_at: dict[str, float] = {}
        self._integrals = {name: Integrals() for name in self.clusters}
        self._signature: dict[str, tuple[int, ...]] = {}
        self._waits: dict[tuple[str, str], list[float]] = defaultdict(list)  # (region, class) -> seconds
        self._blocked: dict[str, Counter[str]] = defaultdict(Counter)  # cluster -> pods by blocker, over samples
        self._samples = 0
        self._history: dict[str, list[PastMove]] = defaultdict(list)
        self._refused: set[tuple[Any, ...]] = set()
        self._consolidated: dict[str, tuple[Any, ...]] = {}
        self.moves: list[Move] = []
        self.plans = 0
        self.drain_evictions = 0
        self.series: list[dict[str, Any]] = []

    def evictions(self, cluster: str) -> tuple[PastMove, ...]:
        """The defragmenter's evictions in `cluster` that still count against its limits (cool-downs, hourly caps)."""
        return tuple(m for m in self._history[cluster] if self._now - m.at_s < max(HOUR_S, self.limits.pod_cooldown_s))

    # -- the run --------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        started, cpu = time.perf_counter(), time.process_time()
        sc = self.plan.scenario
        end = sc.duration_s
        for job in self.plan.jobs:
            self._push(job.at_s, "job", job)
        for d in self.plan.deployments:
            for v, at in enumerate(d.rollouts_s, start=1):
                self._push(at, "rollout", (d.name, v))
        for event in self.plan.node_events:
            self._push(event.at_s, "node", event)
        self._push(0.0, "scale", None)
        self._push(0.0, "sample", None)
        if self.defrag:
            self._push(DEFRAG_INTERVAL_S, "defrag", None)
        if self.autoscaler is not None:
            self._push(self.autoscaler.config.interval_s, "autoscale", None)
        while self._events and self._events[0][0] <= end:
            at, _, kind, payload = heapq.heappop(self._events)
            self._advance(at)
            getattr(self, f"_on_{kind}")(payload)
            self._settle()
        self._advance(end)
        self.seconds = time.perf_counter() - started
        self.cpu_seconds = time.process_time() - cpu
        return self.result()

    def _push(self, at_s: float, kind: str, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at_s, self._seq, kind, payload))

    def _advance(self, now_s: float) -> None:
        """Integrate every cluster's KPIs up to `now_s` (values recomputed where the cluster changed), from the end
        of the warm-up on."""
        warmup = self.plan.scenario.warmup_s
        dt = max(now_s, warmup) - max(self._now, warmup)
        for name, cluster in self.clusters.items():
            values = self._integrals[name]
            signature = (cluster.snapshot.uid, int(cluster.snapshot.version.sum()), len(cluster.waiting))
            if signature != self._signature.get(name):
                self._signature[name] = signature
                values.now = _state(cluster, self.workloads[name], self.truth, self.mixes[name])
            values.add(dt)
        self.ledger.advance(now_s)
        self._now = now_s

    # -- events ---------------------------------------------------------------------------------------------

    def _on_job(self, job: Job) -> None:
        self._durations[job.pod.name] = job.duration_s
        self._submit(job.cluster, job.pod, job.kind, None)

    def _on_end(self, payload: tuple[str, str, int]) -> None:
        cluster, uid, epoch = payload
        if uid in self.clusters[cluster].running and self._epoch[uid] == epoch:
            self.clusters[cluster].release(uid)

    def _on_scale(self, _: None) -> None:
        self._to_reconcile.update(self._deployments)
        self._push(self._now + self.plan.scenario.scale_interval_s, "scale", None)

    def _on_rollout(self, payload: tuple[str, int]) -> None:
        name, version = payload
        self._deployments[name].version = version
        self._to_reconcile.add(name)

    def _on_node(self, event: NodeEvent) -> None:
        cluster = self.clusters[event.cluster]
        if event.add:
            cluster.add_node(event.node)
            return
        for record in cluster.drain(event.node.name):
            self.drain_evictions += 1
            self._epoch[record.pod.name] += 1  # its end, if any, is rescheduled when it runs again
            self._submit(cluster.name, record.pod, record.kind, record.owner)

    def _on_retry(self, cluster: str) -> None:
        self._retry_at.pop(cluster, None)
        self.clusters[cluster].needs_pass = True

    def _on_sample(self, _: None) -> None:
        row: dict[str, Any] = {"t_h": round(self._now / HOUR_S, 3)}
        if self._now >= self.plan.scenario.warmup_s:
            self._samples += 1
            for name, cluster in self.clusters.items():
                self._blocked[name].update(cluster.blockers())
        for region in self.regions:
            values = [self._integrals[c].now for c in self.clusters if self.clusters[c].region == region]
            row[region] = {
                "stranded_gib": round(sum(v["stranded_mib"] for v in values) / GIB, 1),
                "allocation_pct": round(100.0 * sum(v["allocated_milli"] for v in values)
                                        / max(sum(v["capacity_milli"] for v in values), 1.0), 2),
                "waiting_gpu_pods": int(sum(v["waiting_gpu_pods"] for v in values)),
            }
        self.series.append(row)
        if self.observer is not None:
            self.observer(self, self._now)
        if self.progress is not None:
            self.progress(self._now, self.plan.scenario.duration_s)
        self._push(self._now + SAMPLE_INTERVAL_S, "sample", None)

    def _on_defrag(self, _: None) -> None:
        for cluster in self.clusters.values():
            self._defragment(cluster)
            if self.consolidation:
                self._consolidate(cluster)
        self._push(self._now + DEFRAG_INTERVAL_S, "defrag", None)

    def _on_autoscale(self, _: None) -> None:
        assert self.autoscaler is not None
        for added in self.autoscaler.tick(self, self._now):
            self._push(self._now + self.autoscaler.config.provision_s, "join", added)
        self._push(self._now + self.autoscaler.config.interval_s, "autoscale", None)

    def _on_join(self, added: AddedNode) -> None:
        assert self.autoscaler is not None
        self.autoscaler.join(self, added, self._now)

    # -- settling ---------------------------------------------------------------------------------------------

    def _settle(self) -> None:
        for _ in range(_SETTLE_ROUNDS):
            names, self._to_reconcile = sorted(self._to_reconcile), set()
            for name in names:
                self._reconcile(self._deployments[name])
            for cluster in self.clusters.values():
                if not cluster.needs_pass:
                    continue
                placed, truncated = cluster.schedule(self._now)
                for record in placed:
                    self._placed(cluster, record)
                if truncated:
                    self._retry(cluster.name)
            if not self._to_reconcile and not any(c.needs_pass for c in self.clusters.values()):
                return
        for cluster in self.clusters.values():  # still busy: come back in a second
            if cluster.needs_pass:
                self._retry(cluster.name)

    def _retry(self, cluster: str) -> None:
        if cluster not in self._retry_at:
            self._retry_at[cluster] = self._now + 1.0
            self._push(self._now + 1.0, "retry", cluster)

    def _submit(self, cluster: str, pod: Any, kind: str, owner: str | None) -> None:
        self._seq += 1
        self.clusters[cluster].submit(Waiting(pod, kind, owner, self._now, self._seq))

    def _wait(self, region: str, kind: str, submitted_s: float) -> None:
        if submitted_s >= self.plan.scenario.warmup_s:
            self._waits[(region, kind)].append(self._now - submitted_s)

    def _placed(self, cluster: Cluster, record: Placed) -> None:
        self._wait(cluster.region, record.kind, record.submitted_s)
        uid = record.pod.name
        if record.kind in (TRAINING, CPU_ONLY):
            self._push(self._now + self._durations[uid], "end", (cluster.name, uid, self._epoch[uid]))
        elif record.owner is not None:
            deployment = self._deployments[record.owner]
            if any(v != deployment.version for v in deployment.pods.values()):
                self._to_reconcile.add(record.owner)

    def _reconcile(self, d: _Deployment) -> None:
        """Scale to the desired replicas; during a rollout replace old replicas (see the module docstring)."""
        cluster = self.clusters[d.spec.cluster]
        want = replicas(d.spec, self._now, self.plan.scenario.daily_swing)
        new = sorted(u for u, v in d.pods.items() if v == d.version)
        old = sorted(u for u, v in d.pods.items() if v != d.version)
        for uid in [u for u in old if u not in cluster.running]:  # old replicas not yet running: never needed
            self._delete(d, cluster, uid)
        old = [u for u in old if u in cluster.running]
        if len(new) > want:  # waiting ones first, then running ones; the newest first in each
            surplus = (sorted((u for u in new if u not in cluster.running), reverse=True)
                       + sorted((u for u in new if u in cluster.running), reverse=True))
            for uid in surplus[: len(new) - want]:
                self._delete(d, cluster, uid)
            new = [u for u in new if u in d.pods]
        available = sum(1 for u in new if u in cluster.running)
        for uid in old[: max(0, available + len(old) - want)]:
            self._delete(d, cluster, uid)
        old = [u for u in old if u in d.pods]
        ceiling = want + (math.ceil(MAX_SURGE * want) if old else 0)
        for _ in range(max(0, min(want - len(new), ceiling - len(new) - len(old)))):
            template = d.spec.templates[d.version]
            pod = perception_pod(d.spec, template, d.serial)
            d.serial += 1
            d.pods[pod.name] = d.version
            self.streams[pod.name] = Stream(template.frame_rate_hz, template.workload_class, template.service_ms,
                                            pod.deadline_ms)
            self._submit(cluster.name, pod, PERCEPTION, d.spec.name)

    def _delete(self, d: _Deployment, cluster: Cluster, uid: str) -> None:
        del d.pods[uid]
        if uid in cluster.running:
            cluster.release(uid)
        else:
            waiting = cluster.cancel(uid)
            self._wait(cluster.region, PERCEPTION, waiting.submitted_s)
        self.streams.pop(uid, None)

    def _on_gpu(self, cluster: Cluster, sign: int, record: Placed) -> None:
        keys = [(cluster.name, record.node, g) for g in record.gpus]
        if sign > 0:
            self.ledger.add(cluster.region, keys, cluster.speed(record.node), record.pod.name,
                            self.streams[record.pod.name])
        else:
            self.ledger.remove(keys, record.pod.name)

    # -- defragmentation ------------------------------------------------------------------------------------

    def _defragment(self, cluster: Cluster) -> None:
        history = self._history[cluster.name]
        history[:] = [m for m in history if self._now - m.at_s < max(HOUR_S, self.limits.pod_cooldown_s)]
        tries = 0
        resting_now = frozenset(resting(self.limits, history, self._now))
        for waiting in list(cluster.queue()):
            if tries >= PLANS_PER_TICK:
                return
            if not waiting.pod.gpu.needs_gpu or waiting.pod.name not in cluster.waiting:
                continue
            stream = self.streams.get(waiting.pod.name)
            asked = (cluster.name, cluster.freed_count, waiting.pod.gpu,
                     waiting.pod.cpu_milli, waiting.pod.memory_mib, waiting.pod.priority, stream, resting_now,
                     len([m for m in history if self._now - m.at_s < HOUR_S]))
            if asked in self._refused:
                continue
            tries += 1
            found = plan_moves(cluster.snapshot, waiting.pod, cluster.occupancy, cluster.planner_policy, self.limits,
                               history, self._now)
            if not isinstance(found, Plan) or not found.moves:
                if not isinstance(found, Plan):
                    self._refused.add(asked)
                else:
                    cluster.needs_pass = True  # it fits without moves: the next pass places it
                continue
            by_uid = {m.uid: cluster.occupancy.pod(m.uid) for m in found.moves}
            moved = apply_plan(cluster.snapshot, found, waiting.pod, by_uid)
            cluster.moved(moved)
            for m in found.moves:
                history.append(PastMove(m.uid, by_uid[m.uid].owner, self._now))
                self.moves.append(Move(self._now, cluster.name, m.uid))
            self.plans += 1
            record = cluster.placed_by_plan(waiting, found.node, found.gpu_indices, found.share_milli,
                                            found.memory_mib, self._now)
            self._placed(cluster, record)
            resting_now = frozenset(resting(self.limits, history, self._now))

    def _consolidate(self, cluster: Cluster) -> None:
        """Between blocked pods' plans, up to CONSOLIDATIONS_PER_TICK moves that each lower the cluster's stranded
        GPU memory by CONSOLIDATION_MIN_GAIN_MIB or more, under the same limits and history (core/defrag/
        consolidate.py)."""
        history = self._history[cluster.name]
        for _ in range(CONSOLIDATIONS_PER_TICK):
            in_hour = [m for m in history if self._now - m.at_s < HOUR_S]
            asked = (cluster.snapshot.uid, int(cluster.snapshot.version.sum()),
                     frozenset(resting(self.limits, history, self._now)),
                     tuple(sorted(Counter(m.owner for m in in_hour if m.owner is not None).items())),
                     len(in_hour) >= self.limits.max_evictions_per_hour - CONSOLIDATION_KEEP_EVICTIONS)
            if self._consolidated.get(cluster.name) == asked:
                return  # nothing it depends on changed since it found no move
            found = consolidate(cluster.snapshot, cluster.occupancy, cluster.planner_policy,
                                self.workloads[cluster.name], self.limits, history, self._now,
                                min_gain_mib=CONSOLIDATION_MIN_GAIN_MIB, keep_evictions=CONSOLIDATION_KEEP_EVICTIONS)
            if found is None:
                self._consolidated[cluster.name] = asked
                return
            running = cluster.occupancy.pod(found.move.uid)
            cluster.moved(apply_moves(cluster.snapshot, (found.move,), {running.uid: running}))
            history.append(PastMove(running.uid, running.owner, self._now))
            self.moves.append(Move(self._now, cluster.name, running.uid, True, found.gain_mib))

    def max_moves_per_pod_per_hour(self) -> int:
        """The most defragmentation moves of one pod within any hour of the run (the limit is
        `limits.max_moves_per_pod_per_hour`), counted from the moves made, not from the planner's bookkeeping."""
        times: dict[str, list[float]] = defaultdict(list)
        for m in self.moves:
            times[m.uid].append(m.at_s)
        most = 0
        for at in times.values():
            at.sort()
            start = 0
            for end, t in enumerate(at):
                while t - at[start] >= HOUR_S:
                    start += 1
                most = max(most, end - start + 1)
        return most

    def min_gap_between_moves_s(self) -> float | None:
        """The shortest time between two moves of one pod (the cool-down is `limits.pod_cooldown_s`)."""
        last: dict[str, float] = {}
        gap: float | None = None
        for m in sorted(self.moves, key=lambda m: m.at_s):
            if m.uid in last:
                gap = m.at_s - last[m.uid] if gap is None else min(gap, m.at_s - last[m.uid])
            last[m.uid] = m.at_s
        return gap

    # -- results --------------------------------------------------------------------------------------------

    def result(self) -> dict[str, Any]:
        """KPIs (kpis.py) for the fleet and per region, the hourly series, and what the run cost."""
        end = self.plan.scenario.duration_s
        for cluster in self.clusters.values():  # still waiting at the end: a lower bound on their wait
            for waiting in cluster.queue():
                self._wait(cluster.region, waiting.kind, waiting.submitted_s)
        hours = end / HOUR_S
        out: dict[str, Any] = {
            "scenario": "fleet", "policy": self.policy_name, "seed": self.plan.seed, "defrag": self.defrag,
            "latency": self.latency,
            "days": self.plan.scenario.days, "regions": len(self.regions), "clusters": len(self.clusters),
            "gpus_at_start": sum(len(n.gpus) for c in self.plan.clusters for n in c.nodes),
            "fleet": self._scope(None, hours),
            "by_region": {r: self._scope(r, hours) for r in self.regions},
            "deadline_miss_frames_pct": self.ledger.missed_frames_pct(),
            "moved_pods": len(self.moves), "plans": self.plans, "drain_evictions": self.drain_evictions,
            "consolidation_moves": sum(1 for m in self.moves if m.consolidation),
            "consolidation_gain_gib": round(sum(m.gain_mib for m in self.moves) / GIB, 1),
            "max_moves_per_pod_per_hour": self.max_moves_per_pod_per_hour(),
            "limit_moves_per_pod_per_hour": self.limits.max_moves_per_pod_per_hour,
            "min_gap_between_moves_of_a_pod_s": self.min_gap_between_moves_s(),
            "limit_pod_cooldown_s": self.limits.pod_cooldown_s,
            "decisions": sum(c.decisions for c in self.clusters.values()),
            "seconds": round(getattr(self, "seconds", 0.0), 2),
            "cpu_seconds": round(getattr(self, "cpu_seconds", 0.0), 2), "series": self.series,
        }
        if self.autoscaler is not None:
            out["autoscale"] = self.autoscaler.totals(end)
        return out

    def _scope(self, region: str | None, hours: float) -> dict[str, Any]:
        names = [n for n, c in self.clusters.items() if region is None or c.region == region]
        total = self.plan.scenario.duration_s - self.plan.scenario.warmup_s
        integ = [self._integrals[n] for n in names]
        waits = {k: [w for (r, c), ws in self._waits.items() if c == k and (region is None or r == region)
                     for w in ws] for k in CLASSES}
        gpu_waits = waits[PERCEPTION] + waits[TRAINING]
        moves = sum(1 for m in self.moves if m.cluster in names)
        blocked: Counter[str] = Counter()
        for n in names:
            blocked.update(self._blocked[n])
        frag = by_model([i.other for i in integ], FRAGMENTATION_STRANDED, total)
        time_taken = by_model([i.other for i in integ], TIME_STRANDED, total)
        return {
            "fragmentation_stranded_gib": round(sum(frag.values()), 1),
            "time_stranded_gib": round(sum(time_taken.values()), 1),
            "stranded_by_model": {m: {"fragmentation_gib": frag[m], "time_gib": time_taken[m]} for m in frag},
            "pending_blocked_by": {k: round(v / max(self._samples, 1), 2) for k, v in sorted(blocked.items())},
            "stranded_gpu_memory_gib": round(sum(i.stranded_mib for i in integ) / total / GIB, 1),
            "stranded_gpu_memory_pct": round(100.0 * sum(i.stranded_mib for i in integ)
                                             / max(sum(i.memory_capacity_mib for i in integ), 1.0), 2),
            "gpu_hours": round(sum(i.capacity_milli for i in integ) / MILLI_PER_GPU / HOUR_S, 1),
            "allocation_pct": round(100.0 * sum(i.allocated_milli for i in integ)
                                    / max(sum(i.capacity_milli for i in integ), 1.0), 2),
            "gpu_memory_allocated_pct": round(100.0 * sum(i.allocated_memory_mib for i in integ)
                                              / max(sum(i.memory_capacity_mib for i in integ), 1.0), 2),
            "waiting_gpu_pods_mean": round(sum(i.waiting_gpu_pods for i in integ) / total, 2),
            "pending": {k: percentiles(v) for k, v in waits.items()},
            "pending_gpu": percentiles(gpu_waits),
            "slo_attainment": self.ledger.attainment(region),
            "moved_pods_per_hour": round(moves / hours, 3),
        }


def run_fleet(plan: FleetPlan, policy: str, **options: Any) -> dict[str, Any]:
    """Simulate `plan` under the named registry policy (FleetSim's options); the result dict."""
    return FleetSim(plan, policy, **options).run()


def _streams(plan: FleetPlan, cluster: str) -> list[Stream]:
    return list(dict.fromkeys(
        Stream(t.frame_rate_hz, t.workload_class, t.service_ms, perception_pod(d, t, 0).deadline_ms)
        for d in plan.deployments if d.cluster == cluster for t in d.templates))


def _state(cluster: Cluster, workload: TypicalWorkload, model: LatencyModel, mix: MixTerms) -> dict[str, float]:
    snapshot = cluster.snapshot
    memory_capacity = float((snapshot.gpu_memory_mib * snapshot.gpu_count).sum())
    return {
        **stranded_split(snapshot, workload, cluster.gpu_load, model, mix),
        "stranded_mib": float(stranded_gpu_memory(snapshot, workload).sum()),
        "allocated_milli": float(snapshot.allocated_gpu_milli),
        "capacity_milli": float(snapshot.total_gpu_milli),
        "memory_capacity_mib": memory_capacity,
        "allocated_memory_mib": memory_capacity - float(snapshot.free_memory_mib[snapshot.gpu_exists].sum()),
        "waiting_gpu_pods": float(sum(1 for w in cluster.waiting.values() if w.pod.gpu.needs_gpu)),
    }


def _types(nodes: tuple[Node, ...]) -> tuple[GpuType, ...]:
    return ClusterSnapshot(list(nodes)).gpu_types


__all__ = [
    "CONSOLIDATIONS_PER_TICK", "CONSOLIDATION_KEEP_EVICTIONS", "CONSOLIDATION_MIN_GAIN_MIB", "DEFRAG_INTERVAL_S",
    "FLEET_LIMITS", "FleetSim", "MAX_SURGE", "Move", "PLANS_PER_TICK", "SAMPLE_INTERVAL_S",
    "run_fleet",
]
