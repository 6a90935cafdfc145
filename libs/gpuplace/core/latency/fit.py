"""Offline fit of the latency model on per-config observations (frames.py -> model.py).

Steps, all on the measured GPU's time scale, converted to the reference GPU at the end:
1. Solo floor. Each class's service time s is the median p50 of its configs with the fewest
   streams (alone, when the data has it); solo_ratio_q is the largest p_q / s among those configs. Where a
   class never ran alone, those configs are read by the first-served frame of each release (frames.py), which
   waits behind none of its kind: ResNet-18 is 3.72 / 4.06 ms (p50 / p95) alone, and the first-served frames of
   4 ResNet-18 streams 3.13 / 3.89 ms, where all their frames are 4.15 / 4.72 ms.
2. GPU-bound rows: configs where a class's observed p95 is clearly (5%) above its solo floor. Each is read by
   its frames released at the critical instant (frames.py): a row whose period is shorter than a co-runner's has
   only part of its frames released with it, and its p95 over all frames is a lower quantile of that busy
   period (predict.py): ResNet-18 at 60 fps beside ResNet-50 at 15 fps has p95 16.0 ms over all its frames and
   17.5 ms over the quarter released with the ResNet-50 frames.
3. GPU work per frame b_k of each class and the p95 offset, by least squares of
   p95 = offset + sum_k m_k b_k over the GPU-bound rows, m_k being the frames of class k in the busy
   period (its streams x max(1, W / T)); m depends on b for mixed rates, so this is iterated.
   slope_95 is 1 by this construction, and sum_k fps_k b_k is then the GPU's load: 0.94 for 16
   ResNet-50 streams at 30 fps, where NVML reports 93.9% utilisation.
4. Per percentile q: offset_q and slope_q by least squares of p_q on W, then offset_q is raised by
   the `safety_quantile` of the residuals, so predictions sit at or slightly above what was seen.
5. Saturated configs (a row observed overloaded, frames.py): their latency only says "load >= capacity", but
   how often the GPU serves each stream that is behind is its round (saturation.py), which gives one more
   equation on the work per frame: 18, 20 and 24 ResNet-50 streams at 30 fps are served every 35.4, 39.3 and
   47.2 ms, 1.97 ms per frame each. Their rows that kept up are GPU-bound rows whose busy period counts the
   streams behind once a round. What the GPU can give (the model's max_load) is the least share of its time
   that the fitted work fills in a saturated config's round (safe side), at most the prior's 1: on both H200
   sessions every round is filled to 1.00, and leaving one config out moves it between 0.99 and 1.
6. A class seen only alone (its solo configs) is predicted from that solo profile and the GPU's load, not
   refused: its GPU work per frame is the larger (safe side) of two estimates, its service time times the
   highest work fraction of the classes seen co-located, and its solo GPU busy time (utilisation x frame
   period, when the solo configs' utilisation is given) plus `switch_ms`, the most that sharing added to a
   co-located class's solo busy time (on the H200, ResNet-50 is busy 1.79 ms per frame alone and does 1.97 ms
   of work co-located, ResNet-18 0.63 and 0.87: switch_ms 0.24 ms). Latency windows then refine it online (update.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpuplace.core.latency.busy_period import busy_period
from gpuplace.core.latency.frames import ConfigStats, FrameTable, StreamMix, summarise
from gpuplace.core.latency.model import DEFAULT_MODEL, QUANTILES, ClassProfile, LatencyModel, Tail

GPU_BOUND_RATIO = 1.05
"""A row is GPU-bound when its p95 exceeds the class's solo p95 by this factor."""
_ITERATIONS = 6
_MIN_WORK_FRACTION = 0.01


def fit(table: FrameTable, *, gpu_speed: float, safety_quantile: float = 0.9,
        priors: LatencyModel = DEFAULT_MODEL, utilisation: Mapping[str, float] | None = None) -> LatencyModel:
    """Fit on a frame table measured on a GPU of relative speed `gpu_speed` (see the module docstring)."""
    return fit_stats(summarise(table), gpu_speed=gpu_speed, safety_quantile=safety_quantile, priors=priors,
                     utilisation=utilisation)


def fit_stats(stats: Sequence[ConfigStats], *, gpu_speed: float, safety_quantile: float = 0.9,
              priors: LatencyModel = DEFAULT_MODEL, utilisation: Mapping[str, float] | None = None) -> LatencyModel:
    """Fit on per-config observations; `priors` gives the priors and the tails used where data is short.

    `utilisation` (config -> mean GPU utilisation in [0, 1], as NVML reports it) gives the solo configs' GPU busy
    time per frame (step 6); configs without it are fitted from latency alone."""
    if not gpu_speed > 0:
        raise ValueError(f"gpu_speed must be > 0, got {gpu_speed}")
    if not 0 <= safety_quantile <= 1:
        raise ValueError(f"safety_quantile must be in [0, 1], got {safety_quantile}")
    if utilisation is not None and not all(0 <= u <= 1 for u in utilisation.values()):
        raise ValueError("utilisation must be fractions in [0, 1]")
    rows = [s for s in stats if not s.overloaded]
    if not rows:
        raise ValueError("no config that is not overloaded to fit on")
    return _fit(rows, _saturated(stats), gpu_speed, safety_quantile, priors, utilisation or {})


