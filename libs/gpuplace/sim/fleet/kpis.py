"""The fleet simulation's KPIs: integrals over simulated time, pending-time samples, SLO and moves.

Definitions (reported per region and for the fleet):
- stranded GPU memory: core/fragmentation.stranded_gpu_memory against the cluster's typical workload (the
  shapes the plan submits, plan.py), summed over the cluster's nodes: free GPU memory that the typical pod
  could not use. Time-averaged: the integral over the run divided by its length, in GiB;
- allocation: allocated GPU share / GPU capacity, time-averaged (capacity changes as nodes join and leave);
- pending time, per workload class: submission to binding for every pod that was placed, and submission to
  the end of its wait for pods deleted while waiting (a scale-down) or still waiting when the run ends (then
  it is a lower bound). A pod evicted by a drain is submitted again: its new wait is a new sample;
- SLO attainment (perception pods): the share of placed perception pods whose p95, predicted by the latency
  model (core/latency, the truth the scenario uses) for the GPU they share, stayed within their deadline
  at every instant they ran; and the share of frames predicted past their deadline;
- pods moved per hour: defragmentation moves (evictions a plan made) per simulated hour; evictions by
  node drains are counted apart.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from gpuplace.core.latency.model import LatencyModel, Stream
from gpuplace.core.latency.predict import predict, share_over

GIB = 1024.0
_CACHE_SIZE = 200_000
GpuKey = tuple[str, str, int]
"""(cluster, node name, GPU index): the ledger keys GPUs by name, so a cluster rebuilt on a node change keeps
its GPUs' state."""


@dataclass
class Integrals:
    """Time integrals (value x seconds) of one cluster's state, and its current values."""

    stranded_mib: float = 0.0
    allocated_milli: float = 0.0
    capacity_milli: float = 0.0
    memory_capacity_mib: float = 0.0
    allocated_memory_mib: float = 0.0
    waiting_gpu_pods: float = 0.0
    now: dict[str, float] = field(default_factory=dict)

    def add(self, dt: float) -> None:
        for name, value in self.now.items():
            setattr(self, name, getattr(self, name) + value * dt)


class SloLedger:
    """Predicted latency of every perception pod over time (like scenarios/latency_ledger.py, keyed by name)."""

    def __init__(self, truth: LatencyModel) -> None:
        self.truth = truth
        self._residents: dict[GpuKey, dict[str, Stream]] = defaultdict(dict)
        self._speed: dict[GpuKey, float] = {}
        self._rates: dict[GpuKey, tuple[float, float]] = {}  # frames/s, frames past deadline/s
        self._frames_per_s = self._missed_per_s = 0.0
        self._now_s = 0.0
        self._dirty: set[GpuKey] = set()
        self.frames = self.missed_frames = 0.0
        self.worst_p95_ms: dict[str, float] = {}
        self.deadline_ms: dict[str, float] = {}
        self.region_of: dict[str, str] = {}
        self._cache: dict[tuple[tuple[Stream, ...], float], tuple[list[float], list[float], tuple[float, float]]] = {}

    def advance(self, now_s: float) -> None:
        """Predict the GPUs changed since the last call (their state at the end of that instant: states that last
        no time are never seen by a frame), then integrate the frame rates up to `now_s`."""
        for key in sorted(self._dirty):
            self._refresh(key)
        self._dirty.clear()
        dt = now_s - self._now_s
        self.frames += self._frames_per_s * dt
        self.missed_frames += self._missed_per_s * dt
        self._now_s = now_s

    def add(self, region: str, gpus: list[GpuKey], speed: float, uid: str, stream: Stream) -> None:
        self.region_of[uid] = region
        for key in gpus:
            self._residents[key][uid] = stream
            self._speed[key] = speed
            self._dirty.add(key)

    def remove(self, gpus: list[GpuKey], uid: str) -> None:
        for key in gpus:
            self._residents[key].pop(uid, None)
            self._dirty.add(key)

    def _refresh(self, key: GpuKey) -> None:
        old = self._rates.pop(key, (0.0, 0.0))
        residents = self._residents.get(key, {})
        new = (0.0, 0.0)
        if residents:
            names = sorted(residents, key=lambda n: _order(residents[n]))
            streams = tuple(residents[n] for n in names)
            p95s, deadlines, new = self._predict(streams, self._speed[key])
            for name, p95, deadline in zip(names, p95s, deadlines, strict=True):
                self.worst_p95_ms[name] = max(self.worst_p95_ms.get(name, 0.0), p95)
                self.deadline_ms[name] = deadline
            self._rates[key] = new
        else:
            self._residents.pop(key, None)
        self._frames_per_s += new[0] - old[0]
        self._missed_per_s += new[1] - old[1]

    def _predict(self, streams: tuple[Stream, ...], speed: float) -> tuple[list[float], list[float],
                                                                          tuple[float, float]]:
        """p95 and deadline per stream, and (frames/s, frames past deadline/s) of one GPU. Replicas of a deployment
        share one stream, so GPUs holding the same streams recur: each distinct (streams, speed) is predicted once."""
        cached = self._cache.get((streams, speed))
        if cached is None:
            prediction = predict(self.truth, streams, speed=speed)
            deadlines = np.array([np.inf if s.deadline_ms is None else s.deadline_ms for s in streams])
            missed = share_over(deadlines, prediction.p50_ms, prediction.p95_ms, prediction.p99_ms)
            rates = np.array([s.frame_rate_hz for s in streams])
            frames = (float(rates.sum()), float((rates * missed).sum()))
            cached = (prediction.p95_ms.tolist(), deadlines.tolist(), frames)
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[(streams, speed)] = cached
        return cached

    def attainment(self, region: str | None = None) -> float | None:
        """Share of placed perception pods (of `region`, or all) whose p95 kept within the deadline."""
        pods = [p for p in self.worst_p95_ms if region is None or self.region_of[p] == region]
        if not pods:
            return None
        return round(float(np.mean([self.worst_p95_ms[p] <= self.deadline_ms[p] for p in pods])), 4)

    def missed_frames_pct(self) -> float:
        return round(100.0 * self.missed_frames / max(self.frames, 1e-9), 4)


def _order(stream: Stream) -> tuple[float, str, float, float]:
    return (stream.frame_rate_hz, stream.workload_class or "", stream.service_ms or 0.0, stream.deadline_ms or 0.0)


def percentiles(samples: list[float]) -> dict[str, float | int | None]:
    """p50 and p99 (seconds) and the count of a list of pending times."""
    if not samples:
        return {"n": 0, "p50_s": None, "p99_s": None}
    values = np.asarray(samples)
    return {"n": len(samples), "p50_s": round(float(np.percentile(values, 50)), 1),
            "p99_s": round(float(np.percentile(values, 99)), 1)}


__all__ = ["GIB", "GpuKey", "Integrals", "SloLedger", "percentiles"]
