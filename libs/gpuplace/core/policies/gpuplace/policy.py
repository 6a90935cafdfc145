"""gpuplace, the house placement policy: keep the GPU share the arriving workload can still use.

For each pod, over the nodes the standard filters pass, every way a node could take the pod (for a one-GPU
request, every distinct hole it could go into) is judged by two numbers, in this order:
1. hole loss (hole_loss.py): for a shared one-GPU request, the part of a GPU the hole can no longer earn in an
   optimal packing of the arriving mix (LP pattern prices); zero for the steps of an optimal packing;
2. node waste growth (node_waste.py): how much W_n -- the node's free share the arriving workload could not use:
   FGD's fragmentation with shapes weighted by the reach of their node pool, plus the share the node's CPU and
   memory can no longer feed -- grows, in milli-GPU, as a float (not FGD's quantised sigmoid).
A node scores its best option, -(loss x LOSS_WEIGHT + growth): any loss outweighs any growth. Where the arriving
workload asks memory slices, every GPU pod also pays PACK_MILLI per milli-GPU its node keeps free (_pack). A
multi-GPU pod that must span GPU domains where the node describes its topology loses SPAN_PENALTY_MILLI more (the
runtime applies it, core/topology.py). Ties go to the first node (runtime.py); inside the node the pod takes the
hole of the best option (for a memory slice the smallest of equal score, otherwise the largest), the lowest GPU
index among equal holes. Online only: running pods never move.

CPU is as scarce as GPU share where the mix asks more of it per GPU than the nodes have (issue 39): a hole left on
a node whose CPU cannot feed it counts as lost (hole_loss.py, CPU_SCARCE), and the reserve counts the CPU of pods
that ask no GPU against what the GPUs can be fed (whole_gpu_reserve.CPU_ONLY_EATS_CPU).

One filter of its own, after the standard chain: the whole-GPU reserve (whole_gpu_reserve.py). Once the room in
partly used GPUs could take the shared pods the seen mix still brings, a shared pod of more than half a GPU may not
open a fresh GPU a whole-GPU pod could use; where no other node takes it, it waits (reason WholeGpuReserve).
Setting: PolicyContext.whole_gpu_reserve, from GPUPLACE_WHOLE_GPU_RESERVE in the service (default WHOLE_GPU_RESERVE,
0 turns it off).

The arriving workload is estimated from the pods scored so far (shape_estimate.py, half-life HALF_LIFE_PODS pods),
over a floor that never decays: PRIOR_PODS pseudo-pods of the whole-GPU shapes the cluster's nodes could host (one
GPU, powers of two, whole nodes; per GPU model when there are several) and DECLARED_PODS of each shape the operator
declares (PolicyContext.expected_shapes; GPUPLACE_EXPECTED_SHAPES in the service), which replace the hostable shapes
of their GPU count (shape_estimate.prior_shapes), each counting only as far as the pods seen of its kind fall short of
it (shape_estimate.prior_top_up). Learned only from pods seen, the policy did not know whole nodes were worth keeping
until the first 8-GPU job came, and on small fleets that job then found every node broken (issue 19; `gpuplace bench
robustness`). The context's TypicalWorkload is not used: FGD's 95% cut by count drops the
rare multi-GPU shapes that hold 6% of the trace's GPU demand, and seeding the estimate with it starved 8-GPU pods
early. The measure is rebuilt when the estimate (checked every DRIFT_CHECK_PODS pods) or the shapes' node pools (every
POOL_CHECK_PODS) move by more than DRIFT_TV in total variation; between rebuilds a state's waste and a request's best
option on a state are cached by interned state id (states.py, state_terms.py), so a decision mostly costs array
lookups."""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import BoolArray, FloatArray, IntArray
from gpuplace.core.demand import Demand, RequestKey
from gpuplace.core.framework.interface import Code, PolicyContext, Status
from gpuplace.core.framework.verdicts import CycleState, Verdict, one_status
from gpuplace.core.gpu_usable import usable_gpus
from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.core.policies.default_steps import DefaultSteps
from gpuplace.core.policies.gpuplace.hole_loss import HoleLoss
from gpuplace.core.policies.gpuplace.node_waste import NodeWaste, pool_drift, shape_weights
from gpuplace.core.policies.gpuplace.shape_estimate import (
    ShapeEstimate,
    declared_shapes,
    hostable_shapes,
    prior_shapes,
)
from gpuplace.core.policies.gpuplace.state_terms import StateTerms
from gpuplace.core.policies.gpuplace.states import StateIndex
from gpuplace.core.policies.gpuplace.whole_gpu_reserve import (
    PLUGIN,
    REASON,
    ReserveMix,
    held_back,
    reserve_mix,
    takes_whole_gpus,
)
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import TypicalWorkload

