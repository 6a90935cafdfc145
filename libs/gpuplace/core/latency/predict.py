"""Predicted latency percentiles of every stream on one GPU, and the share of frames past a deadline.

    p_q(i) = max(solo_ratio_q * s_i,  offset_q + slope_q * W) / speed

The first term is the stream alone: its own service time s_i with its own jitter. The second is the
GPU-bound regime: a frame released at the critical instant completes after the busy period's work W
(busy_period.py); slope_95 is 1 by construction of the fit (the work per frame is read off the p95
slope) and offset_q is the host-side time around it. On the H200 data the max of the two terms is
what the measurements show: ResNet-50 at 30 fps has p95 = 8.4 ms alone, 9.3 ms with 4 streams and
then grows by ~1.9 ms per stream to 32.7 ms at 16 -- one stream's GPU work each.
All times are on the reference GPU and divided by the GPU's relative speed (speed.py), the
host-side offset too: slower GPUs come with older hosts, and it errs on the slow side.
At load >= model.max_load the GPU is saturated (saturation.py): the streams whose period is shorter than the
GPU's round are overloaded (every percentile inf, `overloaded_streams`); for the others the overloaded streams
release a frame once a round, and a frame waits for the busy period of them all.

Mixed rates: the tails describe frames released at the critical instant, and a stream whose period T_i is
shorter than a co-runner's T_k has only the share c = T_i / T_k of its frames released together with that
co-runner (periods as multiples of one another, as camera rates are; otherwise the near-coincident releases
behave alike). Its q-quantile is then at least the (1 - (1 - q) / c)-quantile of the busy period W_k of the
streams with period <= T_k (P(L > x) >= c P(L_k > x)), read off the tails as share_over reads percentiles
(piecewise linear through p50, p95, p99), and p_q(i) is the largest of these over the levels T_k >= T_i. With
one rate (c = 1) this is p_q itself. On the H200, ResNet-18 at 60 fps beside ResNet-50 at 15 fps has a
quarter of its frames released with the ResNet-50 frames: its p95 (16.0 ms) is the 80th percentile of those
(16.0 ms), and the other three quarters stay under 7.1 ms.

An overloaded stream's latency has no bound in the long run, but over a stated window it is finite: its queue
grows by one frame's worth of lateness, R - T, every period (one frame served a round R, one released a period
T), so the frame released k periods into the overload completes k (R - T) after the first, which waits for one
frame of every stream (the critical instant). With `window_s` (start, end) -- the release times of the frames a
percentile is over, seconds from the start of the overload -- p_q = p_q(first frame) + (k0 + q (k1 - k0)) (R - T),
k0, k1 the window's ends in periods; the stream stays `overloaded_streams`. The H200 runs lasted 6 s with the
first 0.6 s dropped: 18 ResNet-50 at 30 fps (R 35.4 ms) measured p95 372 ms, 20 (R 39.3) 1051 ms, 24 (R 47.2)
2409 ms. Without a window (what admission and the simulators read) the percentiles are inf.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from gpuplace.core.arrays import BoolArray, FloatArray
from gpuplace.core.latency.busy_period import busy_period
from gpuplace.core.latency.model import QUANTILES, LatencyModel, Stream
from gpuplace.core.latency.saturation import overloaded, saturation_round


@dataclass(frozen=True, eq=False)
class GpuPrediction:
    """Per-stream percentiles (n_streams,) in ms on the GPU, and the GPU's load and busy-period work.

    `busy_work_ms` is inf once the GPU is saturated (its busy period never ends); `overloaded_streams` (n_streams,)
    says which streams it can no longer keep up with then (saturation.py), and `round_ms` is its round (0 below
    saturation).
    """

    p50_ms: FloatArray
    p95_ms: FloatArray
    p99_ms: FloatArray
    load_fraction: float
    busy_work_ms: float
    overloaded_streams: BoolArray
    round_ms: float = 0.0

    @property
    def overloaded(self) -> bool:
        """The GPU is saturated: at least one of its streams is overloaded."""
        return bool(self.overloaded_streams.any())

    def percentile_ms(self, q: int) -> FloatArray:
        return {50: self.p50_ms, 95: self.p95_ms, 99: self.p99_ms}[q]


def stream_arrays(model: LatencyModel, streams: Sequence[Stream]) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Reference-GPU service time, GPU work per frame, and frame period (ms) of each stream, (n_streams,) each."""
    service = np.array([model.service_ms(s) for s in streams], dtype=np.float64)
    fraction = np.array([model.work_fraction(s.workload_class) for s in streams], dtype=np.float64)
    period = np.array([s.period_ms for s in streams], dtype=np.float64)
    return service, fraction * service, period


