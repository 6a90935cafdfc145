"""Per-frame latency measurements of streams sharing one GPU, and what each configuration observed.

A configuration ("config") is one set of streams run together on one GPU; every stream of a config
has a workload class (the model it runs) and a frame rate. The offline fit and its evaluation only
ever see the summaries made here: per config and class, the observed p50/p95/p99 latency and the
full list of streams that shared the GPU.

Rules of this module:
- the first `warmup_fraction` of each stream's frames are dropped (ramp-up), as the data's own
  summary does;
- a config is *observed overloaded* when its latency has no bound: p95 beyond
  `OVERLOAD_PERIODS` frame periods, or the median latency of the last quarter of frames more than one
  frame period above that of the first quarter (a backlog that keeps growing). Below load 1 a
  periodic stream's latency is stationary, so either sign means the GPU could not keep up;
- a row's *critical* percentiles are those of its frames released together with a frame of every co-runner
  (the critical instant, busy_period.py): all of them when its period is the mix's longest, one in T_max / T
  otherwise (release time within half a period of a release of the slowest stream). What the tails of
  predict.py describe, and what the fit reads (fit.py);
- a row's *first-served* percentiles are those of the earliest completion among its streams' frames of one
  release (same frame index: the streams start together): that frame waits behind none of its kind, so where a
  class never ran alone they are the nearest thing to its solo latency (fit.py's solo floor);
- a stream's *served interval* is the mean time between the completions of its frames (completion =
  release + latency, release = frame / fps): its period when it keeps up, and the GPU's round when it
  is behind (latency/saturation.py), which is what the fit reads the GPU work of overloaded configs from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuplace.core.arrays import FloatArray, IntArray

QUANTILES_PCT = (50, 95, 99)
OVERLOAD_PERIODS = 2.0
"""Observed p95 beyond this many frame periods counts as unbounded (the growth test catches the rest)."""


@dataclass(frozen=True, eq=False)
class FrameTable:
    """One row per frame; every array is (n_frames,). `workload_class` is the data's model column."""

    config: npt.NDArray[np.object_]  # str
    workload_class: npt.NDArray[np.object_]  # str
    worker: IntArray
    frame_rate_hz: FloatArray
    frame: IntArray
    latency_ms: FloatArray

    def __post_init__(self) -> None:
        n = len(self.config)
        if n == 0:
            raise ValueError("a frame table needs at least one frame")
        for name in ("workload_class", "worker", "frame_rate_hz", "frame", "latency_ms"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"column {name} has {len(getattr(self, name))} rows, expected {n}")
        if not (np.asarray(self.frame_rate_hz, dtype=float) > 0).all():
            raise ValueError("frame rates must be positive")
        if not np.isfinite(np.asarray(self.latency_ms, dtype=float)).all():
            raise ValueError("latencies must be finite numbers")

    def without(self, config: str) -> FrameTable:
        """The same table less one config (leave-one-config-out)."""
        keep = self.config != config
        return FrameTable(*(getattr(self, f)[keep] for f in _COLUMNS))

    def only(self, config: str) -> FrameTable:
        keep = self.config == config
        return FrameTable(*(getattr(self, f)[keep] for f in _COLUMNS))

    @classmethod
    def concat(cls, tables: Sequence[FrameTable]) -> FrameTable:
        """Several measurement sessions as one table; a config name in two of them is a ValueError (the
        configs' mixes are told apart by name)."""
        if not tables:
            raise ValueError("no frame table to concatenate")
        seen: set[str] = set()
        for table in tables:
            names = set(table.config.tolist())
            if names & seen:
                raise ValueError(f"config(s) {', '.join(sorted(names & seen))} appear in more than one table")
            seen |= names
        return cls(*(np.concatenate([getattr(t, f) for t in tables]) for f in _COLUMNS))


_COLUMNS = ("config", "workload_class", "worker", "frame_rate_hz", "frame", "latency_ms")

StreamMix = tuple[tuple[str, float, int], ...]
"""(workload class, frame rate in Hz, number of streams) for every kind of stream on one GPU."""


@dataclass(frozen=True)
class ConfigStats:
    """What one class observed in one config, with everything that shared the GPU."""

    config: str
    workload_class: str
    frame_rate_hz: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    frames: int
    mix: StreamMix
    overloaded: bool
    served_interval_ms: float = 0.0
    """Mean time between the completions of one stream's frames, over the class's streams (see the module)."""
    within_period: float = 1.0
    """Share of the frames that completed within one frame period of their release."""
    critical_ms: tuple[float, float, float] | None = None
    """p50/p95/p99 of the frames released at the critical instant (see the module); None: every frame is."""
    first_ms: tuple[float, float, float] | None = None
    """p50/p95/p99 of the first-served frame of each release (see the module); None: one stream of its kind."""
    released_s: tuple[float, float] | None = None
    """Release times (s from the start of the run) of the first and last frame the percentiles are over."""

    @property
    def streams(self) -> int:
        return sum(count for _, _, count in self.mix)

    def percentile_ms(self, q: int) -> float:
        return {50: self.p50_ms, 95: self.p95_ms, 99: self.p99_ms}[q]

    def first_percentile_ms(self, q: int) -> float:
        """p_q of the first-served frame of each release: the row's own with one stream of its kind."""
        if self.first_ms is None:
            return self.percentile_ms(q)
        return dict(zip(QUANTILES_PCT, self.first_ms, strict=True))[q]

    def critical_percentile_ms(self, q: int) -> float:
        """p_q of the frames released with every co-runner: the row's own where all of them are."""
        if self.critical_ms is None:
            return self.percentile_ms(q)
        return dict(zip(QUANTILES_PCT, self.critical_ms, strict=True))[q]