NAME = "gpuplace"
HALF_LIFE_PODS = 2000.0
DRIFT_TV = 0.02
DRIFT_CHECK_PODS = 16
HOLE_LOSS_MEMORY = False
"""Whether hole loss judges GPU-memory requests too. Off: perception pods ask any MiB, and pricing their holes
against an optimal packing of a mix that finite streams never complete opened fresh GPUs for them instead of
filling holes -- on 50 nodes of 8 x V100 (`gpuplace bench robustness`, v100-8gpu, seeds 0-7) 7.7% unallocated
against 1.7% with it off, FGD 1.7%. Share requests (the Alibaba traces) keep it."""
PRIOR_PODS = 32.0
"""Pseudo-pods of each whole-GPU shape the cluster could host (shape_estimate.hostable_shapes, shared among GPU
models), in the estimate before and beside the pods seen. Two-models family, seeds 0-7: 8 gave a mean of 7.9, 32 gave
6.0 and 128 gave 6.3 (FGD 10.1)."""
DECLARED_PODS = 16.0
"""Pseudo-pods of each shape the operator declares (in place of the hostable ones of its GPU count). Chosen on the
7-day fleet with its training shapes declared (`gpuplace sim --scenario fleet --days 7 --seeds 42-51`), against
nothing declared: 16 gave GPU p99 pending 0.76x (geometric mean; lower on 9 of 10 seeds) and stranded memory 0.3% more
in total; 8 gave 0.77x and 1.9% more, 32 gave 0.84x and 1.5% more. Seed 42's p99 swings with it (3,129 / 1,675 /
3,243 s at 8 / 16 / 32; bench/results/fleet-sim-no-latency.md)."""
SEEN_FLOOR_PODS = 0.0
"""A shape once seen never weighs less than this many pods (decaying, not forgotten); off until measured."""
POOL_CHECK_PODS = 256
"""Pods between looks at the shapes' node pools (each look costs one pass over the nodes)."""
LOSS_WEIGHT = 1e7
"""One milli-GPU of hole loss outweighs any node-waste growth (W is bounded by a node's GPUs x shape reach)."""
SPAN_PENALTY_MILLI = 1000.0
"""Spanning GPU domains (NUMA nodes, NVLink domains) costs a multi-GPU pod as much as one more GPU of node-waste
growth: a node where it fits in one domain wins unless it wastes a whole GPU more. Multi-GPU pods run slower
across domains for as long as they run, while a GPU of waste is often taken back by the next small pod; below
LOSS_WEIGHT, so it never outweighs hole loss."""
PACK_MILLI = 0.02
"""Per milli-GPU of free share left on the node, what an option of a GPU pod pays where the arriving workload asks
memory slices (_pack). Perception fleets come and go: deployments scale with the day and roll out every replica, so
the node that empties is the one that gets a whole-node training job. Among options of equal waste growth the
fuller node then wins and the emptier ones drain. `gpuplace sim --scenario fleet --days 7`, seeds 42-51, with this
and the smallest-hole rule against neither: stranded GPU memory lower on 9 of 10 seeds, GPU p99 pending lower on 8
(bench/results/fleet-sim-no-latency.md). Off for share requests (the Alibaba traces): no pod leaves there, and
packing only spends holes (`default` 3.90 -> 3.93)."""
WHOLE_GPU_RESERVE = 1.0
"""The whole-GPU reserve's scale (whole_gpu_reserve.py): it holds once the room in partly used GPUs could take this
many times the shared demand the seen mix still brings. `gpuplace sim --pods default --seeds 42-51`: 3.84 without
it, 3.688 with it; scale 0.5 gives 3.58, 2 gives 3.79, 0.35 4.25 (bench/reserve_rule.py)."""
CPU_SCARCE = True
"""Whether hole loss counts a hole left on a node whose CPU cannot feed it as lost (hole_loss.py; issue 39, with the
reserve's whole_gpu_reserve.CPU_ONLY_EATS_CPU). Not a setting: the design, kept switchable for the ablation
(bench/gpuplace_ablation.py, no-cpu-scarce). The same rule for packing -- a node's free share counted only as far as
its CPU feeds it -- was tried on the robustness families and not kept: cpu-heavy-144 15.49 -> 15.20 but its worst
seed 24.35 -> 24.70, cpu-slices-160 21.99 -> 22.52 (seeds 0-35)."""
MAX_TABLES = 4096
"""Score tables kept, one per distinct request; past it they are all dropped. Memory requests rarely repeat (each
perception pod asks its own MiB), so without a bound a long-running service would keep a table per pod."""


