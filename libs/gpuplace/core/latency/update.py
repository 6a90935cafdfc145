"""Online refit of the class profiles from latency windows: state in, state out.

A window is what `gpuplace.latency.v1` carries once a service has aggregated it: one workload class's
observed p50/p95/p99 on one GPU over some frames, with the streams that shared the GPU meanwhile.

- A window where the pod ran alone says what the class's service time is (its p50).
- A GPU-bound window (p95 clearly above the pod's solo floor) is one linear equation in the work
  fractions of every class on the GPU: with W_obs = (p95 - offset_95) / slope_95 the observed
  busy-period work (predict.py), W_obs = sum_k beta_k x_k, x_k = sum over class-k streams of
  service x frames in the busy period. One class cannot be solved alone when its co-runners are
  new too, so the equations of all windows are kept as normal equations (WorkEvidence) and the
  fractions solved together, as a ridge regression pulled towards each class's anchor: the offline
  fit, or for a new class the safe prior (the whole service time holds the GPU). A new class
  therefore starts conservative and moves as evidence outweighs the prior's `prior_weight_frames`.
- What predictions use is the estimate plus `confidence_z` standard errors, within [0.01, 1]: until
  there are more window equations than classes it stays at the anchor (or above), and it comes down
  to the estimate as the residuals allow. Learning errs on the safe side, as the fit does.
- A window of a stream whose period is shorter than a co-runner's teaches no work: only part of its frames are
  released with that co-runner, so its p95 over all frames is a lower quantile of the busy period (predict.py)
  and reading it as the p95 would take the work for less than it is (unsafe side). Its p50 still teaches the
  service time when it ran alone.
- Old evidence fades: each window scales the sums by memory / (memory + frames).
Tails (offset, slope, solo ratio) stay as fitted offline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpuplace.core.arrays import FloatArray
from gpuplace.core.latency.fit import GPU_BOUND_RATIO
from gpuplace.core.latency.model import ClassProfile, LatencyModel, Stream, WorkEvidence

PRIOR_WEIGHT_FRAMES = 600.0
"""What a prior (or an anchor without a frame count) is worth: 20 s of a 30 fps stream."""
MEMORY_FRAMES = 100_000.0
CONFIDENCE_Z = 2.0
"""Work fractions used for prediction are the estimate plus this many standard errors (safe side)."""
_MIN_FRACTION = 0.01


@dataclass(frozen=True)
class LatencyWindow:
    """One class's observed percentiles on one GPU (relative speed `gpu_speed`) over `frames` frames."""

    stream: Stream
    co_runners: tuple[Stream, ...]
    gpu_speed: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    frames: int

    def __post_init__(self) -> None:
        if not self.gpu_speed > 0:
            raise ValueError(f"gpu_speed must be > 0, got {self.gpu_speed}")
        if self.frames < 0:
            raise ValueError(f"frames must be >= 0, got {self.frames}")
        if not 0 < self.p50_ms <= self.p95_ms <= self.p99_ms:
            raise ValueError(f"percentiles must be positive and ordered, got {self.p50_ms}/{self.p95_ms}/{self.p99_ms}")


def update(model: LatencyModel, windows: Sequence[LatencyWindow], *, prior_weight_frames: float = PRIOR_WEIGHT_FRAMES,
           memory_frames: float = MEMORY_FRAMES, confidence_z: float = CONFIDENCE_Z) -> LatencyModel:
    """The model refitted with `windows` (see the module docstring); `model` is not changed."""
    if not prior_weight_frames > 0 or not memory_frames > 0:
        raise ValueError("prior_weight_frames and memory_frames must be > 0")
    usable = [w for w in windows if w.frames > 0 and w.stream.workload_class is not None]
    if not usable:
        return model
    model = _register(model, usable, prior_weight_frames)
    for window in usable:
        if not window.co_runners:
            model = _learn_service(model, window, prior_weight_frames, memory_frames)
    return _learn_work(model, usable, memory_frames, confidence_z)


def _register(model: LatencyModel, windows: list[LatencyWindow], prior_weight: float) -> LatencyModel:
    """Every class in the windows gets a profile and a row in the evidence (anchored where it stands)."""
    ev, classes = model.evidence, dict(model.classes)
    names = list(ev.classes)
    for stream in (s for w in windows for s in (w.stream, *w.co_runners)):
        name = stream.workload_class
        if name is None or name in names:
            continue
        profile = classes.get(name) or ClassProfile(model.service_ms(stream), model.prior_work_fraction)
        classes[name] = profile
        names.append(name)
    k_old, k = len(ev.classes), len(names)
    if k == k_old and len(classes) == len(model.classes):
        return model
    gram = np.zeros((k, k))
    gram[:k_old, :k_old] = ev.gram
    new = names[k_old:]
    evidence = WorkEvidence(
        tuple(names), gram, np.concatenate([ev.moment, np.zeros(len(new))]),
        np.concatenate([ev.anchor_fraction, [classes[n].work_fraction for n in new]]),
        np.concatenate([ev.anchor_weight, [classes[n].work_weight or prior_weight for n in new]]),
        np.concatenate([ev.scale_ms, [classes[n].service_ms for n in new]]),
    )
    return replace(model, classes=classes, evidence=evidence)


