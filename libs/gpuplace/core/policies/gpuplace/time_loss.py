"""Time loss: what placing a pod with a deadline on a GPU takes from the time the arriving mix could still use.

FGD's measure keeps whole GPUs' memory for the shapes that need it; this is its analogue over GPU time (issue 42).
When time, not memory, runs out -- every perception pod must keep its predicted p95 within its deadline, and so
must the pods already on the GPU -- a GPU's free memory is only as useful as the streams that could still go there
within every deadline. For a GPU g and the arriving mix of streams y with weights w_y (StreamMix: the streams seen,
decaying with half-life HALF_LIFE_STREAMS pods), the usable time is U(g) = sum_y w_y [y fits on g] (the latency
filter's test: core/filters/latency_room.py), and the loss of placing the pod on g is U(g) - U(g + pod): how much
of the mix's typical pods could go on g before and could not after. A GPU whose time the pod nearly uses up anyway
loses little; an empty, fast GPU that the pod alone barely touches loses little too -- whole GPUs are kept by the
memory measure (node_waste.py), which the house policy weighs beside this one (policy.py, TIME_WEIGHT_MILLI).

The latency-aware wrapper (policies/latency_aware.py) hands the policy the pod's stream and the GPUs' load
(`latency_room.GpuTime`) for each pod with a frame rate; without it (no stream, or the policy used alone) nothing
here runs, so pods without a frame rate are judged exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplace.core.arrays import FloatArray, IntArray
from gpuplace.core.filters.latency_room import GpuTerms, GpuTime, MixTerms, fits, gpu_terms
from gpuplace.core.latency.model import LatencyModel, Stream

HALF_LIFE_STREAMS = 2000.0
"""Pods with a frame rate after which a stream seen weighs half (the shape estimate's half-life)."""
MAX_STREAMS = 32
"""The heaviest streams kept in the mix the loss is judged against (each costs a row of every check)."""
BY_TIME = True
"""Streams weigh by count x the GPU time each asks (a heavy stream needs a GPU's time as a big slice needs its
memory), not by count alone."""
REBUILD_EVERY = 16
"""Streams observed between rebuilds of the mix's terms."""


class StreamMix:
    """The streams of the pods with a frame rate seen so far, weighted by count with exponential decay."""

    def __init__(self, half_life: float = HALF_LIFE_STREAMS) -> None:
        if half_life <= 0:
            raise ValueError(f"half_life must be positive, got {half_life}")
        self._decay = 0.5 ** (1.0 / half_life)
        self._scale = 1.0  # weights are stored divided by the decay applied since the last renormalisation
        self._weights: dict[Stream, float] = {}
        self._since = REBUILD_EVERY
        self._built: tuple[LatencyModel, float, MixTerms, FloatArray] | None = None

    def observe(self, stream: Stream) -> None:
        self._scale *= self._decay
        self._weights[stream] = self._weights.get(stream, 0.0) + 1.0 / self._scale
        if self._scale < 1e-100:  # renormalise before the stored weights overflow
            self._weights = {s: w * self._scale for s, w in self._weights.items()}
            self._scale = 1.0
        self._since += 1

    def terms(self, model: LatencyModel, margin: float) -> tuple[MixTerms, FloatArray]:
        """The heaviest MAX_STREAMS streams as terms, and their weights summing to 1."""
        built = self._built
        if built is None or built[0] is not model or built[1] != margin or self._since >= REBUILD_EVERY:
            heaviest = sorted(self._weights.items(), key=lambda item: -item[1])[:MAX_STREAMS]
            weights = np.array([w for _, w in heaviest], dtype=np.float64)
            mix = MixTerms.of(model, [s for s, _ in heaviest], margin)
            if BY_TIME:  # a stream weighs by the GPU time it asks (its load on the reference GPU), not by count
                weights *= mix.service_ms * mix.work_fraction / mix.period_ms
            weights /= max(float(weights.sum()), 1e-300)
            self._built = built = (model, margin, mix, weights)
            self._since = 0
        return built[2], built[3]


@dataclass(frozen=True)
class TimeLoss:
    """The loss for one pod (its GpuTime) against one mix."""

    time: GpuTime
    mix: MixTerms
    weights: FloatArray

    def of(self, rows: IntArray, gpus: IntArray) -> FloatArray:
        """Loss of usable time for the mix, in GPUs' worth of it (0..1), placing the pod on GPU (rows[i], gpus[i]).
        GPUs with nothing on them are judged once per distinct speed."""
        t = self.time
        loss = np.zeros(len(rows))
        if not len(rows) or not len(self.mix):
            return loss
        occupied = t.load.occupied[rows, gpus].any(axis=1)
        if occupied.any():
            loss[occupied] = self._loss(gpu_terms(t.load, t.model, rows[occupied], gpus[occupied], t.margin))
        if not occupied.all():
            speeds, which = np.unique(t.load.speed[rows[~occupied]], return_inverse=True)
            loss[~occupied] = self._loss(_empty(speeds))[which]
        return loss

    def _loss(self, before: GpuTerms) -> FloatArray:
        t = self.time
        after = before.with_stream(t.model, t.stream, t.margin)
        kept: FloatArray = self.weights @ (fits(before, self.mix, t.model).astype(np.float64)
                                           - fits(after, self.mix, t.model).astype(np.float64))
        return np.maximum(kept, 0.0)


def _empty(speeds: FloatArray) -> GpuTerms:
    k = len(speeds)
    return GpuTerms(speeds, np.zeros((k, 1)), np.full((k, 1), np.inf), np.zeros(k), np.full(k, np.inf),
                    np.ones(k, dtype=bool))


__all__ = ["BY_TIME", "HALF_LIFE_STREAMS", "MAX_STREAMS", "REBUILD_EVERY", "StreamMix", "TimeLoss"]