class Gpuplace(DefaultSteps):
    name = NAME
    learns_online = True  # learns the arriving mix from score() calls: callers keep one instance per cluster
    span_penalty = SPAN_PENALTY_MILLI  # read by the runtime (core/topology.py)

    def __init__(self, context: PolicyContext) -> None:
        # the workload is estimated online (shape_estimate.py), not taken from a snapshot; the operator's
        # expected shapes join the prior, in place of its guess for their GPU counts
        self._declared = declared_shapes(context.expected_shapes, DECLARED_PODS)
        self._estimate = ShapeEstimate(HALF_LIFE_PODS, seen_floor_pods=SEEN_FLOOR_PODS)
        self._since_check = 0
        self._since_pool_check = 0
        self._cluster: tuple[object, ...] | None = None  # what the measure was built against (types and capacities)
        self._cluster_uid: int | None = None
        self._waste_measure: NodeWaste | None = None
        self._loss: HoleLoss | None = None
        self._states: StateIndex | None = None
        self._terms = StateTerms()
        self._tables: dict[RequestKey, FloatArray] = {}  # request -> best score per state id, NaN until computed
        self._holes: dict[RequestKey, FloatArray] = {}  # request -> free share of the GPU the best option takes
        self._pack = 0.0  # PACK_MILLI where the arriving workload asks memory slices, else 0 (_pack)
        reserve = context.whole_gpu_reserve
        self._reserve_scale = WHOLE_GPU_RESERVE if reserve is None else float(reserve)
        self._reserve_mix: tuple[object, ReserveMix | None] | None = None  # (measure it came from, mix)
        self.held_back = 0
        """Decisions where the reserve kept a pod off every node the standard chain passed."""
        self._held_in_a_row = 0  # such decisions since the last whole-GPU pod (whole_gpu_reserve.reserve_holds)
        self._last_held: Demand | None = None  # the request of the last decision counted in held_back
        self.rebuilds = 0
        """How often the measure was rebuilt (the estimate drifted or the cluster changed)."""

    def verdicts(self, state: CycleState) -> list[Verdict]:
        """The standard chain, then the whole-GPU reserve where it holds (whole_gpu_reserve.py)."""
        chain = super().verdicts(state)
        if takes_whole_gpus(state.demand):
            self._held_in_a_row = 0
        mix = self._mix_for_reserve()
        if mix is None:
            return chain
        held = held_back(state.snapshot, state.demand, mix, self._reserve_scale, self._held_in_a_row)
        if held is None:
            return chain
        passed: BoolArray = ~held
        fits = np.logical_and.reduce([v.passed for v in chain])
        if fits.any() and not (fits & passed).any() and state.demand is not self._last_held:  # held back
            self._last_held = state.demand  # once per decision: a wrapper (latency_aware) asks twice, on its view
            self.held_back += 1
            self._held_in_a_row += 1
        status = Status(Code.UNSCHEDULABLE, REASON, PLUGIN)
        return [*chain, Verdict(PLUGIN, passed, lambda rows: one_status(status, rows))]

    def _mix_for_reserve(self) -> ReserveMix | None:
        """The reserve's view of the mix seen, from the current measure's workload (None before one is built, with
        the reserve off, or when no whole-GPU pod was seen)."""
        measure = self._waste_measure
        if measure is None or self._reserve_scale <= 0:
            return None
        if self._reserve_mix is None or self._reserve_mix[0] is not measure:
            self._reserve_mix = (measure, reserve_mix(measure.workload))
        return self._reserve_mix[1]

    def score(self, snapshot: ClusterSnapshot, demand: Demand, candidates: IntArray) -> FloatArray:
        self._estimate.observe(demand)
        self._since_check += 1
        self._since_pool_check += 1
        self._refresh(snapshot)
        states = self._state_index(snapshot)
        ids = states.ids(snapshot)[candidates]  # (n_candidates,)
        table, holes = self._table(demand.request_key, states.n_states)
        scores = table[ids]
        missing = np.isnan(scores)
        if missing.any():
            todo = np.unique(ids[missing])
            table[todo], holes[todo] = self._score_states(states, demand, todo)
            scores = table[ids]
        return scores

    def choose_gpus(self, snapshot: ClusterSnapshot, demand: Demand, node: int) -> tuple[int, ...]:
        usable = np.flatnonzero(usable_gpus(snapshot, demand, slice(node, node + 1))[0])
        if len(usable) < demand.gpu_count:
            raise ValueError(f"node {snapshot.node_names[node]} cannot take {demand.gpu_count} GPU(s)")
        if demand.gpu_count == 0:
            return ()
        free = snapshot.free_share_milli[node]
        if demand.gpu_count > 1:  # the least-free usable GPUs, index order on ties (as FGD and the baselines)
            order = np.argsort(free[usable], kind="stable")
            return tuple(sorted(int(i) for i in usable[order[: demand.gpu_count]]))
        scored = self._holes.get(demand.request_key)
        if scored is not None:  # the hole the best option of this node's state took when it was scored
            state = self._state_index(snapshot).ids(snapshot)[node]
            same = usable[free[usable] == scored[state]] if state < len(scored) else usable[:0]
            if len(same):  # else that GPU lacks memory the state does not show: judge the usable ones
                return (int(same[0]),)
        return self._best_gpu(snapshot, demand, node, usable)

    def _best_gpu(self, snapshot: ClusterSnapshot, demand: Demand, node: int, usable: IntArray) -> tuple[int]:
        """The usable GPU whose option scores best, lowest index on ties (GPUs judged one by one)."""
        if self._estimate.empty:
            self._estimate.observe(demand)
        self._refresh(snapshot)
        measure = self._built()
        free = snapshot.free_share_milli[node]
        type_id = snapshot.gpu_type_id[node]
        share = int(demand.share_milli_by_type[type_id])
        after = np.repeat(free[None, :], len(usable), axis=0)  # one row per GPU tried, (n_usable, max_gpus)
        after[np.arange(len(usable)), usable] -= share
        n = len(usable)
        states = self._state_index(snapshot)
        before = self._state_terms(states, states.ids(snapshot)[node : node + 1])[0]
        growth = measure.waste_milli(
            after, np.full(n, snapshot.cpu_free_milli[node] - demand.cpu_milli),
            np.full(n, snapshot.memory_free_mib[node] - demand.memory_mib), np.full(n, type_id)) - before
        cpu_left = np.array([snapshot.cpu_free_milli[node] - demand.cpu_milli]) if CPU_SCARCE else None
        loss = self._hole_loss().loss_milli(np.array([type_id]), np.array([share]), free[None, usable],
                                            cpu_left)[0] if _priced(demand) else np.zeros(n)
        return (int(usable[int(np.argmax(_combined(loss, growth)))]),)

    # -- the arriving workload and the measure built on it -----------------------------------------------

    def _refresh(self, snapshot: ClusterSnapshot) -> None:
        """Rebuild the measure if the cluster changed, the estimate drifted (checked every DRIFT_CHECK_PODS) or
        the shapes' pools moved (checked every POOL_CHECK_PODS), each by more than DRIFT_TV."""
        cluster: tuple[object, ...] | None
        if snapshot.uid != self._cluster_uid:
            self._cluster_uid, cluster = snapshot.uid, _cluster_signature(snapshot)
        else:
            cluster = self._cluster
        measure = self._waste_measure
        stale = measure is None or cluster != self._cluster
        workload = None if stale or measure is None else measure.workload
        if not stale and self._since_check >= DRIFT_CHECK_PODS:
            self._since_check = 0
            stale = self._estimate.drift() > DRIFT_TV
            workload = None if stale else workload
        if not stale and measure is not None and self._since_pool_check >= POOL_CHECK_PODS:
            self._since_pool_check = 0
            stale = pool_drift(measure.shape_weight, shape_weights(measure.workload, snapshot)) > DRIFT_TV
        if stale:
            if cluster != self._cluster:  # other GPU types or nodes: nothing computed before carries over
                self._terms = StateTerms()
                models = tuple(snapshot.gpu_types[t].model for t in snapshot.gpu_type_id)
                self._estimate.set_prior(prior_shapes(hostable_shapes(snapshot.gpu_count, models, PRIOR_PODS),
                                                      self._declared))
            workload = workload or self._estimate.build(snapshot.gpu_types)
            self._waste_measure = NodeWaste(workload, snapshot)
            self._loss = None  # priced when a request first needs it (_hole_loss)
            self._pack = _pack(workload.shapes)
            self._cluster = cluster
            self._forget_scores()
            self.rebuilds += 1

    def _state_index(self, snapshot: ClusterSnapshot) -> StateIndex:
        if self._states is None or self._states.max_gpus != snapshot.max_gpus:
            self._states = StateIndex(snapshot.max_gpus)
            self._terms = StateTerms()  # new state ids
            self._forget_scores()
        return self._states

    def _forget_scores(self) -> None:
        """Drop everything computed with the old measure or for the old state ids."""
        self._terms.forget(self._waste_measure)
        self._forget_tables()

    def _forget_tables(self) -> None:
        self._tables.clear()
        self._holes.clear()

    def _table(self, key: RequestKey, n_states: int) -> tuple[FloatArray, FloatArray]:
        table = self._tables.get(key)
        if table is None and len(self._tables) >= MAX_TABLES:
            self._forget_tables()
        if table is None or len(table) < n_states:
            self._tables[key] = table = _grown(table, n_states)
            self._holes[key] = _grown(self._holes.get(key), n_states)
        return table, self._holes[key]

    def _built(self) -> NodeWaste:
        """The measure; `_refresh` builds it before anything is scored."""
        assert self._waste_measure is not None
        return self._waste_measure

    def _hole_loss(self) -> HoleLoss:
        """The hole prices of the current measure's mix, solved when a request first needs them: only shares are
        priced (_priced), and a fleet of memory slices would solve the knapsack LP at every drift for nothing."""
        if self._loss is None:
            measure = self._built()
            self._loss = HoleLoss(measure.workload.shapes, measure.shape_weight)
        return self._loss

    def _state_terms(self, states: StateIndex, ids: IntArray) -> tuple[FloatArray, IntArray, IntArray]:
        return self._terms.terms(states, ids, self._built())

    # -- scoring states ------------------------------------------------------------------------------------

    def _score_states(self, states: StateIndex, demand: Demand, todo: IntArray) -> tuple[FloatArray, FloatArray]:
        """Best combined score over the options of each state in `todo` (state ids), and the free share of the
        GPU that option takes (NaN unless one GPU is taken), (n_todo,) each."""
        free = states.free_share_milli[todo]  # high to low, (n_todo, max_gpus)
        types = states.gpu_type_id[todo]
        share = demand.share_milli_by_type[types]  # (n_todo,)
        measure = self._built()
        row, col, before, after = _options(free, share, demand.gpu_count)
        loss = np.zeros(len(row))
        if demand.gpu_count == 1 and _priced(demand):  # growth only matters among a state's least-loss options
            cpu_left = states.cpu_free_milli[todo][row] - demand.cpu_milli if CPU_SCARCE else None
            loss = np.round(self._hole_loss().loss_milli(types[row], share[row], before, cpu_left))[:, 0]
            least = np.full(len(todo), np.inf)
            np.minimum.at(least, row, loss)
            keep = loss == least[row]
            row, col, before, after, loss = row[keep], col[keep], before[keep], after[keep], loss[keep]
        waste, fitting_gpus, fitting_share = self._state_terms(states, todo)
        node_free = free[row].sum(axis=1)
        growth = measure.waste_after(
            fitting_gpus[row], fitting_share[row], node_free,
            states.cpu_free_milli[todo][row] - demand.cpu_milli, states.memory_free_mib[todo][row] - demand.memory_mib,
            types[row], before, after) - waste[row]
        combined = _combined(loss, growth)
        if self._pack and demand.gpu_count:
            combined -= self._pack * (node_free - before.sum(axis=1) + after.sum(axis=1))  # the node's, after
        best, hole = np.full(len(todo), -np.inf), np.full(len(todo), np.nan)
        starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])  # options come grouped by state, in row order
        best[row[starts]] = np.maximum.reduceat(combined, starts)
        if demand.gpu_count == 1:  # the largest hole reaching the state's best; a memory slice's smallest
            reaching = np.flatnonzero(combined == best[row])
            same = row[reaching][1:] == row[reaching][:-1]
            pick = reaching[np.r_[~same, True] if _takes_memory_slice(demand) else np.r_[True, ~same]]
            hole[row[pick]] = free[row[pick], col[pick]]
        return best, hole