def summarise(table: FrameTable, warmup_fraction: float = 0.1) -> list[ConfigStats]:
    """Observed percentiles per (config, class, frame rate), in the table's order of first appearance."""
    if not 0 <= warmup_fraction < 1:
        raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction}")
    keys = list(dict.fromkeys(zip(table.config.tolist(), table.workload_class.tolist(),
                                  np.asarray(table.frame_rate_hz, dtype=float).tolist(), strict=True)))
    mixes = {config: _mix(table, config) for config in dict.fromkeys(table.config.tolist())}
    return [_stats(table, key, mixes[key[0]], warmup_fraction) for key in keys]


def _mix(table: FrameTable, config: str) -> StreamMix:
    rows = table.config == config
    kinds: dict[tuple[str, float], set[int]] = {}
    for cls, fps, worker in zip(table.workload_class[rows].tolist(), table.frame_rate_hz[rows].tolist(),
                                table.worker[rows].tolist(), strict=True):
        kinds.setdefault((cls, float(fps)), set()).add(worker)
    return tuple(sorted((cls, fps, len(workers)) for (cls, fps), workers in kinds.items()))


def _stats(table: FrameTable, key: tuple[str, str, float], mix: StreamMix, warmup_fraction: float) -> ConfigStats:
    config, cls, fps = key
    rows = (table.config == config) & (table.workload_class == cls) & (table.frame_rate_hz == fps)
    frame = np.asarray(table.frame[rows], dtype=np.int64)
    latency = np.asarray(table.latency_ms[rows], dtype=np.float64)
    worker = np.asarray(table.worker[rows], dtype=np.int64)
    kept = frame >= warmup_fraction * (frame.max() + 1)  # per-stream frame index, so per-stream warm-up
    latency, frame, worker = latency[kept], frame[kept], worker[kept]
    period_ms = 1000.0 / fps
    p50, p95, p99 = np.percentile(latency, QUANTILES_PCT)
    return ConfigStats(config, cls, fps, float(p50), float(p95), float(p99), int(len(latency)), mix,
                       _unbounded(frame, latency, period_ms, float(p95)),
                       _served_interval_ms(frame * period_ms + latency, worker),
                       float(np.mean(latency <= period_ms)),
                       _critical_ms(frame, latency, period_ms, 1000.0 / min(f for _, f, _ in mix)),
                       _first_served_ms(frame, latency, worker),
                       (float(frame.min() * period_ms / 1000.0), float(frame.max() * period_ms / 1000.0)))


def _first_served_ms(frame: IntArray, latency_ms: FloatArray, worker: IntArray) -> tuple[float, float, float] | None:
    """Percentiles over the releases (frame indices) of the least latency among the row's streams; None with one
    stream."""
    if len(np.unique(worker)) < 2:
        return None
    releases, at = np.unique(frame, return_inverse=True)
    first = np.full(len(releases), np.inf)
    np.minimum.at(first, at, latency_ms)  # (n_releases,)
    p50, p95, p99 = np.percentile(first, QUANTILES_PCT)
    return float(p50), float(p95), float(p99)


def _critical_ms(frame: IntArray, latency_ms: FloatArray, period_ms: float,
                 longest_ms: float) -> tuple[float, float, float] | None:
    """Percentiles of the frames released within half a period of a release of the mix's slowest stream; None when
    the row's period is the longest (every frame is) or no frame is."""
    if period_ms >= longest_ms:
        return None
    phase = np.mod(frame * period_ms, longest_ms)  # (n_frames,)
    critical = np.minimum(phase, longest_ms - phase) < period_ms / 2
    if not critical.any():
        return None
    p50, p95, p99 = np.percentile(latency_ms[critical], QUANTILES_PCT)
    return float(p50), float(p95), float(p99)


def _served_interval_ms(completion_ms: FloatArray, worker: IntArray) -> float:
    """Mean over the streams of (last completion - first) / (frames - 1); 0 if no stream has two frames."""
    intervals = []
    for w in np.unique(worker):
        done = completion_ms[worker == w]
        if len(done) > 1:
            intervals.append((done.max() - done.min()) / (len(done) - 1))
    return float(np.mean(intervals)) if intervals else 0.0


def _unbounded(frame: IntArray, latency_ms: FloatArray, period_ms: float, p95_ms: float) -> bool:
    if p95_ms > OVERLOAD_PERIODS * period_ms:
        return True
    order = np.argsort(frame, kind="stable")
    quarter = max(1, len(order) // 4)
    first, last = latency_ms[order[:quarter]], latency_ms[order[-quarter:]]
    return bool(np.median(last) - np.median(first) > period_ms)


__all__ = ["ConfigStats", "FrameTable", "OVERLOAD_PERIODS", "QUANTILES_PCT", "StreamMix", "summarise"]
