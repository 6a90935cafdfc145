"""Autoscaling hints that see GPU holes: why waiting pods wait, which nodes would place them, which could go.

A cluster autoscaler that counts whole GPUs sees a GPU with one 4 GiB slice on it as taken and a pod asking for
6 GiB as needing a whole GPU, so it adds nodes while memory sits stranded in holes, and it cannot tell a pod that
no node could host from one that only needs its room in one piece. Given the cluster (a ClusterSnapshot), the
waiting pods and the node shapes that could be added, `hints` says:

1. per waiting pod, what blocks it (defrag.model.Blocker), judged on the whole wave in queue order: a pod that
   fits now is placed (on a scratch copy) before the next is judged, and a blocked pod's need is taken from the
   free room wherever it lies, smallest holes first, as if the defragmenter could put it together, so that ten
   pods never each count the same free memory. What is left is blockers.diagnose's verdict: FRAGMENTATION
   (the room exists in total, in pieces no node or GPU offers), CAPACITY (it does not: the free room on the
   nodes it could use falls short, or no node of a suitable model or size exists but a node shape would host
   it), LATENCY, or CONSTRAINT (no node shape could ever host it);
2. which node shape, and how many nodes of it, would place the blocked pods: each candidate shape is tried by
   adding its nodes one at a time and placing the pods with the policy (the core's decide and bind, as the
   placement service would), and the shape that places the most of them with the fewest nodes is chosen --
   then again for pods it cannot host (another GPU model, say). Greedy over shapes, not an optimum over mixes:
   a wave needs one or two shapes in practice and each trial is a real placement, so the count is one the
   policy will reach. The reason says what the other shapes would have needed;
3. which nodes could be drained now by moving every pod on them into holes elsewhere (defrag.targets.place:
   the policy's own choice, each move charged before the next), one after another on one scratch copy so that
   two drains never count the same hole. A drained node is room for fragmentation-blocked pods instead of a
   new node, or a node to remove when nothing waits. Nodes carrying resources no known pod explains (another
   scheduler's pods, not given) are never offered.

Pure like the rest of the core: the caller passes the policy (one whose hypothetical placements do not count as
arrivals, for an online learner) and the shapes; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from gpuplace.core.arrays import BoolArray
from gpuplace.core.defrag import targets
from gpuplace.core.defrag.blockers import could_ever_fit, diagnose
from gpuplace.core.defrag.landing import room_for
from gpuplace.core.defrag.model import Blocker, Move, RunningPod
from gpuplace.core.demand import Demand, resolve
from gpuplace.core.framework.interface import Policy
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.model import MILLI_PER_GPU, Node, Pod
from gpuplace.core.node_rules import GPU_ENFORCEMENT_LABEL, NOT_READY_TAINT, UNSCHEDULABLE_TAINT, NodeFacts, Taint
from gpuplace.core.snapshot import ClusterSnapshot

HOSTNAME_LABEL = "kubernetes.io/hostname"
MAX_NODES_PER_SHAPE = 256
"""Nodes of one shape a trial may add before it gives up: a bound on the work, not a policy."""
ADDED_PREFIX = "scale-hint"
"""Names of the nodes trials add (never a real node's)."""


@dataclass(frozen=True)
class NodeShape:
    """A node that could be added: GPUs (model, count, memory each), CPU and host memory, and the labels, taints
    and countables a new node of its group carries (from the cluster's node of that shape, or as declared)."""

    gpu_model: str
    gpu_count: int
    gpu_memory_mib: int
    cpu_milli: int
    memory_mib: int
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    extended: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.gpu_count < 0 or self.cpu_milli <= 0 or self.memory_mib <= 0:
            raise ValueError(f"a node shape needs CPU, memory and a non-negative GPU count: {self}")
        if self.gpu_count and (not self.gpu_model or self.gpu_memory_mib <= 0):
            raise ValueError(f"a node shape with GPUs needs their model and memory: {self}")

    @property
    def name(self) -> str:
        """A short label, e.g. "8xNVIDIA-H100-80GB-HBM3:96c:768Gi" (CPU-only: "cpu:32c:128Gi")."""
        gpus = f"{self.gpu_count}x{self.gpu_model}" if self.gpu_count else "cpu"
        return f"{gpus}:{self.cpu_milli // 1000}c:{self.memory_mib // 1024}Gi"

    @property
    def gpu_memory_total_mib(self) -> int:
        return self.gpu_count * self.gpu_memory_mib

    def node(self, name: str) -> Node:
        return Node.with_gpus(name, self.cpu_milli, self.memory_mib, self.gpu_count, self.gpu_model,
                              self.gpu_memory_mib)

    def facts(self, name: str) -> NodeFacts:
        labels = dict(self.labels)
        if HOSTNAME_LABEL in labels:
            labels[HOSTNAME_LABEL] = name
        return NodeFacts(name, labels, self.taints, extended=dict(self.extended))


def shapes_of(snapshot: ClusterSnapshot, declared: Sequence[NodeShape] = ()) -> tuple[NodeShape, ...]:
    """The shapes of the cluster's nodes (one per distinct GPU model, count, GPU memory, CPU and memory; labels and
    taints from its first schedulable node, cordon and readiness taints dropped), then the `declared` ones not
    among them. In the cluster's node order, so the result does not depend on set ordering.

    A declared GPU shape says nothing of what would enforce GPU sharing on it: it gets the enforcement of the
    cluster's first GPU node that has one (the GPU software, a device plugin or HAMi, runs as a DaemonSet on every
    GPU node of a cluster), so a GPU share can be hinted a node of it."""
    found: dict[tuple[str, int, int, int, int], NodeShape] = {}
    open_rows = _open_rows(snapshot)
    for row in sorted(range(snapshot.n_nodes), key=lambda r: (not open_rows[r], r)):
        gpu_type = snapshot.gpu_types[snapshot.gpu_type_id[row]]
        key = (gpu_type.model, int(snapshot.gpu_count[row]), gpu_type.memory_mib,
               int(snapshot.cpu_capacity_milli[row]), int(snapshot.memory_capacity_mib[row]))
        if key in found:
            continue
        facts = snapshot.facts[row] if snapshot.facts is not None else None
        found[key] = NodeShape(
            *key,
            labels=tuple(sorted(facts.labels.items())) if facts else (),
            taints=tuple(t for t in facts.taints if t.key not in (UNSCHEDULABLE_TAINT, NOT_READY_TAINT))
            if facts else (),
            extended=tuple(sorted(facts.extended.items())) if facts else ())
    shapes = list(found.values())
    known = {_bare(s) for s in shapes}
    enforcement = next((dict(s.labels)[GPU_ENFORCEMENT_LABEL] for s in shapes
                        if s.gpu_count and GPU_ENFORCEMENT_LABEL in dict(s.labels)), None)
    shapes += [replace(s, labels=(*s.labels, (GPU_ENFORCEMENT_LABEL, enforcement)))
               if enforcement and s.gpu_count and GPU_ENFORCEMENT_LABEL not in dict(s.labels) else s
               for s in declared if _bare(s) not in known]
    return tuple(shapes)


@dataclass(frozen=True)
class PodVerdict:
    pod: str
    blocked_by: Blocker
    reason: str


@dataclass(frozen=True)
class NodeAddition:
    """`nodes` new nodes of `shape` would place `pods` (names, in queue order)."""

    shape: NodeShape
    nodes: int
    pods: tuple[str, ...]


@dataclass(frozen=True)
class Drain:
    """`node` could be emptied now by `moves` (each pod to a hole elsewhere; none for an empty node)."""

    node: str
    moves: tuple[Move, ...]


@dataclass(frozen=True)
class ScaleHint:
    """What `hints` found; see the module docstring. `reason` says why the chosen shapes were chosen."""

    verdicts: tuple[PodVerdict, ...]
    additions: tuple[NodeAddition, ...] = ()
    unplaceable: tuple[str, ...] = ()
    drains: tuple[Drain, ...] = ()
    reason: str = ""
    trials: dict[str, int | None] = field(default_factory=dict)
    """Per shape name, the nodes it alone would need for the blocked pods (None: it cannot host them all)."""

    @property
    def nodes_needed(self) -> int:
        return sum(a.nodes for a in self.additions)

    def blocked(self) -> Counter[Blocker]:
        """Waiting pods by what blocks them (pods that fit now are not counted)."""
        return Counter(v.blocked_by for v in self.verdicts if v.blocked_by is not Blocker.NONE)

    def blocked_by_of(self, addition: NodeAddition) -> Blocker:
        """What mostly blocks the pods `addition` places (CAPACITY on a tie: it is what a new node answers)."""
        by_pod = {v.pod: v.blocked_by for v in self.verdicts}
        counts = Counter(by_pod[p] for p in addition.pods)
        return max(counts, key=lambda b: (counts[b], b is Blocker.CAPACITY)) if counts else Blocker.CAPACITY

    def key(self) -> tuple[object, ...]:
        """What an operator acts on, to tell a changed hint from the same one again: the counts by blocker, the
        nodes to add per shape, the pods no shape hosts and the nodes to drain."""
        return (tuple(sorted((b.value, n) for b, n in self.blocked().items())),
                tuple((a.shape.name, a.nodes) for a in self.additions), self.unplaceable,
                tuple(d.node for d in self.drains))


def hints(snapshot: ClusterSnapshot, waiting: Sequence[Pod], shapes: Sequence[NodeShape], policy: Policy, *,
          running: Sequence[RunningPod] = (), max_drains: int = 5) -> ScaleHint:
    """Verdicts for `waiting` (in queue order), the node shapes that would place the blocked ones, and up to
    `max_drains` nodes that could be drained into holes (given the pods `running` on them). See the module doc.
    `snapshot` is not changed."""
    placed = snapshot.copy()  # the cluster after the pods that fit now are placed
    judged = snapshot.copy()  # ... and each blocked pod's need taken from the holes
    hostable = _hostable(snapshot, waiting, shapes)  # (n_pods, n_shapes)
    verdicts: list[PodVerdict] = []
    blocked: list[int] = []
    unplaceable: list[str] = []
    for i, pod in enumerate(waiting):
        demand = resolve(pod, judged)
        decision = decide(judged, demand, policy)
        if decision.scheduled:
            bind(judged, demand, decision)
            bind(placed, resolve(pod, placed), decision)
            verdicts.append(PodVerdict(pod.name, Blocker.NONE, "fits now"))
            continue
        blocker, reason = diagnose(judged, demand, policy)
        if blocker in (Blocker.CAPACITY, Blocker.FRAGMENTATION) and not _allowed_anywhere(judged, demand):
            blocker, reason = Blocker.CONSTRAINT, "no node of the cluster allows it (labels, taints, cordon)"
        if blocker is Blocker.CONSTRAINT and hostable[i].any():
            blocker, reason = Blocker.CAPACITY, (
                f"{reason}; a new node of shape {shapes[int(np.argmax(hostable[i]))].name} could")
        if blocker in (Blocker.CAPACITY, Blocker.FRAGMENTATION, Blocker.LATENCY) and hostable[i].any():
            blocked.append(i)
        elif blocker is not Blocker.NONE:
            unplaceable.append(pod.name)
        if blocker is Blocker.FRAGMENTATION:
            _absorb(judged, demand)
        verdicts.append(PodVerdict(pod.name, blocker, reason))
    additions, reason, trials = _choose_shapes(placed, [waiting[i] for i in blocked], hostable[blocked], shapes,
                                               policy)
    left = [waiting[i].name for i in blocked if not any(waiting[i].name in a.pods for a in additions)]
    drains = drainable(placed, running, policy, limit=max_drains) if max_drains else ()
    return ScaleHint(tuple(verdicts), additions, (*unplaceable, *left), drains, reason, trials)


def drainable(snapshot: ClusterSnapshot, running: Sequence[RunningPod], policy: Policy, *,
              limit: int = 5) -> tuple[Drain, ...]:
    """Up to `limit` nodes that could be emptied one after another by moving their pods into holes (module doc,
    3), the emptiest first. `snapshot` is not changed."""
    by_node: dict[str, list[RunningPod]] = {}
    for pod in running:
        by_node.setdefault(pod.node_name, []).append(pod)
    order = sorted((r for r in range(snapshot.n_nodes) if _explained(snapshot, r, by_node.get(
        snapshot.node_names[r], []))), key=lambda r: (len(by_node.get(snapshot.node_names[r], [])), r))
    work = snapshot.copy()
    found: list[Drain] = []
    for row in order:
        if len(found) >= limit:
            break
        trial = work.copy()
        _close(trial, row)
        moves: list[Move] = []
        for pod in sorted(by_node.get(snapshot.node_names[row], []), key=targets.largest_first):
            move = targets.place(trial, pod, policy, 0)
            if move is None:
                break
            moves.append(move)
        else:
            found.append(Drain(snapshot.node_names[row], tuple(moves)))
            work = trial  # the node stays closed and its pods' new places stay taken
    return tuple(found)


# -- node shapes -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Trial:
    shape: int
    nodes: int
    placed: tuple[int, ...]  # indices into the pods tried
    snapshot: ClusterSnapshot


def _choose_shapes(base: ClusterSnapshot, pods: Sequence[Pod], hostable: BoolArray, shapes: Sequence[NodeShape],
                   policy: Policy) -> tuple[tuple[NodeAddition, ...], str, dict[str, int | None]]:
    """Greedy over shapes (module doc, 2): the additions, why, and each shape's own count on the first round."""
    additions: list[NodeAddition] = []
    remaining = list(range(len(pods)))
    first: dict[str, int | None] = {}
    reason = ""
    added = 0
    while remaining:
        trials = []
        for s, shape in enumerate(shapes):
            candidates = [i for i in remaining if hostable[i, s]]
            if candidates:
                trials.append(_fill(base, pods, candidates, shape, s, policy, added))
        trials = [t for t in trials if t.placed]
        if not trials:
            break
        best = min(trials, key=lambda t: (-len(t.placed), t.nodes, shapes[t.shape].gpu_memory_total_mib,
                                           shapes[t.shape].cpu_milli, shapes[t.shape].name))
        if not additions:
            first = {shapes[t.shape].name: (t.nodes if len(t.placed) == len(remaining) else None) for t in trials}
            reason = _why(best, trials, shapes, len(remaining))
        additions.append(NodeAddition(shapes[best.shape], best.nodes, tuple(pods[i].name for i in best.placed)))
        added += best.nodes
        base = best.snapshot
        remaining = [i for i in remaining if i not in set(best.placed)]
    return tuple(additions), reason, first


def _fill(base: ClusterSnapshot, pods: Sequence[Pod], candidates: Sequence[int], shape: NodeShape, s: int,
          policy: Policy, already: int) -> _Trial:
    """How many nodes of `shape` place the candidates: a first count by adding nodes one at a time and placing
    the candidates after each (until all are placed or a new node takes none), then confirmed the way an
    autoscaler acts -- all the nodes added at once, the candidates placed in order -- with one node more until
    the policy places as many as the count promised (with every node there at once, it may spread pods so
    that a later multi-GPU pod finds no empty node)."""
    work = base
    left = list(candidates)
    nodes = 0
    while left and nodes < MAX_NODES_PER_SHAPE:
        before = work
        work = work.appended(*_new_nodes(shape, s, already + nodes, 1, work))
        nodes += 1
        still = _place_on_new(work, pods, left, policy, work.n_nodes - 1)
        if len(still) == len(left):
            nodes -= 1  # this node took nothing: it is not part of the answer
            work = before
            break
        left = still
    promised = len(candidates) - len(left)
    while True:
        work = base.appended(*_new_nodes(shape, s, already, nodes, base))
        rest = _place_on_new(work, pods, list(candidates), policy, base.n_nodes)
        if len(candidates) - len(rest) >= promised or nodes >= MAX_NODES_PER_SHAPE:
            return _Trial(s, nodes, tuple(i for i in candidates if i not in set(rest)), work)
        nodes += 1


def _new_nodes(shape: NodeShape, s: int, first: int, count: int, onto: ClusterSnapshot
               ) -> tuple[list[Node], list[NodeFacts] | None]:
    names = [f"{ADDED_PREFIX}-{s}-{first + k}" for k in range(count)]
    return [shape.node(n) for n in names], [shape.facts(n) for n in names] if onto.facts is not None else None


def _place_on_new(work: ClusterSnapshot, pods: Sequence[Pod], candidates: list[int], policy: Policy,
                  first_new: int) -> list[int]:
    """Place the candidates on `work` in order with the policy (each charged before the next); the ones left.
    Pods for which no new node (rows from `first_new`) has room are not tried: they fit nowhere else either."""
    demands = [resolve(pods[i], work) for i in candidates]
    room = np.asarray(room_for(work, demands)[:, first_new:].any(axis=1))  # necessary to land on a new node
    left = []
    for i, demand, maybe in zip(candidates, demands, room.tolist(), strict=True):
        decision = decide(work, demand, policy) if maybe else None
        if decision is not None and decision.scheduled:
            bind(work, demand, decision)
        else:
            left.append(i)
    return left


def _why(best: _Trial, trials: Sequence[_Trial], shapes: Sequence[NodeShape], n_pods: int) -> str:
    shape = shapes[best.shape]
    head = (f"{best.nodes} x {shape.name} place{'s' if best.nodes == 1 else ''} "
            f"{'all ' if len(best.placed) == n_pods else ''}{len(best.placed)} of {n_pods} blocked pod(s)")
    others = []
    for t in sorted(trials, key=lambda t: (-len(t.placed), t.nodes)):
        if t is best:
            continue
        other = shapes[t.shape].name
        others.append(f"{other} would need {t.nodes}" if len(t.placed) == n_pods
                      else f"{other} places {len(t.placed)} with {t.nodes}")
    hosts = [shapes[s].name for s in range(len(shapes)) if s not in {t.shape for t in trials}]
    tail = f"; {', '.join(hosts)} cannot host any" if hosts else ""
    return head + (f" (fewest nodes: {'; '.join(others)}{tail})" if others or tail else "")


# -- helpers ---------------------------------------------------------------------------------------------------------


def _hostable(snapshot: ClusterSnapshot, pods: Sequence[Pod], shapes: Sequence[NodeShape]) -> BoolArray:
    """Whether an empty node of each shape could take each pod (size, GPU model, labels and taints),
    (n_pods, n_shapes)."""
    out = np.zeros((len(pods), len(shapes)), dtype=bool)
    if not shapes or not pods:
        return out
    names = [f"{ADDED_PREFIX}-template-{s}" for s in range(len(shapes))]
    template = ClusterSnapshot([s.node(n) for s, n in zip(shapes, names, strict=True)],
                               [s.facts(n) for s, n in zip(shapes, names, strict=True)]
                               if snapshot.facts is not None else None)
    for i, pod in enumerate(pods):
        demand = resolve(pod, template)
        ok = could_ever_fit(template, demand)
        static = template.static_mask(demand.rules)
        out[i] = ok if static is None else ok & static
    return out


def _allowed_anywhere(snapshot: ClusterSnapshot, demand: Demand) -> bool:
    """Whether a node the pod could ever fit also lets it in by its labels, taints and cordon (blockers.diagnose
    judges capacity on size alone)."""
    static = snapshot.static_mask(demand.rules)
    ever = could_ever_fit(snapshot, demand)
    return bool((ever if static is None else ever & static).any())


def _absorb(work: ClusterSnapshot, demand: Demand) -> None:
    """Take a fragmentation-blocked pod's need from the free room of the nodes it could use, in pieces, smallest
    holes first (module doc, 1): CPU and host memory per node, GPU need in fractions of its per-GPU request."""
    usable = np.flatnonzero(could_ever_fit(work, demand))
    cpu, host = demand.cpu_milli, demand.memory_mib
    for row in usable[np.argsort(work.cpu_free_milli[usable], kind="stable")]:
        take_cpu = min(cpu, int(work.cpu_free_milli[row]))
        take_host = min(host, int(work.memory_free_mib[row]))
        if take_cpu or take_host:
            work.charge(int(row), (), take_cpu, take_host, 0, 0, 0, slots=0)
        cpu, host = cpu - take_cpu, host - take_host
    if not demand.needs_gpu:
        return
    units = float(demand.gpu_count)  # whole per-GPU needs still to place
    holes = [(int(work.free_memory_mib[r, c]), int(r), int(c)) for r in usable
             for c in np.flatnonzero(work.gpu_exists[r] & (work.free_share_milli[r] > 0))]
    for _, row, col in sorted(holes):
        if units <= 0:
            break
        type_id = work.gpu_type_id[row]
        share, memory = int(demand.share_milli_by_type[type_id]), int(demand.gpu_memory_mib_by_type[type_id])
        free_share, free_memory = int(work.free_share_milli[row, col]), int(work.free_memory_mib[row, col])
        fraction = min(units, free_share / max(share, 1), free_memory / memory if memory else math.inf, 1.0)
        if fraction <= 0:
            continue
        work.charge(row, (col,), 0, 0, min(free_share, math.ceil(fraction * share)),
                    min(free_memory, math.ceil(fraction * memory)), 0, slots=0)
        units -= fraction


def _close(work: ClusterSnapshot, row: int) -> None:
    """Take all of a node's free room on `work`, so nothing lands there."""
    work.charge(row, (), int(work.cpu_free_milli[row]), int(work.memory_free_mib[row]), 0, 0, 0, slots=0)
    for col in np.flatnonzero(work.gpu_exists[row]):
        share, memory = int(work.free_share_milli[row, col]), int(work.free_memory_mib[row, col])
        if share or memory:
            work.charge(row, (int(col),), 0, 0, share, memory, 0, slots=0)


def _explained(snapshot: ClusterSnapshot, row: int, pods: Sequence[RunningPod]) -> bool:
    """Whether the pods given account for everything used on the node (else another's pods run there)."""
    used_cpu = int(snapshot.cpu_capacity_milli[row] - snapshot.cpu_free_milli[row])
    used_share = int(np.where(snapshot.gpu_exists[row], MILLI_PER_GPU - snapshot.free_share_milli[row], 0).sum())
    return (used_cpu == sum(p.pod.cpu_milli for p in pods)
            and used_share == sum(p.share_milli * len(p.gpu_indices) for p in pods))


def _open_rows(snapshot: ClusterSnapshot) -> list[bool]:
    if snapshot.facts is None:
        return [True] * snapshot.n_nodes
    return [f.ready and not f.unschedulable for f in snapshot.facts]


def _bare(shape: NodeShape) -> tuple[str, int, int, int, int]:
    return (shape.gpu_model, shape.gpu_count, shape.gpu_memory_mib, shape.cpu_milli, shape.memory_mib)


__all__ = ["ADDED_PREFIX", "HOSTNAME_LABEL", "MAX_NODES_PER_SHAPE", "Drain", "NodeAddition", "NodeShape", "PodVerdict",
           "ScaleHint", "drainable", "hints", "shapes_of"]