def _fit(rows: list[ConfigStats], saturated: dict[str, _Saturated], speed: float, safety_quantile: float,
         priors: LatencyModel, utilisation: Mapping[str, float]) -> LatencyModel:
    """Assumes validated inputs (see fit_stats())."""
    service, solo_ratio, service_frames = _solo_floor(rows)
    bound = [r for r in rows
             if r.critical_percentile_ms(95) > GPU_BOUND_RATIO * solo_ratio[95] * service[r.workload_class]]
    work, busy = _gpu_work(bound, saturated, service, priors.max_load)
    tails = {q: _tail(q, bound, busy, solo_ratio[q], safety_quantile, priors.tail(q)) for q in QUANTILES}
    solo_gpu = _solo_gpu_ms(rows, utilisation)
    switch = max([0.0, *(work[c] - solo_gpu[c] for c in work if c in solo_gpu)])
    fitted = [work[cls] / service[cls] for cls in work]
    unseen_fraction = float(np.clip(max(fitted), _MIN_WORK_FRACTION, 1.0)) if fitted else priors.prior_work_fraction
    classes = {}
    for cls, s in service.items():
        if cls in work:
            fraction = work[cls] / s
        else:  # seen only alone: the safer of the co-located classes' share and its own solo GPU time (step 6)
            fraction = max(unseen_fraction, (solo_gpu[cls] + switch) / s if cls in solo_gpu else 0.0)
        fraction = float(np.clip(fraction, _MIN_WORK_FRACTION, 1.0))
        work_frames = sum(r.frames for r in bound if r.workload_class == cls)
        gpu_ms = solo_gpu[cls] * speed if cls in solo_gpu else None
        classes[cls] = ClassProfile(s * speed, fraction, float(service_frames[cls]), float(work_frames), gpu_ms)
    scaled = {q: replace(t, offset_ms=t.offset_ms * speed) for q, t in tails.items()}
    return replace(priors, p50=scaled[50], p95=scaled[95], p99=scaled[99], classes=classes,
                   prior_work_fraction=unseen_fraction, max_load=_capacity(saturated, work, priors.max_load),
                   switch_ms=switch * speed)


def _solo_gpu_ms(rows: list[ConfigStats], utilisation: Mapping[str, float]) -> dict[str, float]:
    """GPU busy time per frame of each class alone (utilisation x period), the median over its solo configs."""
    alone: dict[str, list[float]] = {}
    for r in rows:
        if r.streams == 1 and r.config in utilisation:
            alone.setdefault(r.workload_class, []).append(utilisation[r.config] * 1000.0 / r.frame_rate_hz)
    return {cls: float(np.median(v)) for cls, v in alone.items()}


def _capacity(saturated: dict[str, _Saturated], work: dict[str, float], prior: float) -> float:
    """What the GPU can give, in the fitted work's units: the least share of its time that the fitted work of a
    saturated config's round fills, sum_k b_k sum min(1, R / T) / R (safe side: the lowest), at most `prior`."""
    shares = [sum(work[cls] * n * min(1.0, sat.round_ms * fps / 1000.0) for cls, fps, n in sat.mix) / sat.round_ms
              for sat in saturated.values() if all(cls in work for cls, _, _ in sat.mix)]
    return float(min([prior, *shares]))


@dataclass(frozen=True)
class _Saturated:
    """A config where some streams could not keep up: its mix, which kinds were behind, and the round (ms)."""

    mix: StreamMix
    behind: frozenset[tuple[str, float]]
    round_ms: float


def _saturated(stats: Sequence[ConfigStats]) -> dict[str, _Saturated]:
    """Configs with an overloaded row; the round is the served interval of the streams behind (frames.py)."""
    out = {}
    for config in dict.fromkeys(s.config for s in stats if s.overloaded):
        behind = [s for s in stats if s.config == config and s.overloaded]
        streams = np.array([n for s in behind for c, f, n in s.mix if (c, f) == (s.workload_class, s.frame_rate_hz)])
        round_ms = float(np.average([s.served_interval_ms for s in behind], weights=streams))
        out[config] = _Saturated(behind[0].mix, frozenset((s.workload_class, s.frame_rate_hz) for s in behind),
                                round_ms)
    return out


def _solo_floor(rows: list[ConfigStats]) -> tuple[dict[str, float], dict[int, float], dict[str, int]]:
    service, frames = {}, {}
    ratio = dict.fromkeys(QUANTILES, 1.0)
    for cls in dict.fromkeys(r.workload_class for r in rows):
        mine = [r for r in rows if r.workload_class == cls]
        fewest = min(r.streams for r in mine)
        floor = [r for r in mine if r.streams == fewest]
        service[cls] = float(np.median([r.first_percentile_ms(50) for r in floor]))
        frames[cls] = sum(r.frames for r in floor)
        for q in QUANTILES:
            ratio[q] = max(ratio[q], max(r.first_percentile_ms(q) for r in floor) / service[cls])
    return service, ratio, frames


