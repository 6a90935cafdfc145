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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuplace.core.arrays import BoolArray, FloatArray
from gpuplace.core.latency.busy_period import busy_period
from gpuplace.core.latency.model import LatencyModel, Stream
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


def predict(model: LatencyModel, streams: Sequence[Stream], *, speed: float = 1.0) -> GpuPrediction:
    """Percentiles of every stream when `streams` share one GPU of relative speed `speed`."""
    if not speed > 0:
        raise ValueError(f"speed must be > 0, got {speed}")
    if not streams:
        empty = np.zeros(0)
        return GpuPrediction(empty, empty, empty, 0.0, 0.0, np.zeros(0, dtype=bool))
    service, work, period = stream_arrays(model, streams)
    return _predict(model, service / speed, work / speed, period, speed)


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
        stream_w: FloatArray = np.where(behind, np.inf, float(kept_w))  # (n_streams,)
    else:
        stream_w = np.full(len(period_ms), w_ms)
    p95 = percentile_ms(model, 95, service_ms, stream_w, speed)
    p50 = np.minimum(percentile_ms(model, 50, service_ms, stream_w, speed), p95)  # ordered without raising p95:
    p99 = np.maximum(percentile_ms(model, 99, service_ms, stream_w, speed), p95)  # p95 is the fitted target
    return GpuPrediction(p50, p95, p99, load_fraction, w_ms, behind, round_ms)


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