def _learn_service(model: LatencyModel, window: LatencyWindow, prior_weight: float, memory: float) -> LatencyModel:
    name = window.stream.workload_class or ""
    profile = model.classes[name]
    observed = window.p50_ms * window.gpu_speed / model.p50.solo_ratio  # back on the reference GPU
    weight = profile.service_weight or prior_weight
    service = float((weight * profile.service_ms + window.frames * observed) / (weight + window.frames))
    return model.with_class(name, replace(profile, service_ms=service,
                                          service_weight=min(weight + window.frames, memory)))


def _learn_work(model: LatencyModel, windows: list[LatencyWindow], memory: float, z: float) -> LatencyModel:
    ev = model.evidence
    gram, moment, sum_wy2, equations = ev.gram.copy(), ev.moment.copy(), ev.sum_wy2, ev.equations
    frames_seen = np.zeros(len(ev.classes))  # (K,)
    for window in windows:
        row = _work_equation(model, window)
        if row is None:
            continue
        x, y = row
        forget = memory / (memory + window.frames)
        gram = gram * forget + window.frames * np.outer(x, x)
        moment = moment * forget + window.frames * x * y
        sum_wy2, equations = sum_wy2 * forget + window.frames * y * y, equations * forget + 1.0
        frames_seen += window.frames * (x > 0)
    evidence = replace(ev, gram=gram, moment=moment, sum_wy2=sum_wy2, equations=equations)
    fractions = _safe_fractions(evidence, z)
    classes = dict(model.classes)
    for i, name in enumerate(ev.classes):
        profile = classes[name]
        classes[name] = replace(profile, work_fraction=float(fractions[i]),
                                work_weight=float(min(profile.work_weight + frames_seen[i], memory)))
    return replace(model, classes=classes, evidence=evidence)


def _safe_fractions(ev: WorkEvidence, z: float) -> FloatArray:
    """Ridge estimate within [MIN, 1], raised by z standard errors: the value predictions use.

    Early on, windows are few and their classes correlated, and a point estimate can land far below
    the truth (one class takes another's share); the upper bound stays at the prior until the
    residual degrees of freedom say the estimate is tight. Standard errors: residual variance per
    unit weight (RSS / (equations - K)) times the diagonal of (ridge + gram)^-1.
    """
    k = len(ev.classes)
    system = np.diag(ev.anchor_weight * ev.scale_ms**2) + ev.gram  # (K, K)
    rhs = np.diag(ev.anchor_weight * ev.scale_ms**2) @ ev.anchor_fraction + ev.moment  # (K,)
    estimate = _box_solve(system, rhs, _MIN_FRACTION, 1.0)
    rss = max(float(ev.sum_wy2 - 2.0 * estimate @ ev.moment + estimate @ ev.gram @ estimate), 0.0)
    dof = ev.equations - k
    if dof <= 0:
        return np.maximum(estimate, ev.anchor_fraction)
    variance = rss / dof * np.diag(np.linalg.inv(system))  # (K,)
    return np.clip(estimate + z * np.sqrt(variance), _MIN_FRACTION, 1.0)


def _box_solve(system: FloatArray, rhs: FloatArray, low: float, high: float) -> FloatArray:
    """argmin of the quadratic with `system` x = `rhs` as optimum, within [low, high] per coordinate:
    fix the coordinates that leave the box at their bound and solve again for the rest (active set)."""
    x = np.linalg.solve(system, rhs)
    fixed = np.zeros(len(x), dtype=bool)
    for _ in range(len(x)):
        out = ~fixed & ((x < low) | (x > high))
        if not out.any():
            break
        fixed |= out
        x[out] = np.clip(x[out], low, high)
        free = ~fixed
        if free.any():
            x[free] = np.linalg.solve(system[np.ix_(free, free)], rhs[free] - system[np.ix_(free, fixed)] @ x[fixed])
    return np.clip(x, low, high)


def _work_equation(model: LatencyModel, window: LatencyWindow) -> tuple[FloatArray, float] | None:
    """x (K,) and y (ms) of the window's equation W_obs = sum_k beta_k x_k, or None if not GPU-bound."""
    speed = window.gpu_speed
    streams = (window.stream, *window.co_runners)
    floor_ms = model.p95.solo_ratio * model.service_ms(window.stream) / speed
    if window.p95_ms <= GPU_BOUND_RATIO * floor_ms or model.p95.slope <= 0:
        return None
    if any(s.period_ms > window.stream.period_ms for s in window.co_runners):  # part of its frames only (module doc)
        return None
    busy_ms = (window.p95_ms - model.p95.offset_ms / speed) / model.p95.slope  # observed busy-period work
    if busy_ms <= 0:
        return None
    index = {name: i for i, name in enumerate(model.evidence.classes)}
    x = np.zeros(len(index))  # (K,)
    for stream in streams:
        frames_in_busy = max(1.0, busy_ms / stream.period_ms)
        service_gpu_ms = model.service_ms(stream) / speed
        if stream.workload_class is None:  # not learnable: its work stays at the prior
            busy_ms -= model.prior_work_fraction * service_gpu_ms * frames_in_busy
        else:
            x[index[stream.workload_class]] += service_gpu_ms * frames_in_busy
    return x, busy_ms


__all__ = ["CONFIDENCE_Z", "LatencyWindow", "MEMORY_FRAMES", "PRIOR_WEIGHT_FRAMES", "update"]
