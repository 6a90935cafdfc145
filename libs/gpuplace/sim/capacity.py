"""A capacity model for a fleet: measured costs per pod and per sample, times the rates a fleet makes.

docs/capacity.md applies it to 5 regions, 50 clusters and 50,000 GPUs; bench/capacity_model.py reads the measured
figures (bench/results) and prints its tables. Nothing here is measured: every cost is an input, so the tables can
be drawn again from tomorrow's measurements, and every rate follows from the fleet's stated assumptions.

The model's structure is gpuplace's: a cluster's records all go to one partition (its key), so one placement worker
decides a cluster's pods one after another, and its CPU per pod caps how fast one cluster's burst drains, however
many workers there are; the fleet's work spreads over workers only cluster by cluster. PostgreSQL and Kafka take
the sum of all clusters' work, plus what does not depend on pods at all: one telemetry sample per GPU per interval
and one latency window per perception pod per window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Costs:
    """What one unit of work (a pod's way in or out, a telemetry sample, a latency window) costs each component."""

    placement_cpu_ms: float = 0.0
    watcher_cpu_ms: float = 0.0
    ingest_cpu_ms: float = 0.0  # telemetry-ingest or latency-ingest
    kafka_cpu_ms: float = 0.0
    postgres_cpu_ms: float = 0.0
    kafka_records: float = 0.0
    kafka_bytes: float = 0.0
    postgres_rows: float = 0.0  # inserted + updated + deleted
    postgres_wal_bytes: float = 0.0
    postgres_kept_bytes: float = 0.0  # what stays in tables nothing prunes (decisions, outbox, processed events)


@dataclass(frozen=True)
class Fleet:
    regions: int
    clusters: int
    gpus: int
    pods_per_gpu: float = 2.0  # running pods per GPU: memory slices share GPUs
    windowed_share: float = 0.7  # of running pods, those reporting latency windows (perception)
    telemetry_interval_s: float = 5.0  # GPUPLACE_TELEMETRY_INTERVAL_S: one sample per GPU per interval
    latency_window_s: float = 10.0  # GPUPLACE_LATENCY_WINDOW_S: one window per windowed pod per window

    @property
    def running_pods(self) -> float:
        return self.gpus * self.pods_per_gpu

    @property
    def samples_per_s(self) -> float:
        return self.gpus / self.telemetry_interval_s

    @property
    def windows_per_s(self) -> float:
        return self.running_pods * self.windowed_share / self.latency_window_s


@dataclass(frozen=True)
class Work:
    """What each kind of unit costs: a pod's way in (pending -> bound), its way out (deleted), a telemetry sample, a
    latency window."""

    pod_in: Costs
    pod_out: Costs
    sample: Costs
    window: Costs


@dataclass(frozen=True)
class Demand:
    """Fleet-wide rates and CPU cores (busy CPU-seconds per second) each component needs."""

    starts_per_s: float
    ends_per_s: float
    samples_per_s: float
    windows_per_s: float
    placement_cores: float
    watcher_cores: float
    ingest_cores: float
    kafka_cores: float
    postgres_cores: float
    kafka_records_per_s: float
    kafka_mb_per_s: float
    postgres_rows_per_s: float
    postgres_wal_mb_per_s: float
    postgres_kept_gb_per_day: float


def demand(fleet: Fleet, work: Work, starts_per_s: float, ends_per_s: float | None = None) -> Demand:
    """What the fleet asks of each component when `starts_per_s` pods start and `ends_per_s` end each second (as
    many as start, unless said: a steady fleet; a burst starts more than it ends)."""
    ends_per_s = starts_per_s if ends_per_s is None else ends_per_s
    if starts_per_s < 0 or ends_per_s < 0:
        raise ValueError(f"pod rates are not negative: {starts_per_s}, {ends_per_s}")
    rates = ((starts_per_s, work.pod_in), (ends_per_s, work.pod_out), (fleet.samples_per_s, work.sample),
             (fleet.windows_per_s, work.window))

    def total(name: str) -> float:
        return sum(rate * getattr(costs, name) for rate, costs in rates)

    return Demand(
        starts_per_s=starts_per_s, ends_per_s=ends_per_s, samples_per_s=fleet.samples_per_s,
        windows_per_s=fleet.windows_per_s, placement_cores=total("placement_cpu_ms") / 1000,
        watcher_cores=total("watcher_cpu_ms") / 1000, ingest_cores=total("ingest_cpu_ms") / 1000,
        kafka_cores=total("kafka_cpu_ms") / 1000, postgres_cores=total("postgres_cpu_ms") / 1000,
        kafka_records_per_s=total("kafka_records"), kafka_mb_per_s=total("kafka_bytes") / 1e6,
        postgres_rows_per_s=total("postgres_rows"), postgres_wal_mb_per_s=total("postgres_wal_bytes") / 1e6,
        postgres_kept_gb_per_day=total("postgres_kept_bytes") * 86_400 / 1e9)


def per_cluster_pods_per_s(pod_in: Costs) -> float:
    """The most pods one cluster's worker places a second: one process, one core, the cluster's pods in order."""
    if pod_in.placement_cpu_ms <= 0:
        raise ValueError("a pod's placement CPU must be positive")
    return 1000.0 / pod_in.placement_cpu_ms


def drain_s(burst_pods: int, pod_in: Costs) -> float:
    """Seconds one cluster's worker needs for a burst of `burst_pods`, at best (nothing else on its core)."""
    return burst_pods / per_cluster_pods_per_s(pod_in)


def workers(cores: float, *, busy: float = 0.5, most: int | None = None) -> int:
    """Placement workers (one core each) for `cores` of work, each kept at most `busy` of its core; never more
    than `most` (the clusters: a worker beyond one per cluster has nothing to own)."""
    if not 0 < busy <= 1:
        raise ValueError(f"busy is a fraction of a core in (0, 1]: {busy}")
    needed = max(1, math.ceil(cores / busy - 1e-9))
    return min(needed, most) if most is not None else needed


def partitions_holding(clusters: int, partitions: int) -> float:
    """How many of a topic's partitions `clusters` clusters land on, expected, hashed at random by their names:
    the most placement workers that can have work (the range assignor hands out partitions, not clusters)."""
    if clusters < 0 or partitions < 1:
        raise ValueError("clusters >= 0 and partitions >= 1")
    return partitions * (1.0 - (1.0 - 1.0 / partitions) ** clusters)


__all__ = ["Costs", "Demand", "Fleet", "Work", "demand", "drain_s", "partitions_holding", "per_cluster_pods_per_s",
           "workers"]
