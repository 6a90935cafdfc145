"""LatencyLedger: the predicted latency of every running pod over a scenario's time, and its KPIs.

After each change on a GPU the ledger predicts every pod there (latency/predict.py, with the
scenario's *truth* model, not the policy's) and keeps, per GPU, the rates it integrates between
events: frames per second, frames per second past their deadline, pods. KPIs (DESIGN.md §6):
- slo_attainment: share of placed pods whose predicted p95 stayed within their deadline at every
  instant of their life;
- deadline_miss_frames_pct: share of all frames predicted later than their deadline
  (latency/predict.py share_over; a GPU at load >= 1 misses every frame);
- pods_per_gpu: pod-seconds over busy-GPU-seconds (GPUs with at least one pod); pods_per_fleet_gpu
  divides by every GPU slot of the fleet instead (nodes x widest node's GPU count).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import LatencyModel
from gpuplace.core.latency.predict import predict, share_over


@dataclass
class _GpuRates:
    pods: int = 0
    frames_per_s: float = 0.0
    missed_per_s: float = 0.0
    overloaded: bool = False


class LatencyLedger:
    def __init__(self, truth: LatencyModel, gpu_load: GpuLoad) -> None:
        self.truth = truth
        self.gpu_load = gpu_load
        self._rates: dict[tuple[int, int], _GpuRates] = {}
        self._total = _GpuRates()
        self._busy_gpus = 0
        self._overloaded_gpus = 0
        self._now_s = 0.0
        self.pod_seconds = self.busy_gpu_seconds = self.overloaded_gpu_seconds = 0.0
        self.frames = self.missed_frames = 0.0
        self.worst_p95_ms: dict[str, float] = {}
        self.deadline_ms: dict[str, float | None] = {}

    def advance(self, now_s: float) -> None:
        """Integrate the current rates up to `now_s` (events must come in time order)."""
        dt = now_s - self._now_s
        if dt < 0:
            raise ValueError(f"time went backwards: {now_s} < {self._now_s}")
        self.pod_seconds += self._total.pods * dt
        self.busy_gpu_seconds += self._busy_gpus * dt
        self.overloaded_gpu_seconds += self._overloaded_gpus * dt
        self.frames += self._total.frames_per_s * dt
        self.missed_frames += self._total.missed_per_s * dt
        self._now_s = now_s

    def refresh(self, node: int, gpu: int) -> None:
        """Predict again every pod on one GPU after a pod came or went."""
        old = self._rates.pop((node, gpu), _GpuRates())
        residents = self.gpu_load.streams_on(node, gpu)
        new = _GpuRates()
        if residents:
            names = [name for name, _ in residents]
            streams = [stream for _, stream in residents]
            prediction = predict(self.truth, streams, speed=float(self.gpu_load.speed[node]))
            deadlines = np.array([np.inf if s.deadline_ms is None else s.deadline_ms for s in streams])
            missed = share_over(deadlines, prediction.p50_ms, prediction.p95_ms, prediction.p99_ms)
            rates = np.array([s.frame_rate_hz for s in streams])
            new = _GpuRates(len(streams), float(rates.sum()), float((rates * missed).sum()), prediction.overloaded)
            for name, stream, p95 in zip(names, streams, prediction.p95_ms.tolist(), strict=True):
                self.worst_p95_ms[name] = max(self.worst_p95_ms.get(name, 0.0), p95)
                self.deadline_ms[name] = stream.deadline_ms
            self._rates[(node, gpu)] = new
        self._busy_gpus += (new.pods > 0) - (old.pods > 0)
        self._overloaded_gpus += int(new.overloaded) - int(old.overloaded)
        self._total = _GpuRates(self._total.pods + new.pods - old.pods,
                                self._total.frames_per_s + new.frames_per_s - old.frames_per_s,
                                self._total.missed_per_s + new.missed_per_s - old.missed_per_s)

    def kpis(self) -> dict[str, float]:
        placed = list(self.worst_p95_ms)
        within = [(deadline := self.deadline_ms[p]) is None or self.worst_p95_ms[p] <= deadline for p in placed]
        return {
            "slo_attainment": round(float(np.mean(within)) if placed else 1.0, 4),
            "deadline_miss_frames_pct": round(100.0 * self.missed_frames / max(self.frames, 1e-9), 3),
            "pods_per_gpu": round(self.pod_seconds / max(self.busy_gpu_seconds, 1e-9), 3),
            "pods_per_fleet_gpu": round(self.pod_seconds / max(self._now_s * self.gpu_load.speed.size
                                                               * self.gpu_load.frame_rate_hz.shape[1], 1e-9), 3),
            "busy_gpus_mean": round(self.busy_gpu_seconds / max(self._now_s, 1e-9), 2),
            "overloaded_gpu_time_pct": round(100.0 * self.overloaded_gpu_seconds / max(self.busy_gpu_seconds, 1e-9), 2),
        }


__all__ = ["LatencyLedger"]
