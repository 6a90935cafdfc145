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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuplace.core.arrays import BoolArray, FloatArray, IntArray
from gpuplace.core.framework.interface import Code, Status
from gpuplace.core.framework.verdicts import Explained, Verdict, distinct
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.busy_period import busy_period
from gpuplace.core.latency.model import LatencyModel, Stream
from gpuplace.core.latency.predict import percentile_ms

NAME = "LatencyFit"
DEFAULT_MARGIN = 0.1
"""Share of the deadline kept in reserve: admission asks p95 <= 90% of the deadline."""


@dataclass(frozen=True, eq=False)
class LatencyCheck:
    """One pod's verdict on every GPU with it added; arrays are (n_nodes, max_gpus) unless noted."""

    feasible: BoolArray
    p95_ms: FloatArray
    """Worst predicted p95 relative to its budget: the p95 of the pod closest to (or past) its budget."""
    budget_ms: FloatArray
    """That pod's deadline x (1 - margin); inf where no pod on the GPU has a deadline."""
    load_fraction: FloatArray
    alone_ok: BoolArray
    """(n_nodes,): the pod alone on one of the node's GPUs keeps its own budget (else no move helps)."""
    margin: float


def pre_filter(load: GpuLoad, model: LatencyModel, stream: Stream, gpu_exists: BoolArray, *,
               margin: float = DEFAULT_MARGIN) -> LatencyCheck:
    """The pod's verdict on every GPU; `gpu_exists` is the snapshot's (n_nodes, max_gpus) mask."""
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    if gpu_exists.shape != load.frame_rate_hz.shape[:2]:
        raise ValueError(f"gpu_exists {gpu_exists.shape} does not match GpuLoad {load.frame_rate_hz.shape[:2]}")
    return _pre_filter(load, model, stream, gpu_exists, margin)


def _pre_filter(load: GpuLoad, model: LatencyModel, stream: Stream, gpu_exists: BoolArray,
                margin: float) -> LatencyCheck:
    """Assumes validated inputs (see pre_filter())."""
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
    speed3 = speed[..., None]
    p95 = percentile_ms(model, 95, service, w[..., None], speed3)
    occupied = np.concatenate([load.occupied, np.ones((n_nodes, max_gpus, 1), dtype=bool)], axis=2)
    with np.errstate(invalid="ignore"):  # inf - inf in slots without a deadline, masked out
        over = np.where(occupied & np.isfinite(budget), p95 - budget, -np.inf)  # (n_nodes, max_gpus, S + 1)
    worst = np.argmax(over, axis=2)[..., None]
    feasible = gpu_exists & (np.take_along_axis(over, worst, axis=2)[..., 0] <= 0)
    own_service = new_service[:, 0, 0]  # (n_nodes,)
    own_work = own_service * model.work_fraction(stream.workload_class)
    alone_w = np.where(own_work / stream.period_ms < model.max_load, own_work, np.inf)  # alone on an idle GPU
    alone = percentile_ms(model, 95, own_service, alone_w, speed[:, 0])
    alone_ok = alone <= budget[:, 0, -1]  # (n_nodes,)
    return LatencyCheck(feasible, np.take_along_axis(p95, worst, axis=2)[..., 0],
                        np.take_along_axis(budget, worst, axis=2)[..., 0], load_fraction, alone_ok, margin)


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


__all__ = ["DEFAULT_MARGIN", "LatencyCheck", "NAME", "mask", "pre_filter", "status", "verdict"]
