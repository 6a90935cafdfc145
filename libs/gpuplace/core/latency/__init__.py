"""The latency model: per-pod p50/p95/p99 on a shared GPU from what runs there (DESIGN.md §6).

One module per idea: `model` (the state: tails and class profiles), `busy_period` (the GPU work a
frame waits behind), `predict` (percentiles and deadline misses), `frames` (observations per
config), `fit` (offline fit), `update` (online refit from latency windows, state in, state out),
`speed` (GPU products' relative speeds), `saturation` (which streams a saturated GPU cannot keep up with).

    model = fit.fit(frames_table, gpu_speed=speed.relative_speed("NVIDIA-H200"))
    p = predict.predict(model, [Stream(30.0, "r50")] * 16, speed=1.15)   # p.p95_ms, p.overloaded
    model = update.update(model, windows)                                 # state in, state out
"""

from gpuplace.core.latency import busy_period, fit, frames, model, predict, saturation, speed, update
from gpuplace.core.latency.model import DEFAULT_MODEL, ClassProfile, LatencyModel, Stream, Tail

__all__ = [
    "DEFAULT_MODEL", "ClassProfile", "LatencyModel", "Stream", "Tail",
    "busy_period", "fit", "frames", "model", "predict", "saturation", "speed", "update",
]