def _takes_memory_slice(demand: Demand) -> bool:
    """A one-GPU request sized in GPU memory (a perception pod), not in milli or whole GPUs.

    Its holes are not priced (HOLE_LOSS_MEMORY), so many holes score alike, and it takes the smallest of them: the
    larger holes stay for the larger slices, and fewer GPUs carry slices. With the largest (the rule for shares and
    before), slices spread over more GPUs and the whole GPUs that multi-GPU pods need went first."""
    _, _, count, _, memory, _ = demand.request_key
    return count == 1 and memory is not None


def _pack(shapes: TypicalWorkload) -> float:
    """PACK_MILLI if any GPU shape of the arriving workload asks a memory slice, else 0."""
    sliced = (shapes.gpu_count > 0) & np.array([key[4] >= 0 for key in shapes.keys], dtype=bool)
    return PACK_MILLI if sliced.any() else 0.0


def _priced(demand: Demand) -> bool:
    """Whether hole loss judges this request: shares given in milli (not GPU memory slices) -- if HOLE_LOSS_MEMORY."""
    return HOLE_LOSS_MEMORY or demand.request_key[4] is None


def _combined(loss_milli: FloatArray, growth_milli: FloatArray) -> FloatArray:
    return -(np.round(loss_milli) * LOSS_WEIGHT + growth_milli)