def _gpu_work(bound: list[ConfigStats], saturated: dict[str, _Saturated], service: dict[str, float],
              capacity: float) -> tuple[dict[str, float], dict[str, float]]:
    """GPU work per frame of each class seen GPU-bound or saturated, and the busy-period work W of each bound
    config (for a saturated one: what its streams that kept up waited for, saturation.py).

    Least squares over two kinds of equations: p95 = offset + sum_k m_k b_k for every bound row, and the
    round of every saturated config, capacity R = sum_k b_k sum_(class-k streams) min(1, R / T) (no offset:
    it is GPU time only)."""
    classes = sorted(({cls for r in bound for cls, _, _ in r.mix}
                      | {cls for sat in saturated.values() for cls, _, _ in sat.mix}) & set(service))
    if len(bound) + len(saturated) < len(classes) + 1 or not classes:
        return {}, {}
    behind = {config: (sat.behind, sat.round_ms) for config, sat in saturated.items()}
    rounds = [[0.0, *_frames_in_round(sat, classes)] for sat in saturated.values()]
    y = np.array([r.critical_percentile_ms(95) for r in bound]
                 + [capacity * sat.round_ms for sat in saturated.values()])  # (n_rows,)
    work = {cls: 0.1 * service[cls] for cls in classes}
    for _ in range(_ITERATIONS):
        busy = {r.config: _busy_ms(r.mix, work, behind.get(r.config, _KEEPS_UP)) for r in bound}
        design = np.array([[1.0, *_frames_in_busy_period(r.mix, classes, busy[r.config],
                                                          behind.get(r.config, _KEEPS_UP))] for r in bound]
                          + rounds).reshape(len(y), 1 + len(classes))
        solution, *_ = np.linalg.lstsq(design, y, rcond=None)
        work = {cls: float(np.clip(solution[1 + i], _MIN_WORK_FRACTION * service[cls], service[cls]))
                for i, cls in enumerate(classes)}
    return work, {r.config: _busy_ms(r.mix, work, behind.get(r.config, _KEEPS_UP)) for r in bound}


_Behind = tuple[frozenset[tuple[str, float]], float]
"""The kinds (class, fps) of a config's streams that were behind, and the round (ms) they were served at."""
_KEEPS_UP: _Behind = (frozenset(), 0.0)


def _periods_ms(mix: StreamMix, behind: _Behind) -> list[float]:
    """Each kind's period, or the round for a kind behind: it is served once a round (saturation.py)."""
    kinds, round_ms = behind
    return [round_ms if (cls, fps) in kinds else 1000.0 / fps for cls, fps, _ in mix]


def _busy_ms(mix: StreamMix, work: dict[str, float], behind: _Behind) -> float:
    """W of the streams that keep up, with the streams behind released once a round."""
    b = np.array([work.get(cls, 0.0) * n for cls, _, n in mix])
    w, _ = busy_period(b, np.array(_periods_ms(mix, behind)))
    return float(w)


def _frames_in_busy_period(mix: StreamMix, classes: list[str], busy_ms: float, behind: _Behind) -> list[float]:
    frames = dict.fromkeys(classes, 0.0)
    for (cls, _, n), period in zip(mix, _periods_ms(mix, behind), strict=True):
        if cls in frames:
            frames[cls] += n * max(1.0, busy_ms / period) if np.isfinite(busy_ms) else n
    return [frames[c] for c in classes]


def _frames_in_round(sat: _Saturated, classes: list[str]) -> list[float]:
    frames = dict.fromkeys(classes, 0.0)
    for cls, fps, n in sat.mix:
        if cls in frames:
            frames[cls] += n * min(1.0, sat.round_ms * fps / 1000.0)
    return [frames[c] for c in classes]


def _tail(q: int, bound: list[ConfigStats], busy: dict[str, float], solo_ratio: float,
          safety_quantile: float, prior: Tail) -> Tail:
    usable = [r for r in bound if np.isfinite(busy.get(r.config, np.inf))]
    if len(usable) < 2:
        return replace(prior, solo_ratio=max(solo_ratio, prior.solo_ratio))
    w = np.array([busy[r.config] for r in usable])  # (n_rows,)
    y = np.array([r.critical_percentile_ms(q) for r in usable])  # (n_rows,)
    (offset, slope), *_ = np.linalg.lstsq(np.stack([np.ones_like(w), w], axis=1), y, rcond=None)
    slope = max(float(slope), 0.0)
    residual = y - (offset + slope * w)
    offset = float(offset) + max(0.0, float(np.quantile(residual, safety_quantile)))
    return Tail(solo_ratio=solo_ratio, offset_ms=max(offset, 0.0), slope=slope)


__all__ = ["GPU_BOUND_RATIO", "fit", "fit_stats"]
