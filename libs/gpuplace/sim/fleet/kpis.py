"""The fleet simulation's KPIs: integrals over simulated time, pending-time samples, SLO and moves.

Definitions (reported per region and for the fleet):
- stranded GPU memory: core/fragmentation.stranded_gpu_memory against the cluster's typical workload (the
  shapes the plan submits, plan.py), summed over the cluster's nodes: free GPU memory that the typical pod
  could not use. Time-averaged: the integral over the run divided by its length, in GiB;
- the same memory told apart by why it is unused (`stranded_split`), per GPU model: *time-stranded*, the free
  memory of GPUs whose time is taken -- GPUs running pods where no stream of the cluster's mix (every version of
  its perception deployments) would keep every deadline, by the latency filter's own test (core/filters/
  latency_room.py) with the scenario's truth model; and *fragmentation-stranded*, FGD's measure on the other
  GPUs (those GPUs' free memory and share taken as zero): memory a pod of the mix could not use because of how it
  is split. A GPU's time is judged for the mix as a whole (some stream fits), not shape by shape;
- pending pods by what blocks them (hourly samples, averaged): each waiting pod's blocker (core/defrag/
  blockers.diagnose, with the cluster's latency-aware policy): memory (GPU share or memory, or host memory,
  short in total), cpu (CPU short in total), fragmentation, latency, constraint (no node could ever take it, or
  a rule of the policy's own) or none (it fits now and waits for the next pass);
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

from gpuplace.core.arrays import FloatArray
from gpuplace.core.filters.latency_room import MixTerms, fits, gpu_terms
from gpuplace.core.fragmentation import stranded_memory_of
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import LatencyModel, Stream
from gpuplace.core.latency.predict import predict, share_over
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import TypicalWorkload

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
    other: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    """Integrals of the values in `now` that are no field (the stranded split per GPU model)."""

    def add(self, dt: float) -> None:
        for name, value in self.now.items():
            if name in _FIELDS:
                setattr(self, name, getattr(self, name) + value * dt)
            else:
                self.other[name] += value * dt


_FIELDS = frozenset(("stranded_mib", "allocated_milli", "capacity_milli", "memory_capacity_mib", "allocated_memory_mib",
                     "waiting_gpu_pods"))
FRAGMENTATION_STRANDED, TIME_STRANDED = "fragmentation_stranded_mib", "time_stranded_mib"


def stranded_split(snapshot: ClusterSnapshot, workload: TypicalWorkload, load: GpuLoad, model: LatencyModel,
                   mix: MixTerms) -> dict[str, float]:
    """Fragmentation- and time-stranded GPU memory (MiB) per GPU model (module docstring), as
    `{"fragmentation_stranded_mib/<model>": ..., "time_stranded_mib/<model>": ...}`."""
    used = load.occupied.any(axis=2) & snapshot.gpu_exists & (snapshot.free_memory_mib > 0)
    rows, gpus = np.nonzero(used)
    taken = np.zeros_like(used)
    if len(rows) and len(mix):
        room = fits(gpu_terms(load, model, rows, gpus), mix, model).any(axis=0)
        taken[rows[~room], gpus[~room]] = True
    free_memory = np.where(taken, 0, snapshot.free_memory_mib)
    frag: FloatArray = stranded_memory_of(np.where(taken, 0, snapshot.free_share_milli), snapshot.cpu_free_milli,
                                          snapshot.gpu_type_id, free_memory, workload)
    time = (snapshot.free_memory_mib - free_memory).sum(axis=1)
    out: dict[str, float] = {}
    for model_name in dict.fromkeys(t.model for t in snapshot.gpu_types):
        on = np.array([snapshot.gpu_types[t].model == model_name for t in snapshot.gpu_type_id], dtype=bool)
        out[f"{FRAGMENTATION_STRANDED}/{model_name}"] = float(frag[on].sum())
        out[f"{TIME_STRANDED}/{model_name}"] = float(time[on].sum())
    return out


def by_model(totals: list[dict[str, float]], kind: str, seconds: float) -> dict[str, float]:
    """Time averages in GiB per GPU model of one kind of `stranded_split` integral, summed over clusters."""
    out: dict[str, float] = defaultdict(float)
    for values in totals:
        for key, value in values.items():
            name, _, model_name = key.partition("/")
            if name == kind:
                out[model_name] += value / seconds / GIB
    return {k: round(v, 1) for k, v in sorted(out.items())}


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


__all__ = ["FRAGMENTATION_STRANDED", "GIB", "GpuKey", "Integrals", "SloLedger", "TIME_STRANDED", "by_model",
           "percentiles", "stranded_split"]