def _options(free: IntArray, share: IntArray, count: int) -> tuple[IntArray, ...]:
    """Ways states (free shares high to low, (n, max_gpus)) can take the pod: per option its state row, the
    first GPU column taken, and the free share of each GPU taken before and after, (n_options, count) each.

    One GPU: each distinct hole that fits (equal holes give equal results). k GPUs: the k least-free GPUs that
    fit, the last of the fitting prefix (as FGD and the baselines choose). No GPU: the state itself.
    """
    n = len(free)
    if count == 0:
        empty = np.zeros((n, 0), dtype=np.int64)
        return np.arange(n), np.zeros(n, dtype=np.int64), empty, empty
    fits = free >= share[:, None]  # fitting GPUs form a prefix of each row, (n, max_gpus)
    if count == 1:
        distinct = np.ones_like(fits)
        distinct[:, 1:] = free[:, 1:] != free[:, :-1]
        row, col = np.nonzero(fits & distinct)
        before = free[row, col][:, None]
        return row, col, before, before - share[row][:, None]
    row = np.arange(n)
    cols = fits.sum(axis=1)[:, None] - np.arange(1, count + 1)[None, :]  # (n, count)
    before = np.take_along_axis(free, cols, axis=1)
    return row, cols[:, 0], before, before - np.minimum(share, MILLI_PER_GPU)[:, None]


def _cluster_signature(snapshot: ClusterSnapshot) -> tuple[object, ...]:
    """What the measure depends on besides the workload: GPU types and node capacities (not free resources)."""
    return (snapshot.gpu_types, snapshot.n_nodes, hash(snapshot.cpu_capacity_milli.tobytes()),
            hash(snapshot.memory_capacity_mib.tobytes()), hash(snapshot.gpu_count.tobytes()),
            hash(snapshot.gpu_type_id.tobytes()))


def _grown(table: FloatArray | None, size: int) -> FloatArray:
    grown = np.full(max(1024, 2 * size), np.nan)
    if table is not None:
        grown[: len(table)] = table
    return grown


__all__ = [
    "CPU_SCARCE", "DECLARED_PODS", "DRIFT_CHECK_PODS", "DRIFT_TV", "Gpuplace", "HALF_LIFE_PODS", "HOLE_LOSS_MEMORY",
    "LOSS_WEIGHT", "MAX_TABLES", "NAME", "PACK_MILLI", "POOL_CHECK_PODS", "PRIOR_PODS", "SEEN_FLOOR_PODS",
    "SPAN_PENALTY_MILLI", "WHOLE_GPU_RESERVE",
]