def predict(model: LatencyModel, streams: Sequence[Stream], *, speed: float = 1.0,
            window_s: tuple[float, float] | None = None) -> GpuPrediction:
    """Percentiles of every stream when `streams` share one GPU of relative speed `speed`; an overloaded stream's
    over the frames released within `window_s` of the overload's start (see the module), inf without it."""
    if not speed > 0:
        raise ValueError(f"speed must be > 0, got {speed}")
    if window_s is not None and not 0 <= window_s[0] <= window_s[1]:
        raise ValueError(f"window_s must be (start, end) with 0 <= start <= end, got {window_s}")
    if not streams:
        empty = np.zeros(0)
        return GpuPrediction(empty, empty, empty, 0.0, 0.0, np.zeros(0, dtype=bool))
    service, work, period = stream_arrays(model, streams)
    prediction = _predict(model, service / speed, work / speed, period, speed)
    if window_s is None or not prediction.overloaded:
        return prediction
    return _backlog(model, prediction, service / speed, work / speed, period, speed, window_s)


def _backlog(model: LatencyModel, prediction: GpuPrediction, service_ms: FloatArray, work_ms: FloatArray,
             period_ms: FloatArray, speed: float, window_s: tuple[float, float]) -> GpuPrediction:
    """The overloaded streams' percentiles over the window (module docstring); the others as predicted."""
    behind = prediction.overloaded_streams
    growth = np.maximum(prediction.round_ms - period_ms, 0.0)  # lateness added per period, (n_streams,)
    k0, k1 = 1000.0 * window_s[0] / period_ms, 1000.0 * window_s[1] / period_ms  # (n_streams,) each
    first_w = float(work_ms.sum())  # the first frame waits for one frame of every stream
    out = []
    for q in QUANTILES:
        backlog = percentile_ms(model, q, service_ms, first_w, speed) + (k0 + q / 100.0 * (k1 - k0)) * growth
        out.append(np.where(behind, backlog, prediction.percentile_ms(q)))
    p95 = out[1]
    return replace(prediction, p50_ms=np.minimum(out[0], p95), p95_ms=p95, p99_ms=np.maximum(out[2], p95))


def _predict(model: LatencyModel, service_ms: FloatArray, work_ms: FloatArray, period_ms: FloatArray,
             speed: float) -> GpuPrediction:
    """Assumes validated arrays on the GPU's own time scale (see predict())."""
    w, load = busy_period(work_ms, period_ms)
    w_ms, load_fraction = float(w), float(load)
    round_ms, behind = 0.0, np.zeros(len(period_ms), dtype=bool)  # (n_streams,)
    if load_fraction >= model.max_load:
        round_ms = float(saturation_round(work_ms, period_ms, model.max_load))
        behind = overloaded(period_ms, round_ms)
        if not behind.any():  # rounding left the root unsolved: no stream is known to keep up
            behind[:] = True
        # the streams that keep up wait behind the overloaded ones, served once a round (their period is the round)
        kept_w, _ = busy_period(work_ms, np.where(behind, round_ms, period_ms))
        w_ms = np.inf
        behind |= not np.isfinite(kept_w)  # at full capacity the busy period of those keeping up may not end either
        period_ms = np.where(behind, round_ms, period_ms)
    levels_ms = np.unique(period_ms)  # (n_levels,): the distinct periods, each a critical instant of its streams
    level_w, _ = busy_period(np.where(period_ms[None, :] <= levels_ms[:, None], work_ms[None, :], 0.0),
                             np.broadcast_to(period_ms, (len(levels_ms), len(period_ms))))  # (n_levels,)
    share = period_ms[:, None] / levels_ms[None, :]  # (n_streams, n_levels): frames released with level k
    none = np.zeros(len(levels_ms))
    knots = [percentile_ms(model, q, none, level_w, speed) for q in (50, 95, 99)]  # GPU-bound term, (n_levels,) each
    knots = [np.minimum(knots[0], knots[1]), knots[1], np.maximum(knots[2], knots[1])]  # p95 is the fitted target
    out = []
    for q, ratio in ((50, model.p50.solo_ratio), (95, model.p95.solo_ratio), (99, model.p99.solo_ratio)):
        with np.errstate(divide="ignore", invalid="ignore"):
            x = 1.0 - (1.0 - q / 100.0) / share  # (n_streams, n_levels)
        at = np.where((share <= 1.0) & (x >= 0.0), _quantile(x, *knots), -np.inf).max(axis=1)  # (n_streams,)
        out.append(np.where(behind, np.inf, np.maximum(ratio * service_ms, at)))
    p95 = out[1]
    p50 = np.minimum(out[0], p95)  # ordered without raising p95: p95 is the fitted target
    p99 = np.maximum(out[2], p95)
    return GpuPrediction(p50, p95, p99, load_fraction, w_ms, behind, round_ms)


