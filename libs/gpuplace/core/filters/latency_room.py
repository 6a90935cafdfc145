"""Room in time: which streams of an arriving mix a GPU could still take within every deadline (issue 42).

The latency filter (latency_fit.py) answers for one pod on every GPU. The fleet's measures ask the same question
for many pods at once -- the mix of streams that keeps arriving -- on some GPUs as they are: is this GPU's free
memory usable in time by anything, or is its time taken (sim/fleet/kpis.py)? The test is latency_fit's,
term for term (`_feasible`: every budget holds on its solo term, the load stays below the model's `max_load`, and
the busy period's equation at the tightest budget's cap holds), vectorised over a streams axis: (m streams, k
GPUs) instead of one pod on (n_nodes, max_gpus). The residents' terms are latency_fit's cached ones, so asking
costs no second pass over the slots.

GPUs are given as flat (rows, gpus) index pairs; `GpuTerms` holds their residents' terms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuplace.core.arrays import BoolArray, FloatArray, IntArray
from gpuplace.core.filters.latency_fit import DEFAULT_MARGIN, residents
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import LatencyModel, Stream


@dataclass(frozen=True)
class MixTerms:
    """The mix's streams as (m,) arrays, on the reference GPU; `budget_ms` is deadline x (1 - margin), inf
    without a deadline."""

    service_ms: FloatArray
    work_fraction: FloatArray
    period_ms: FloatArray
    budget_ms: FloatArray

    @classmethod
    def of(cls, model: LatencyModel, streams: Sequence[Stream], margin: float = DEFAULT_MARGIN) -> MixTerms:
        if not 0 <= margin < 1:
            raise ValueError(f"margin must be in [0, 1), got {margin}")
        return cls(np.array([model.service_ms(s) for s in streams], dtype=np.float64),
                   np.array([model.work_fraction(s.workload_class) for s in streams], dtype=np.float64),
                   np.array([s.period_ms for s in streams], dtype=np.float64),
                   np.array([np.inf if s.deadline_ms is None else s.deadline_ms * (1.0 - margin) for s in streams],
                            dtype=np.float64))

    def __len__(self) -> int:
        return len(self.service_ms)


@dataclass(frozen=True)
class GpuTerms:
    """What the pods on k GPUs ask of them: (k,) or (k, slots) arrays (latency_fit.Residents, flattened)."""

    speed: FloatArray
    work_ms: FloatArray  # per slot, on the GPU's own time scale; 0 in an empty slot
    period_ms: FloatArray  # per slot; inf in an empty slot
    load: FloatArray
    budget_ms: FloatArray  # the tightest resident budget; inf where none has a deadline
    solo_ok: BoolArray


def gpu_terms(load: GpuLoad, model: LatencyModel, rows: IntArray, gpus: IntArray,
              margin: float = DEFAULT_MARGIN) -> GpuTerms:
    """The residents' terms of the GPUs (rows[i], gpus[i]) of `load`."""
    cached = residents(load, model, margin)
    return GpuTerms(load.speed[rows], cached.work_ms[rows, gpus], cached.period_ms[rows, gpus],
                    cached.load[rows, gpus], cached.budget_ms[rows, gpus], cached.solo_ok[rows, gpus])


def fits(terms: GpuTerms, mix: MixTerms, model: LatencyModel) -> BoolArray:
    """(m, k): whether stream i of the mix, added to GPU j, keeps every budget there (latency_fit._feasible)."""
    tail = model.tail(95)
    if tail.slope <= 0:
        raise ValueError("latency_room needs a p95 that grows with the busy period (tail slope > 0)")
    speed = terms.speed[None, :]
    service = mix.service_ms[:, None] / speed  # (m, k)
    work = service * mix.work_fraction[:, None]
    budget = np.minimum(terms.budget_ms[None, :], mix.budget_ms[:, None])
    constrained = np.isfinite(budget)
    cap = np.where(constrained, (budget - tail.offset_ms / speed) / tail.slope, 0.0)
    with np.errstate(invalid="ignore"):  # empty slots: 0 work x max(1, cap / inf)
        demand = (terms.work_ms[None, :, :] * np.maximum(1.0, cap[..., None] / terms.period_ms[None, :, :])).sum(axis=2)
    demand += work * np.maximum(1.0, cap / mix.period_ms[:, None])
    load = terms.load[None, :] + work / mix.period_ms[:, None]
    keeps = (terms.solo_ok[None, :] & (tail.solo_ratio * service <= mix.budget_ms[:, None])
             & (load < min(model.max_load, 1.0)) & (demand <= cap))
    out: BoolArray = np.where(constrained, keeps, True)
    return out


__all__ = ["GpuTerms", "MixTerms", "fits", "gpu_terms"]
