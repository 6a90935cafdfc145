"""Latency feasibility: a pod goes on a GPU only if, with it there, every pod on that GPU keeps its
predicted p95 within its deadline less a margin (DESIGN.md §6).

Adding a pod raises the GPU's busy-period work W, hence every co-runner's GPU-bound percentile
(latency/predict.py), so the check covers the pod and each co-runner, on every GPU at once:
    max(p95 floor of pod i, offset_95/speed + slope_95 * W_with_new) <= deadline_i * (1 - margin)
and the GPU's load must stay below the model's
`max_load` if anyone there has a deadline. Pods without a deadline constrain nothing but load the GPU.

Per cycle the verdict on every GPU is computed once (`pre_filter` -> LatencyCheck); `verdict` (and `mask`
and `status`, which are its parts) only read it (house rule 6). It needs the GPU's co-runners, which the
snapshot does not hold: they come from GpuLoad (gpu_load.py), charged and refunded beside the snapshot.

It is what every latency pod's decision pays, so it is cheap where it can be exact: the co-runners' terms
(work, periods, tightest budget) are kept per GpuLoad and refreshed only on the nodes charged or refunded since,
and admission compares the busy period's equation at the tightest budget's cap instead of solving it
(`_feasible`). The solved figures (`_solved`: p95 and budget of the pod closest to its budget) are computed only
when a refusal is explained.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple
from weakref import WeakKeyDictionary

import numpy as np

from gpuplace.core.arrays import BoolArray, FloatArray, IntArray
from gpuplace.core.framework.interface import Code, Status
from gpuplace.core.framework.verdicts import Explained, Verdict, distinct
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.busy_period import busy_period
from gpuplace.core.latency.model import LatencyModel, Stream, Tail
from gpuplace.core.latency.predict import percentile_ms

NAME = "LatencyFit"
DEFAULT_MARGIN = 0.1
"""Share of the deadline kept in reserve: admission asks p95 <= 90% of the deadline."""


class LatencyCheck:
    """One pod's verdict on every GPU with it added; arrays are (n_nodes, max_gpus) unless noted.

    `feasible` and `alone_ok` are decided when the check is made; the figures that explain a refusal (`p95_ms`,
    `budget_ms`, `load_fraction`) are solved, from the slots as they were then, only when first read.
    """

    def __init__(self, feasible: BoolArray, alone_ok: BoolArray, margin: float,
                 solve: Callable[[], tuple[FloatArray, FloatArray, FloatArray]]) -> None:
        self.feasible = feasible
        self.alone_ok = alone_ok
        """(n_nodes,): the pod alone on one of the node's GPUs keeps its own budget (else no move helps)."""
        self.margin = margin
        self._solve = solve

    @cached_property
    def _solved(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        return self._solve()

    @property
    def p95_ms(self) -> FloatArray:
        """Worst predicted p95 relative to its budget: the p95 of the pod closest to (or past) its budget."""
        return self._solved[0]

    @property
    def budget_ms(self) -> FloatArray:
        """That pod's deadline x (1 - margin); inf where no pod on the GPU has a deadline."""
        return self._solved[1]

    @property
    def load_fraction(self) -> FloatArray:
        return self._solved[2]


def pre_filter(load: GpuLoad, model: LatencyModel, stream: Stream, gpu_exists: BoolArray, *,
               margin: float = DEFAULT_MARGIN) -> LatencyCheck:
    """The pod's verdict on every GPU; `gpu_exists` is the snapshot's (n_nodes, max_gpus) mask."""
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    if gpu_exists.shape != load.frame_rate_hz.shape[:2]:
        raise ValueError(f"gpu_exists {gpu_exists.shape} does not match GpuLoad {load.frame_rate_hz.shape[:2]}")
    taken = load.taken()

    def solve() -> tuple[FloatArray, FloatArray, FloatArray]:
        return _solved(taken.load, model, stream, gpu_exists, margin)

    own = _Own.of(load.speed, model, stream, margin)
    alone_ok = _alone_ok(own, load.speed, model, stream)
    if model.tail(95).slope > 0:
        feasible = _feasible(residents(load, model, margin), own, load.speed, model, stream, gpu_exists)
    else:  # p95 does not grow with the busy period: no cap on it, judge the solved figures
        p95, budget, _ = solve()
        feasible = gpu_exists & (p95 <= budget)
    return LatencyCheck(feasible, alone_ok, margin, solve)


@dataclass
class Residents:
    """What a check needs of the pods already on each GPU, for one (GpuLoad, model, margin); rows are refreshed
    when the GpuLoad's node_version says they changed. (n_nodes, max_gpus, n_slots) or (n_nodes, max_gpus)."""

    model: LatencyModel
    margin: float
    node_version: IntArray
    work_ms: FloatArray  # GPU work per frame on the GPU's own time scale, 0 in an empty slot
    period_ms: FloatArray  # inf in an empty slot
    load: FloatArray  # sum of work / period
    budget_ms: FloatArray  # the tightest deadline x (1 - margin); inf where no resident has a deadline
    solo_ok: BoolArray  # every resident with a deadline keeps it on its own service time (tail.solo_ratio x s)
    at_budget: dict[float, _AtBudget] = field(default_factory=dict)  # _feasible's residents' side, per pod budget


_RESIDENTS: WeakKeyDictionary[GpuLoad, Residents] = WeakKeyDictionary()


def residents(load: GpuLoad, model: LatencyModel, margin: float) -> Residents:
    """The residents' terms, recomputed only on the rows whose slots changed since they were last computed (all
    of them for another model or margin, or once the slot axis grew)."""
    cached = _RESIDENTS.get(load)
    if (cached is None or cached.model is not model or cached.margin != margin
            or cached.work_ms.shape != load.frame_rate_hz.shape):
        _RESIDENTS[load] = cached = Residents(model, margin, load.node_version.copy(),
                                               *_resident_terms(load, model, margin, slice(None)))
        return cached
    rows = np.flatnonzero(cached.node_version != load.node_version)
    if len(rows):
        terms = _resident_terms(load, model, margin, rows)
        for name, value in zip(("work_ms", "period_ms", "load", "budget_ms", "solo_ok"), terms, strict=True):
            getattr(cached, name)[rows] = value
        cached.node_version[rows] = load.node_version[rows]
    return cached


def _resident_terms(load: GpuLoad, model: LatencyModel, margin: float, rows: IntArray | slice
                    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, BoolArray]:
    service = load.service_gpu_ms(model, rows)
    work = load.work_fraction(model, rows) * service
    period = load.period_ms(rows)
    budget = load.deadline_ms[rows] * (1.0 - margin)  # inf in empty slots and for residents without a deadline
    solo_ok = (model.tail(95).solo_ratio * service <= budget) | np.isinf(budget)
    gpu_load: FloatArray = (work / period).sum(axis=2)
    tightest: FloatArray = budget.min(axis=2)
    all_solo_ok: BoolArray = np.all(solo_ok, axis=2)
    return work, period, gpu_load, tightest, all_solo_ok


class _Own(NamedTuple):
    """The pod's own terms on each node's GPUs, (n_nodes,), and its budget."""

    service_ms: FloatArray
    work_ms: FloatArray
    budget_ms: float  # deadline x (1 - margin); inf without a deadline

    @classmethod
    def of(cls, speed: FloatArray, model: LatencyModel, stream: Stream, margin: float) -> _Own:
        service = model.service_ms(stream) / speed
        budget = np.inf if stream.deadline_ms is None else stream.deadline_ms * (1.0 - margin)
        return cls(service, service * model.work_fraction(stream.workload_class), budget)


def _alone_ok(own: _Own, speed: FloatArray, model: LatencyModel, stream: Stream) -> BoolArray:
    """(n_nodes,): the pod alone on an idle GPU of the node keeps its own budget."""
    alone_w = np.where(own.work_ms / stream.period_ms < model.max_load, own.work_ms, np.inf)
    ok: BoolArray = percentile_ms(model, 95, own.service_ms, alone_w, speed) <= own.budget_ms
    return ok


def _feasible(residents: Residents, own: _Own, speed: FloatArray, model: LatencyModel, stream: Stream,
              gpu_exists: BoolArray) -> BoolArray:
    """Which GPUs keep every budget with the pod added, without solving for the busy period.

    Every p95 grows with the busy period's work W (slope > 0), so the pod fits on a GPU exactly when every budget
    holds on its solo term and W stays within the tightest budget's cap, W_cap = (budget - offset / speed) /
    slope. W is the fixed point of f(W) = sum_j b_j max(1, W / T_j), and f(W) - W decreases (busy_period.py), so
    W <= W_cap exactly when f(W_cap) <= W_cap: one weighted sum per GPU instead of a sort and a solve over its
    slots. A GPU where neither the pod nor any resident has a deadline constrains nothing, as in `_solved`.

    The residents' part of that sum depends on the pod only through its budget (its deadline class: a fleet has
    few), so it is kept per budget and refreshed on the rows charged since (_at_budget): a decision pays the slot
    axis only on the nodes that changed, and the pod's own term on every GPU."""
    tail = model.tail(95)
    period = stream.period_ms
    at = _at_budget(residents, own.budget_ms, speed, tail)
    demand = at.demand + own.work_ms[:, None] * np.maximum(1.0, at.cap / period)
    load = residents.load + (own.work_ms / period)[:, None]
    keeps = (residents.solo_ok & (tail.solo_ratio * own.service_ms <= own.budget_ms)[:, None]
             & (load < min(model.max_load, 1.0)) & (demand <= at.cap))
    feasible: BoolArray = gpu_exists & np.where(at.constrained, keeps, True)
    return feasible


@dataclass
class _AtBudget:
    """The residents' side of `_feasible` for pods of one budget, (n_nodes, max_gpus); rows as of node_version."""

    node_version: IntArray
    constrained: BoolArray  # the pod or a resident has a deadline
    cap: FloatArray  # the busy period's work the tightest budget allows (0 where unconstrained)
    demand: FloatArray  # sum over the residents of work x max(1, cap / period)


_AT_BUDGETS = 16
"""Budgets (deadline classes) whose residents' side is kept per GpuLoad; the least recently used goes first."""


def _at_budget(residents: Residents, budget_ms: float, speed: FloatArray, tail: Tail) -> _AtBudget:
    """The residents' side for pods of `budget_ms`, refreshed on the rows whose residents changed (all of them
    the first time)."""
    kept = residents.at_budget.pop(budget_ms, None)
    if kept is None:
        shape = residents.budget_ms.shape
        kept = _AtBudget(residents.node_version.copy(), np.zeros(shape, dtype=bool), np.zeros(shape),
                         np.zeros(shape))
        _refresh_at_budget(kept, residents, budget_ms, speed, tail, slice(None))
    else:
        rows = np.flatnonzero(kept.node_version != residents.node_version)
        if len(rows):
            kept.node_version[rows] = residents.node_version[rows]
            _refresh_at_budget(kept, residents, budget_ms, speed, tail, rows)
    residents.at_budget[budget_ms] = kept  # the most recently used last
    while len(residents.at_budget) > _AT_BUDGETS:
        residents.at_budget.pop(next(iter(residents.at_budget)))
    return kept


def _refresh_at_budget(kept: _AtBudget, residents: Residents, budget_ms: float, speed: FloatArray, tail: Tail,
                       rows: IntArray | slice) -> None:
    budget = np.minimum(residents.budget_ms[rows], budget_ms)
    constrained = np.isfinite(budget)
    cap = np.where(constrained, (budget - tail.offset_ms / speed[rows][:, None]) / tail.slope, 0.0)
    with np.errstate(invalid="ignore"):  # empty slots: 0 work x max(1, cap / inf)
        demand = (residents.work_ms[rows] * np.maximum(1.0, cap[..., None] / residents.period_ms[rows])).sum(axis=2)
    kept.constrained[rows], kept.cap[rows], kept.demand[rows] = constrained, cap, demand


def _solved(load: GpuLoad, model: LatencyModel, stream: Stream, gpu_exists: BoolArray, margin: float
            ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The prediction on every GPU with the pod added, the busy period solved: the p95 of the pod closest to (or
    past) its budget, that budget, and the GPU's load; what a refusal is explained with."""
    speed = load.speed[:, None]  # (n_nodes, 1)
    n_nodes, max_gpus = gpu_exists.shape
    new_service = np.full((n_nodes, max_gpus, 1), model.service_ms(stream)) / speed[..., None]
    service = np.concatenate([load.service_gpu_ms(model), new_service], axis=2)  # (n_nodes, max_gpus, S + 1)
    work = np.concatenate([load.work_gpu_ms(model), new_service * model.work_fraction(stream.workload_class)], axis=2)
    period = np.concatenate([load.period_ms(), np.full((n_nodes, max_gpus, 1), stream.period_ms)], axis=2)
    deadline = np.concatenate([load.deadline_ms, np.full((n_nodes, max_gpus, 1),
                                                         np.inf if stream.deadline_ms is None else stream.deadline_ms)],
                              axis=2)
    w, load_fraction = busy_period(work, period)  # (n_nodes, max_gpus)
    w = np.where(load_fraction >= model.max_load, np.inf, w)
    budget = deadline * (1.0 - margin)  # (n_nodes, max_gpus, S + 1)
    p95 = percentile_ms(model, 95, service, w[..., None], speed[..., None])
    occupied = np.concatenate([load.occupied, np.ones((n_nodes, max_gpus, 1), dtype=bool)], axis=2)
    with np.errstate(invalid="ignore"):  # inf - inf in slots without a deadline, masked out
        over = np.where(occupied & np.isfinite(budget), p95 - budget, -np.inf)  # (n_nodes, max_gpus, S + 1)
    worst = np.argmax(over, axis=2)[..., None]
    return (np.take_along_axis(p95, worst, axis=2)[..., 0], np.take_along_axis(budget, worst, axis=2)[..., 0],
            load_fraction)


def verdict(check: LatencyCheck) -> Verdict:
    """Nodes with at least one GPU where the pod and every co-runner keep their budgets, and why the others have
    none: the pod alone already too slow there (UNSCHEDULABLE_AND_UNRESOLVABLE), every GPU overloaded, or the GPU
    closest to its budget and by how much (UNSCHEDULABLE: moving co-runners away would help)."""
    passed: BoolArray = np.any(check.feasible, axis=1)

    def explain(rows: IntArray) -> Explained:
        alone = check.alone_ok[rows]
        statuses: list[Status] = []
        which = np.zeros(len(rows), dtype=np.int64)
        if not alone.all():
            statuses.append(Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (
                f"the pod alone on this node's GPU model predicts p95 above {100 * (1 - check.margin):.0f}% of its "
                "deadline",), NAME))  # rows[~alone] keep index 0
        crowded = rows[alone]
        budget, p95 = check.budget_ms[crowded], check.p95_ms[crowded]
        slack = np.where(np.isfinite(budget), p95 - budget, np.inf)
        gpu = np.argmin(slack, axis=1)  # (n_crowded,): the GPU closest to keeping every budget
        at = np.arange(len(crowded))
        keys = gpu, p95[at, gpu], budget[at, gpu], check.load_fraction[crowded, gpu]
        first, which_crowded = distinct(*keys)
        which[alone] = which_crowded + len(statuses)
        for best, p95_ms, budget_ms, load in zip(*(key[first].tolist() for key in keys), strict=True):
            if not math.isfinite(p95_ms):
                reason = f"every GPU would be overloaded (GPU {best}: load {load:.2f} with the pod)"
            else:
                reason = (f"no GPU keeps every pod within its deadline: best is GPU {best}, predicted p95 "
                          f"{p95_ms:.1f} ms > {budget_ms:.1f} ms (deadline less {100 * check.margin:.0f}%), "
                          f"load {load:.2f} with the pod")
            statuses.append(Status(Code.UNSCHEDULABLE, (reason,), NAME))
        return statuses, which

    return Verdict(NAME, passed, explain)


def mask(check: LatencyCheck) -> BoolArray:
    """Nodes with at least one GPU where the pod and every co-runner keep their budgets, (n_nodes,)."""
    return verdict(check).passed


def status(check: LatencyCheck, node: int) -> Status:
    return verdict(check).status(node)


__all__ = ["DEFAULT_MARGIN", "LatencyCheck", "NAME", "Residents", "mask", "pre_filter", "residents", "status",
           "verdict"]