def _quantile(x: FloatArray, p50: FloatArray, p95: FloatArray, p99: FloatArray) -> FloatArray:
    """The x-quantile (x (n_streams, n_levels) in [0, 0.99]) of the critical-instant latency at each level, read
    piecewise linear through 0 ms at 0 and the levels' p50 <= p95 <= p99 (n_levels,), as share_over reads them."""
    with np.errstate(invalid="ignore"):  # inf - inf at a level whose busy period has no end: inf there
        low = x / 0.5 * p50
        mid = p50 + (x - 0.5) / 0.45 * (p95 - p50)
        high = p95 + (x - 0.95) / 0.04 * (p99 - p95)
        out: FloatArray = np.where(x <= 0.5, low, np.where(x <= 0.95, mid, high))
    return np.where(np.isinf(p95) & (x > 0), np.inf, out)


def percentile_ms(model: LatencyModel, q: int, service_ms: FloatArray, busy_work_ms: npt.ArrayLike,
                  speed: float | FloatArray) -> FloatArray:
    """p_q from service times and the busy-period work, both already on the GPU's time scale."""
    tail = model.tail(q)
    gpu_bound = tail.offset_ms / speed + tail.slope * np.asarray(busy_work_ms, dtype=np.float64)
    return np.maximum(tail.solo_ratio * np.asarray(service_ms, dtype=np.float64), gpu_bound)


def share_over(deadline_ms: npt.ArrayLike, p50_ms: npt.ArrayLike, p95_ms: npt.ArrayLike,
               p99_ms: npt.ArrayLike) -> FloatArray:
    """Share of frames later than the deadline, reading the percentiles as a piecewise-linear
    quantile function: 0 ms at q=0, p50, p95, p99, and a maximum of p99 + (p99 - p95) at q=1 (in the
    data the maximum sits that close to p99). Unbounded latency (inf percentiles) misses every frame.
    Broadcasts over its arguments.
    """
    d, p50, p95, p99 = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in
                                             (deadline_ms, p50_ms, p95_ms, p99_ms)))
    with np.errstate(invalid="ignore"):  # inf - inf where latency is unbounded; such rows miss every frame
        p100 = p99 + np.maximum(p99 - p95, 0.0)
    knots_ms = np.stack([np.zeros_like(p50), p50, p95, p99, p100], axis=-1)  # (..., 5)
    knots_ms = np.maximum.accumulate(knots_ms, axis=-1)
    below = np.array([0.0, 0.5, 0.95, 0.99, 1.0])
    out = np.empty(d.shape)
    flat_d, flat_k, flat_out = d.reshape(-1), knots_ms.reshape(-1, 5), out.reshape(-1)
    for i in range(len(flat_d)):
        if not np.isfinite(flat_k[i]).all():
            flat_out[i] = 1.0
        else:
            flat_out[i] = 1.0 - np.interp(flat_d[i], flat_k[i], below)
    return out


__all__ = ["GpuPrediction", "percentile_ms", "predict", "share_over", "stream_arrays"]
