"""One simulated cluster: its snapshot, its policy, its running pods and its pending queue.

The cluster is what one placement service instance holds: a ClusterSnapshot, the policy built for it (one
instance kept for the whole run, as usecases/decide.py keeps one per cluster for a policy that learns online,
and a second one for the defragmentation planner's hypothetical placements), a GpuLoad for the latency filter,
and the pending queue in core/queue.queue_key order.

Work per event is bounded:
- a request that found no place is remembered (`_failed`, by request and stream) until something is freed
  here -- a departure, an eviction, a node joining, a defragmentation plan; until then pods asking the same
  are skipped without a decision (nothing they could use has appeared);
- a pass over the queue makes at most `max_decisions` decisions; the caller comes back for the rest.
Nodes joining or leaving rebuild the snapshot from the running pods (charge by charge, so a rebuild also
checks that nothing is over-committed); rows keep the node order they had, new nodes go last.
"""

from __future__ import annotations

import bisect
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpuplace.core.defrag.blockers import diagnose
from gpuplace.core.defrag.model import Blocker, RunningPod
from gpuplace.core.defrag.occupancy import Occupancy
from gpuplace.core.demand import Demand, resolve
from gpuplace.core.framework.interface import Policy, PolicyContext
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import LatencyModel, Stream
from gpuplace.core.model import GpuRequest, Node, Pod
from gpuplace.core.policies import registry
from gpuplace.core.policies.latency_aware import latency_aware
from gpuplace.core.queue import queue_key
from gpuplace.core.snapshot import ClusterSnapshot, kind_of
from gpuplace.core.workload import TypicalWorkload

RESTART_S = 30.0
"""What moving a pod costs it (defrag/cost.py reads RunningPod.restart_s)."""


@dataclass
class Waiting:
    pod: Pod
    kind: str
    owner: str | None
    submitted_s: float
    seq: int


@dataclass
class Placed:
    pod: Pod
    kind: str
    owner: str | None
    node: str
    gpus: tuple[int, ...]
    share_milli: int
    memory_mib: int
    submitted_s: float
    started_s: float

    def running(self) -> RunningPod:
        return RunningPod(self.pod.name, self.pod, self.node, self.gpus, self.share_milli, self.memory_mib,
                          self.owner, RESTART_S)


