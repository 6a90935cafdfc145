"""Offline fit of the latency model on per-config observations (frames.py -> model.py).

Steps, all on the measured GPU's time scale, converted to the reference GPU at the end:
1. Solo floor. Each class's service time s is the median p50 of its configs with the fewest
   streams (alone, when the data has it); solo_ratio_q is the largest p_q / s among those configs.
2. GPU-bound rows: configs where a class's observed p95 is clearly (5%) above its solo floor.
3. GPU work per frame b_k of each class and the p95 offset, by least squares of
   p95 = offset + sum_k m_k b_k over the GPU-bound rows, m_k being the frames of class k in the busy
   period (its streams x max(1, W / T)); m depends on b for mixed rates, so this is iterated.
   slope_95 is 1 by this construction, and sum_k fps_k b_k is then the GPU's load: 0.94 for 16
   ResNet-50 streams at 30 fps, where NVML reports 93.9% utilisation.
4. Per percentile q: offset_q and slope_q by least squares of p_q on W, then offset_q is raised by
   the `safety_quantile` of the residuals, so predictions sit at or slightly above what was seen.
Overloaded configs (frames.py) are left out: their latency only says "load >= 1".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from gpuplace.core.latency.busy_period import busy_period
from gpuplace.core.latency.frames import ConfigStats, FrameTable, StreamMix, summarise
from gpuplace.core.latency.model import DEFAULT_MODEL, QUANTILES, ClassProfile, LatencyModel, Tail

GPU_BOUND_RATIO = 1.05
"""A row is GPU-bound when its p95 exceeds the class's solo p95 by this factor."""
_ITERATIONS = 6
_MIN_WORK_FRACTION = 0.01


def fit(table: FrameTable, *, gpu_speed: float, safety_quantile: float = 0.9,
        priors: LatencyModel = DEFAULT_MODEL) -> LatencyModel:
    """Fit on a frame table measured on a GPU of relative speed `gpu_speed` (see the module docstring)."""
    return fit_stats(summarise(table), gpu_speed=gpu_speed, safety_quantile=safety_quantile, priors=priors)


def fit_stats(stats: Sequence[ConfigStats], *, gpu_speed: float, safety_quantile: float = 0.9,
              priors: LatencyModel = DEFAULT_MODEL) -> LatencyModel:
    """Fit on per-config observations; `priors` gives the priors and the tails used where data is short."""
    if not gpu_speed > 0:
        raise ValueError(f"gpu_speed must be > 0, got {gpu_speed}")
    if not 0 <= safety_quantile <= 1:
        raise ValueError(f"safety_quantile must be in [0, 1], got {safety_quantile}")
    rows = [s for s in stats if not s.overloaded]
    if not rows:
        raise ValueError("no config that is not overloaded to fit on")
    return _fit(rows, gpu_speed, safety_quantile, priors)


def _fit(rows: list[ConfigStats], speed: float, safety_quantile: float, priors: LatencyModel) -> LatencyModel:
    """Assumes validated inputs (see fit_stats())."""
    service, solo_ratio, service_frames = _solo_floor(rows)
    bound = [r for r in rows if r.p95_ms > GPU_BOUND_RATIO * solo_ratio[95] * service[r.workload_class]]
    work, busy = _gpu_work(bound, service)
    tails = {q: _tail(q, bound, busy, solo_ratio[q], safety_quantile, priors.tail(q)) for q in QUANTILES}
    classes = {}
    for cls, s in service.items():
        fraction = priors.prior_work_fraction if cls not in work else work[cls] / s
        fraction = float(np.clip(fraction, _MIN_WORK_FRACTION, 1.0))
        work_frames = sum(r.frames for r in bound if r.workload_class == cls)
        classes[cls] = ClassProfile(s * speed, fraction, float(service_frames[cls]), float(work_frames))
    scaled = {q: replace(t, offset_ms=t.offset_ms * speed) for q, t in tails.items()}
    return replace(priors, p50=scaled[50], p95=scaled[95], p99=scaled[99], classes=classes)


def _solo_floor(rows: list[ConfigStats]) -> tuple[dict[str, float], dict[int, float], dict[str, int]]:
    service, frames = {}, {}
    ratio = dict.fromkeys(QUANTILES, 1.0)
    for cls in dict.fromkeys(r.workload_class for r in rows):
        mine = [r for r in rows if r.workload_class == cls]
        fewest = min(r.streams for r in mine)
        floor = [r for r in mine if r.streams == fewest]
        service[cls] = float(np.median([r.p50_ms for r in floor]))
        frames[cls] = sum(r.frames for r in floor)
        for q in QUANTILES:
            ratio[q] = max(ratio[q], max(r.percentile_ms(q) for r in floor) / service[cls])
    return service, ratio, frames


def _gpu_work(bound: list[ConfigStats], service: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """GPU work per frame of each class seen GPU-bound, and the busy-period work W of each config."""
    classes = sorted({cls for r in bound for cls, _, _ in r.mix} & set(service))
    if len(bound) < len(classes) + 1 or not classes:
        return {}, {}
    work = {cls: 0.1 * service[cls] for cls in classes}
    for _ in range(_ITERATIONS):
        busy = {r.config: _busy_ms(r.mix, work) for r in bound}
        design = np.array([[1.0, *_frames_in_busy_period(r.mix, classes, busy[r.config])] for r in bound])
        y = np.array([r.p95_ms for r in bound])  # (n_rows,)
        solution, *_ = np.linalg.lstsq(design, y, rcond=None)
        work = {cls: float(np.clip(solution[1 + i], _MIN_WORK_FRACTION * service[cls], service[cls]))
                for i, cls in enumerate(classes)}
    return work, {r.config: _busy_ms(r.mix, work) for r in bound}


def _busy_ms(mix: StreamMix, work: dict[str, float]) -> float:
    b = np.array([work.get(cls, 0.0) * n for cls, _, n in mix])
    t = np.array([1000.0 / fps for _, fps, _ in mix])
    w, _ = busy_period(b, t)
    return float(w)


def _frames_in_busy_period(mix: StreamMix, classes: list[str], busy_ms: float) -> list[float]:
    frames = dict.fromkeys(classes, 0.0)
    for cls, fps, n in mix:
        if cls in frames:
            frames[cls] += n * max(1.0, busy_ms * fps / 1000.0) if np.isfinite(busy_ms) else n
    return [frames[c] for c in classes]


def _tail(q: int, bound: list[ConfigStats], busy: dict[str, float], solo_ratio: float,
          safety_quantile: float, prior: Tail) -> Tail:
    usable = [r for r in bound if np.isfinite(busy.get(r.config, np.inf))]
    if len(usable) < 2:
        return replace(prior, solo_ratio=max(solo_ratio, prior.solo_ratio))
    w = np.array([busy[r.config] for r in usable])  # (n_rows,)
    y = np.array([r.percentile_ms(q) for r in usable])  # (n_rows,)
    (offset, slope), *_ = np.linalg.lstsq(np.stack([np.ones_like(w), w], axis=1), y, rcond=None)
    slope = max(float(slope), 0.0)
    residual = y - (offset + slope * w)
    offset = float(offset) + max(0.0, float(np.quantile(residual, safety_quantile)))
    return Tail(solo_ratio=solo_ratio, offset_ms=max(offset, 0.0), slope=slope)


__all__ = ["GPU_BOUND_RATIO", "fit", "fit_stats"]
