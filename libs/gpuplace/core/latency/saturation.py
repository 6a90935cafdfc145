"""Past saturation: which streams a time-sliced GPU can no longer keep up with, and what the others wait for.

Below saturation every stream is served at its frame rate and a frame waits for the busy period it is
released into (busy_period.py). When the GPU time the streams ask for, the load rho = sum_j b_j / T_j (b_j: GPU
work per frame, T_j: frame period), reaches what the GPU can give (`capacity`, the model's max_load), the GPU
time-slices between the contexts that have work, in turn: a stream whose frames are late always has one waiting,
and gets one frame per *round*, however short its period. The round R is then the time the GPU takes to serve
one frame of every stream that is behind and the frames the others release meanwhile:

    capacity * R = sum_j b_j * min(1, R / T_j)

A stream whose period is shorter than the round is *overloaded*: it asks for a frame more often than it gets
one, its queue grows for as long as it runs and its latency has no bound. The others keep up: a frame of theirs
waits behind one frame of each overloaded stream and the busy period of the streams that keep up.
Measured on an H200 (../shared/data/h200-colocation-overload): 10 ResNet-50 at 30 fps with 8 ResNet-18 at 60 fps
load the GPU past 1; the round is ~17 ms, longer than ResNet-18's 16.7 ms period and shorter than ResNet-50's
33.3 ms, and indeed ResNet-18's p95 grows to 313 ms while ResNet-50 keeps 99.5% of its frames in time (p95
31 ms, one frame of each of the 18 streams). Each ResNet-50 stream of 18, 20 or 24 at 30 fps is served once per
35.4, 39.3 and 47.2 ms: 1.97 ms of GPU per frame and per stream, as the fit reads off the p95 slope below
saturation (fit.py).

Solved exactly like the busy period, with the periods sorted: if the k shortest periods are at most R, then
R = B_k / (capacity - L_k) (B_k: their work, L_k: the load of the others), and the right k is the one whose R
falls between the k-th and (k+1)-th period. g(R) = sum_j b_j min(1, R / T_j) - capacity R is concave with
g(0) = 0 and g'(0) = rho - capacity, so past saturation it has exactly one positive root.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpuplace.core.arrays import BoolArray, FloatArray
from gpuplace.core.latency.busy_period import slots

_TOLERANCE = 1e-9


def saturation_round(work_ms: FloatArray, period_ms: FloatArray, capacity: float = 1.0) -> FloatArray:
    """The round R (ms) of each GPU; inputs (..., n_slots) as busy_period's (empty slots: work 0).

    R is 0 where the load is below `capacity` (every stream keeps up).
    """
    work, period = slots(work_ms, period_ms)
    if not capacity > 0:
        raise ValueError(f"capacity must be > 0, got {capacity}")
    return _saturation_round(work, period, capacity)


def _saturation_round(work: FloatArray, period: FloatArray, capacity: float) -> FloatArray:
    """Assumes validated arrays (see saturation_round())."""
    order = np.argsort(period, axis=-1, kind="stable")
    b = np.take_along_axis(work, order, axis=-1)  # shortest period first, (..., S)
    t = np.take_along_axis(period, order, axis=-1)  # (..., S)
    zeros = np.zeros((*b.shape[:-1], 1))
    behind_work = np.concatenate([zeros, np.cumsum(b, axis=-1)], axis=-1)  # B_k, (..., S + 1)
    load_rest = np.concatenate([np.cumsum((b / t)[..., ::-1], axis=-1)[..., ::-1], zeros], axis=-1)  # L_k
    lower = np.concatenate([zeros, t], axis=-1)  # T_k, 0 for k = 0
    upper = np.concatenate([t, np.full_like(zeros, np.inf)], axis=-1)  # T_(k+1), inf for k = S
    with np.errstate(divide="ignore", invalid="ignore"):
        candidate = behind_work / (capacity - load_rest)  # (..., S + 1)
    valid = ((load_rest < capacity) & (candidate > 0) & (candidate >= lower * (1 - _TOLERANCE))
             & (candidate <= upper * (1 + _TOLERANCE)))
    solved = np.where(valid, candidate, 0.0).max(axis=-1, initial=0.0)
    load = load_rest[..., 0]
    return np.where(load >= capacity, solved, 0.0)


def overloaded(period_ms: FloatArray, round_ms: npt.ArrayLike) -> BoolArray:
    """(..., n_slots): the streams whose period is no longer than their GPU's round (round_ms (...,))."""
    result: BoolArray = np.asarray(period_ms) <= np.asarray(round_ms, dtype=np.float64)[..., None]
    return result


__all__ = ["overloaded", "saturation_round"]