class Cluster:
    """See the module docstring. `on_gpu` is told of every streamed pod charged (+1) or refunded (-1)."""

    def __init__(self, name: str, region: str, nodes: tuple[Node, ...], policy: str, workload: TypicalWorkload,
                 rng_seed: int, streams: dict[str, Stream], model: LatencyModel | None, *, defrag: bool,
                 on_gpu: Callable[[Cluster, int, Placed], None], max_decisions: int = 32,
                 expected_shapes: tuple[GpuRequest, ...] = ()) -> None:
        self.name, self.region = name, region
        self.nodes: list[Node] = list(nodes)
        self.workload = workload
        self.streams = streams
        self.model = model
        self.defrag = defrag
        self.on_gpu = on_gpu
        self.max_decisions = max_decisions
        context = PolicyContext(workload=workload, rng=np.random.default_rng([rng_seed, zlib.crc32(name.encode())]),
                                expected_shapes=expected_shapes)
        self.base: Policy = registry.create(policy, context)
        self.planner_base: Policy = (registry.create(policy, context) if getattr(self.base, "learns_online", False)
                                     else self.base)
        self.running: dict[str, Placed] = {}
        self.waiting: dict[str, Waiting] = {}
        self._order: list[tuple[tuple[Any, ...], str]] = []  # (queue key, uid), sorted; stale entries skipped
        self._failed: set[tuple[Any, ...]] = set()
        self._demands: dict[tuple[int, int, GpuRequest], Demand] = {}
        self.needs_pass = False
        self.decisions = 0
        self.freed_count = 0
        """How often something was freed or rearranged here (a key for answers that only that can change)."""
        self._snapshot = ClusterSnapshot(self.nodes)
        self._build()

    # -- reading ----------------------------------------------------------------------------------------------

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def waiting_pods(self) -> list[Pod]:
        """The pods waiting here, in queue order (the autoscaler hook reads these beside `snapshot`)."""
        return [self.waiting[uid].pod for _, uid in self._order if uid in self.waiting]

    def queue(self) -> Iterator[Waiting]:
        return (self.waiting[uid] for _, uid in self._order if uid in self.waiting)

    @property
    def gpu_load(self) -> GpuLoad:
        """The streams on every GPU (kept whether or not the latency filter decides here)."""
        return self._gpu_load

    def blockers(self) -> Counter[str]:
        """What keeps each waiting pod waiting (kpis.py's categories), counted; one diagnosis per distinct request.
        Judged with the planner's policy: for a policy that learns online it is the instance that hypothetical
        placements use, so a diagnosis never counts as an arrival (a learner's own rules, e.g. the whole-GPU
        reserve, may then not show: such pods read "none")."""
        counts: Counter[str] = Counter()
        seen: dict[tuple[Any, ...], str] = {}
        for waiting in self.queue():
            key = self._attempt_key(waiting.pod)
            if key not in seen:
                blocker, reason = diagnose(self._snapshot, self._demand(waiting.pod), self.planner_policy)
                seen[key] = _category(blocker, reason)
            counts[seen[key]] += 1
        return counts

    # -- the queue --------------------------------------------------------------------------------------------

    def submit(self, waiting: Waiting) -> None:
        uid = waiting.pod.name
        if uid in self.waiting or uid in self.running:
            raise ValueError(f"pod {uid} is already in cluster {self.name}")
        self.waiting[uid] = waiting
        key = queue_key(priority=waiting.pod.priority, deadline_ms=waiting.pod.deadline_ms, arrival=waiting.seq)
        bisect.insort(self._order, (key, uid))
        self.needs_pass = True

    def cancel(self, uid: str) -> Waiting:
        return self.waiting.pop(uid)

    def schedule(self, now_s: float) -> tuple[list[Placed], bool]:
        """One pass over the queue in order; the pods placed, and whether it stopped at `max_decisions`."""
        self.needs_pass = False
        placed: list[Placed] = []
        decisions = 0
        truncated = False
        for _, uid in self._order:
            waiting = self.waiting.get(uid)
            if waiting is None:
                continue
            if decisions >= self.max_decisions:
                truncated = True
                break
            attempt = self._attempt_key(waiting.pod)
            if attempt in self._failed:
                continue
            demand = self._demand(waiting.pod)
            decisions += 1
            decision = decide(self._snapshot, demand, self.policy)
            if not decision.scheduled:
                self._failed.add(attempt)
                continue
            assignment = bind(self._snapshot, demand, decision)
            share = assignment.share_milli[0] if assignment.share_milli else 0
            memory = assignment.memory_mib[0] if assignment.memory_mib else 0
            del self.waiting[uid]
            placed.append(self._record(waiting, assignment.node_name, decision.gpu_indices, share, memory, now_s))
        self.decisions += decisions
        self._order = [(k, u) for k, u in self._order if u in self.waiting]
        return placed, truncated

    def _record(self, waiting: Waiting, node: str, gpus: tuple[int, ...], share: int, memory: int,
                now_s: float) -> Placed:
        """A pod just charged to the snapshot: its record, its stream on the GPU load, its occupancy slot."""
        record = Placed(waiting.pod, waiting.kind, waiting.owner, node, tuple(gpus), share, memory,
                        waiting.submitted_s, now_s)
        self.running[waiting.pod.name] = record
        self._track(record, +1)
        return record

    def _track(self, record: Placed, sign: int) -> None:
        stream = self.streams.get(record.pod.name)
        if sign > 0:
            if stream is not None and record.gpus:
                self._gpu_load.charge(record.pod.name, self._snapshot.index_of(record.node), record.gpus, stream)
            if self._occupancy is not None:
                self._occupancy.add(record.running())
        else:
            self._gpu_load.refund(record.pod.name)
            if self._occupancy is not None:
                self._occupancy.remove(record.pod.name)
        if stream is not None and record.gpus:
            self.on_gpu(self, sign, record)

    # -- changes that free resources --------------------------------------------------------------------------

    def release(self, uid: str) -> Placed:
        """A running pod leaves (done, deleted or evicted): its resources come back."""
        record = self.running.pop(uid)
        row = self._snapshot.index_of(record.node)
        self._snapshot.refund(row, record.gpus, record.pod.cpu_milli, record.pod.memory_mib, record.share_milli,
                              record.memory_mib, kind_of(len(record.gpus), record.share_milli), record.pod.rules)
        self._track(record, -1)
        self.freed()
        return record

    def freed(self) -> None:
        """Something was freed or rearranged: every request may find a place again."""
        self._failed.clear()
        self.needs_pass = True
        self.freed_count += 1

    def add_node(self, node: Node) -> None:
        self.nodes.append(node)
        self._build()
        self.freed()

    def drain(self, node_name: str) -> list[Placed]:
        """Evict every pod of the node and remove it; the evicted pods' records (the caller queues them again)."""
        evicted = [self.release(uid) for uid, r in list(self.running.items()) if r.node == node_name]
        self.nodes = [n for n in self.nodes if n.name != node_name]
        self._build()
        return evicted

    def moved(self, records: dict[str, RunningPod]) -> None:
        """Pods a defragmentation plan moved (the snapshot is already charged): follow them."""
        for uid, moved in records.items():
            old = self.running[uid]
            self._track(old, -1)
            new = replace(old, node=moved.node_name, gpus=moved.gpu_indices, share_milli=moved.share_milli,
                          memory_mib=moved.memory_mib)
            self.running[uid] = new
            self._track(new, +1)
        self.freed()

    def placed_by_plan(self, waiting: Waiting, node: str, gpus: tuple[int, ...], share: int, memory: int,
                       now_s: float) -> Placed:
        """The beneficiary of an applied plan (the snapshot is already charged)."""
        del self.waiting[waiting.pod.name]
        self._order = [(k, u) for k, u in self._order if u in self.waiting]
        return self._record(waiting, node, gpus, share, memory, now_s)

    # -- policies and state -----------------------------------------------------------------------------------

    @property
    def occupancy(self) -> Occupancy:
        assert self._occupancy is not None, "defragmentation is off for this cluster"
        return self._occupancy

    def _build(self) -> None:
        """(Re)build the snapshot, GPU load, occupancy and policy views from the nodes and the running pods."""
        snapshot = ClusterSnapshot(self.nodes)
        if snapshot.gpu_types != self._snapshot.gpu_types:
            raise ValueError(f"cluster {self.name}: a node change changed the GPU types {snapshot.gpu_types}")
        for record in self.running.values():
            snapshot.charge(snapshot.index_of(record.node), record.gpus, record.pod.cpu_milli, record.pod.memory_mib,
                            record.share_milli, record.memory_mib, kind_of(len(record.gpus), record.share_milli),
                            record.pod.rules)
        self._snapshot = snapshot
        self._gpu_load = GpuLoad.for_snapshot(snapshot)
        self._occupancy = Occupancy(snapshot) if self.defrag else None
        for record in self.running.values():
            stream = self.streams.get(record.pod.name)
            if stream is not None and record.gpus:
                self._gpu_load.charge(record.pod.name, snapshot.index_of(record.node), record.gpus, stream)
            if self._occupancy is not None:
                self._occupancy.add(record.running())
        self._demands.clear()
        self.policy = self._wrap(self.base)
        self.planner_policy = self._wrap(self.planner_base)

    def _wrap(self, base: Policy) -> Policy:
        """As the placement service decides (usecases/decide.py): a pod with a frame rate goes through the
        latency filter too, whatever the policy."""
        if self.model is None:
            return base
        return latency_aware(base, self.model, self._gpu_load, self.streams)

    def speed(self, node: str) -> float:
        return float(self._gpu_load.speed[self._snapshot.index_of(node)])

    def _demand(self, pod: Pod) -> Demand:
        key = (pod.cpu_milli, pod.memory_mib, pod.gpu)
        demand = self._demands.get(key)
        if demand is None:
            demand = self._demands[key] = resolve(pod, self._snapshot)
        return replace(demand, pod_name=pod.name, rules=pod.rules)

    def _attempt_key(self, pod: Pod) -> tuple[Any, ...]:
        """What a decision for `pod` depends on besides the cluster: its request, rules and (behind the latency
        filter) its stream."""
        stream = self.streams.get(pod.name) if self.model is not None else None
        return (pod.cpu_milli, pod.memory_mib, pod.gpu, pod.rules, stream)


def _category(blocker: Blocker, reason: str) -> str:
    """kpis.py's blocker categories: CAPACITY splits into cpu and memory by what is short in total."""
    if blocker is Blocker.CAPACITY:
        return "cpu" if "free CPU" in reason else "memory"
    return blocker.value


__all__ = ["Cluster", "Placed", "RESTART_S", "Waiting"]
