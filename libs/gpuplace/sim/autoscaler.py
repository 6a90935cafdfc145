"""Two cluster autoscalers on the same waiting pods: one that counts whole GPUs, one driven by scale hints.

Both get a ClusterSnapshot and the pods that wait on it (queue order), run to completion -- add nodes, place the
waiting pods with the core policy, again until every pod is placed -- and report the nodes they added. Neither
touches the snapshot it is given, so the fleet simulator can call both at any moment of a run.

- `whole_gpu` is what cluster-autoscaler does with GPUs: a GPU is free only when nothing runs on it (the device
  plugin advertises whole `nvidia.com/gpu`), and each pod needs `gpu.count` of them whatever slice of memory it
  asks for. Pods it can seat on free whole GPUs (and CPU, memory) of existing nodes by that count are left to
  the scheduler; for the rest it adds ceil(GPUs short / GPUs per node) nodes of one node group, chosen as
  cluster-autoscaler's `most-pods` expander would (the shape on which an empty node could host the most of
  those pods), the most common such shape in the cluster first. If the count says the pods fit but the policy
  cannot place them (memory, CPU, a wrong model), it adds one node, as its scheduling simulation would.
- `hint_driven` acts on core/scale_hints: given the cluster's running pods and the defragmenter's limits
  (`Movable`), it first makes room for the pods blocked by FRAGMENTATION (blockers.diagnose, as the hints judge
  them), in queue order, with the
  defragmenter's own plans (core/defrag/planner, each applied before the next and counted against the limits
  and eviction history given, as the placement service's defragmenter would) -- the room is there, in pieces,
  and a new node is not what those pods need; then it adds what the hints recommend (`ScaleHint.additions`),
  shapes from the cluster's nodes plus any declared ones. The pods it moved are reported beside the nodes.
Each round places the waiting pods in queue order with the policy (the core's decide and bind); a pod placed
stays placed. `max_rounds` bounds a run that would not finish (a pod no shape hosts): it reports what is left.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuplace.core.defrag.apply import apply_plan
from gpuplace.core.defrag.blockers import could_ever_fit
from gpuplace.core.defrag.model import Limits, PastMove, Plan, RunningPod
from gpuplace.core.defrag.planner import plan as plan_moves
from gpuplace.core.demand import resolve
from gpuplace.core.framework.interface import Policy
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.model import MILLI_PER_GPU, Pod
from gpuplace.core.scale_hints import ADDED_PREFIX, NodeShape, ScaleHint, hints, shapes_of
from gpuplace.core.snapshot import ClusterSnapshot

MAX_ROUNDS = 50

PolicyFactory = Callable[[], Policy]
"""A fresh policy for one run (an online learner must not carry one run's hypothetical pods into another)."""


@dataclass(frozen=True)
class Movable:
    """What `hint_driven` may move to act on a FRAGMENTATION verdict: the cluster's running pods, the
    defragmenter's limits and the evictions already made (they count against the limits), at `now_s`."""

    running: tuple[RunningPod, ...]
    limits: Limits
    history: tuple[PastMove, ...] = ()
    now_s: float = 0.0


@dataclass(frozen=True)
class ScaleRun:
    """One autoscaler's run: nodes added (in all and by shape), rounds, the pods it moved to make room and the
    pods it could not place."""

    autoscaler: str
    nodes_added: int
    by_shape: dict[str, int]
    rounds: int
    placed: int
    unplaced: tuple[str, ...] = ()
    gpus_added: int = 0
    gpu_memory_added_mib: int = 0
    pods_moved: int = 0
    hints: tuple[ScaleHint, ...] = field(default=(), repr=False)

    def as_dict(self) -> dict[str, object]:
        return {"autoscaler": self.autoscaler, "nodes_added": self.nodes_added, "by_shape": dict(self.by_shape),
                "gpus_added": self.gpus_added, "gpu_memory_added_gib": round(self.gpu_memory_added_mib / 1024, 1),
                "rounds": self.rounds, "placed": self.placed, "unplaced": len(self.unplaced),
                "pods_moved": self.pods_moved}


def whole_gpu(snapshot: ClusterSnapshot, waiting: Sequence[Pod], policy: PolicyFactory, *,
              max_rounds: int = MAX_ROUNDS) -> ScaleRun:
    """cluster-autoscaler's view (module doc): whole GPUs requested against whole GPUs free."""
    shapes = shapes_of(snapshot)
    common = Counter(_shape_of_row(snapshot, r, shapes) for r in range(snapshot.n_nodes))
    return _run("whole-gpu", snapshot, waiting, policy(), max_rounds,
                lambda work, left, _: _whole_gpu_additions(work, left, shapes, common))


def hint_driven(snapshot: ClusterSnapshot, waiting: Sequence[Pod], policy: PolicyFactory, *,
                declared: Sequence[NodeShape] = (), only: Sequence[NodeShape] | None = None,
                movable: Movable | None = None, max_rounds: int = MAX_ROUNDS, name: str = "hint-driven") -> ScaleRun:
    """Makes room by moving pods for fragmentation-blocked ones (with `movable`; none without), then adds what
    scale_hints recommends; `only` restricts the shapes it may choose from (default: the cluster's shapes and
    `declared`)."""
    shapes = tuple(only) if only is not None else shapes_of(snapshot, declared)
    found: list[ScaleHint] = []

    def additions(work: ClusterSnapshot, left: Sequence[Pod], _: Policy) -> list[tuple[NodeShape, int]]:
        hint = hints(work, left, shapes, policy(), max_drains=0)  # its trials do not count as the run's arrivals
        found.append(hint)
        return [(a.shape, a.nodes) for a in hint.additions]

    run = _run(name, snapshot, waiting, policy(), max_rounds, additions, movable)
    return ScaleRun(**{**run.__dict__, "hints": tuple(found)})


def _run(name: str, snapshot: ClusterSnapshot, waiting: Sequence[Pod], placer: Policy, max_rounds: int,
         additions: Callable[[ClusterSnapshot, Sequence[Pod], Policy], list[tuple[NodeShape, int]]],
         movable: Movable | None = None) -> ScaleRun:
    work = snapshot.copy()
    left = _place(work, list(waiting), placer)
    moved = 0
    if movable is not None and left:
        left, moved = _make_room(work, left, placer, movable)
    added: Counter[str] = Counter()
    gpus = memory = rounds = 0
    while left and rounds < max_rounds:
        rounds += 1
        plan = [(shape, n) for shape, n in additions(work, left, placer) if n > 0]
        if not plan:
            break
        for shape, n in plan:
            names = [f"{ADDED_PREFIX}-{name}-{sum(added.values()) + k}" for k in range(n)]
            work = work.appended([shape.node(x) for x in names],
                                 [shape.facts(x) for x in names] if work.facts is not None else None)
            added[shape.name] += n
            gpus += n * shape.gpu_count
            memory += n * shape.gpu_memory_total_mib
        left = _place(work, left, placer)
    return ScaleRun(name, sum(added.values()), dict(added), rounds, len(waiting) - len(left),
                    tuple(p.name for p in left), gpus, memory, moved)


def _make_room(work: ClusterSnapshot, left: list[Pod], placer: Policy, movable: Movable) -> tuple[list[Pod], int]:
    """The defragmenter's plan for each pod of `left` in queue order, applied to `work` before the next is asked
    (the planner refuses all but FRAGMENTATION, and any plan over the limits with the moves already made): the
    pods still waiting and the pods moved."""
    running = {r.uid: r for r in movable.running}
    history = list(movable.history)
    still: list[Pod] = []
    moved = 0
    for pod in left:
        found = plan_moves(work, pod, tuple(running.values()), placer, movable.limits, history, movable.now_s)
        if not isinstance(found, Plan):
            still.append(pod)
            continue
        by_uid = {m.uid: running[m.uid] for m in found.moves}
        running.update(apply_plan(work, found, pod, by_uid))
        history += [PastMove(m.uid, by_uid[m.uid].owner, movable.now_s) for m in found.moves]
        moved += len(found.moves)
    return still, moved


def _place(work: ClusterSnapshot, pods: list[Pod], placer: Policy) -> list[Pod]:
    """Place what fits, in order, on `work`; the pods left."""
    left = []
    for pod in pods:
        demand = resolve(pod, work)
        decision = decide(work, demand, placer)
        if decision.scheduled:
            bind(work, demand, decision)
        else:
            left.append(pod)
    return left


def _whole_gpu_additions(work: ClusterSnapshot, left: Sequence[Pod], shapes: Sequence[NodeShape],
                         common: Counter[NodeShape]) -> list[tuple[NodeShape, int]]:
    """Nodes cluster-autoscaler would add for `left` (module doc)."""
    whole_free = (work.gpu_exists & (work.free_share_milli == MILLI_PER_GPU)
                  & (work.free_memory_mib == work.gpu_memory_mib[:, None])).sum(axis=1)  # (n_nodes,)
    cpu_free, memory_free = work.cpu_free_milli.copy(), work.memory_free_mib.copy()
    unseated = []
    for pod in left:  # first fit by whole-GPU count on existing nodes, as its scheduler simulation does
        need = pod.gpu.count if pod.gpu.needs_gpu else 0
        fits = np.flatnonzero((whole_free >= need) & (cpu_free >= pod.cpu_milli) & (memory_free >= pod.memory_mib))
        if len(fits):
            row = int(fits[0])
            whole_free[row] -= need
            cpu_free[row] -= pod.cpu_milli
            memory_free[row] -= pod.memory_mib
        else:
            unseated.append(pod)
    if not unseated:
        unseated = list(left)  # the count says they fit, the policy disagrees: one node, as its simulation would
        shape = _node_group(unseated, shapes, common)
        return [(shape, 1)] if shape is not None else []
    shape = _node_group(unseated, shapes, common)
    if shape is None:
        return []
    gpus = sum(p.gpu.count for p in unseated if p.gpu.needs_gpu)
    cpu = sum(p.cpu_milli for p in unseated)
    memory = sum(p.memory_mib for p in unseated)
    nodes = max(math.ceil(gpus / shape.gpu_count) if shape.gpu_count else 0,
                math.ceil(cpu / shape.cpu_milli), math.ceil(memory / shape.memory_mib), 1)
    return [(shape, nodes)]


def _node_group(pods: Sequence[Pod], shapes: Sequence[NodeShape], common: Counter[NodeShape]) -> NodeShape | None:
    """The shape an empty node of which hosts the most of `pods`; the most common in the cluster among equals."""
    if not shapes:
        return None
    names = [f"{ADDED_PREFIX}-group-{s}" for s in range(len(shapes))]
    template = ClusterSnapshot([s.node(n) for s, n in zip(shapes, names, strict=True)])
    hosted = np.zeros(len(shapes), dtype=np.int64)
    for pod in pods:
        hosted += could_ever_fit(template, resolve(pod, template))
    if hosted.max(initial=0) == 0:
        return None
    best = max(range(len(shapes)), key=lambda s: (hosted[s], common[shapes[s]], -s))
    return shapes[best]


def _shape_of_row(snapshot: ClusterSnapshot, row: int, shapes: Sequence[NodeShape]) -> NodeShape:
    gpu_type = snapshot.gpu_types[snapshot.gpu_type_id[row]]
    key = (gpu_type.model, int(snapshot.gpu_count[row]), gpu_type.memory_mib, int(snapshot.cpu_capacity_milli[row]),
           int(snapshot.memory_capacity_mib[row]))
    return next(s for s in shapes if (s.gpu_model, s.gpu_count, s.gpu_memory_mib, s.cpu_milli, s.memory_mib) == key)


__all__ = ["MAX_ROUNDS", "Movable", "PolicyFactory", "ScaleRun", "hint_driven", "whole_gpu"]
