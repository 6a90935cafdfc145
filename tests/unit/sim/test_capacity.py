"""The capacity model (gpuplace.sim.capacity): rates times costs, and the limits its structure sets."""

from __future__ import annotations

import pytest

from gpuplace.sim.capacity import (
    Costs,
    Fleet,
    Work,
    demand,
    drain_s,
    partitions_holding,
    per_cluster_pods_per_s,
    workers,
)

FLEET = Fleet(regions=5, clusters=50, gpus=50_000, pods_per_gpu=2.0, windowed_share=0.5, telemetry_interval_s=5.0,
              latency_window_s=10.0)


def test_the_fleet_makes_samples_and_windows_whatever_the_pods_do() -> None:
    assert FLEET.running_pods == 100_000
    assert FLEET.samples_per_s == 10_000  # one per GPU every 5 s
    assert FLEET.windows_per_s == 5_000  # half the pods, one window each per 10 s


POD_IN = Costs(placement_cpu_ms=4.0, watcher_cpu_ms=1.0, kafka_cpu_ms=0.5, postgres_cpu_ms=0.25, kafka_records=4,
               kafka_bytes=1_000, postgres_rows=12, postgres_wal_bytes=10_000, postgres_kept_bytes=2_000)
POD_OUT = Costs(placement_cpu_ms=8.0, kafka_cpu_ms=0.25, postgres_cpu_ms=0.5, kafka_records=2, postgres_rows=6)
SAMPLE = Costs(ingest_cpu_ms=0.5, kafka_cpu_ms=0.1, postgres_cpu_ms=0.2, kafka_records=1, kafka_bytes=300,
               postgres_rows=2, postgres_kept_bytes=100)
WINDOW = Costs(ingest_cpu_ms=1.0, postgres_cpu_ms=0.4, kafka_records=1, postgres_rows=3)
WORK = Work(POD_IN, POD_OUT, SAMPLE, WINDOW)


def test_demand_sums_each_kind_of_work_times_its_rate() -> None:
    got = demand(FLEET, WORK, 100.0)  # a steady fleet: as many pods end as start
    assert (got.starts_per_s, got.ends_per_s) == (100.0, 100.0)
    assert got.placement_cores == pytest.approx(100 * (4.0 + 8.0) / 1000)
    assert got.watcher_cores == pytest.approx(0.1)
    assert got.ingest_cores == pytest.approx(10_000 * 0.5e-3 + 5_000 * 1e-3)
    assert got.kafka_cores == pytest.approx(100 * 0.75e-3 + 10_000 * 0.1e-3)
    assert got.postgres_cores == pytest.approx(100 * 0.75e-3 + 10_000 * 0.2e-3 + 5_000 * 0.4e-3)
    assert got.kafka_records_per_s == pytest.approx(600 + 10_000 + 5_000)
    assert got.kafka_mb_per_s == pytest.approx((100 * 1_000 + 10_000 * 300) / 1e6)
    assert got.postgres_rows_per_s == pytest.approx(1_800 + 20_000 + 15_000)
    assert got.postgres_wal_mb_per_s == pytest.approx(1.0)
    assert got.postgres_kept_gb_per_day == pytest.approx((100 * 2_000 + 10_000 * 100) * 86_400 / 1e9)


def test_a_burst_starts_pods_without_ending_as_many() -> None:
    got = demand(FLEET, WORK, 1_000.0, ends_per_s=10.0)
    assert got.placement_cores == pytest.approx((1_000 * 4.0 + 10 * 8.0) / 1000)


def test_no_pods_still_leaves_the_fleets_own_work() -> None:
    got = demand(FLEET, WORK, 0.0)
    assert got.placement_cores == 0
    assert got.postgres_cores == pytest.approx(10_000 * 0.2e-3 + 5_000 * 0.4e-3)


def test_a_negative_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="not negative"):
        demand(FLEET, WORK, -1.0)
    with pytest.raises(ValueError, match="not negative"):
        demand(FLEET, WORK, 1.0, ends_per_s=-1.0)


def test_one_cluster_drains_at_one_worker_core() -> None:
    pod = Costs(placement_cpu_ms=4.0)
    assert per_cluster_pods_per_s(pod) == 250
    assert drain_s(2_000, pod) == 8.0
    with pytest.raises(ValueError, match="positive"):
        per_cluster_pods_per_s(Costs())


@pytest.mark.parametrize(("cores", "busy", "most", "expected"), [
    (0.0, 0.5, None, 1),  # always one
    (1.0, 0.5, None, 2),
    (1.01, 0.5, None, 3),
    (30.0, 0.5, 50, 50),  # never more than the clusters
])
def test_workers_keep_each_core_at_most_busy(cores: float, busy: float, most: int | None, expected: int) -> None:
    assert workers(cores, busy=busy, most=most) == expected


def test_workers_refuse_a_busy_share_outside_a_core() -> None:
    with pytest.raises(ValueError, match="fraction"):
        workers(1.0, busy=0.0)


def test_clusters_hashed_over_partitions_share_some() -> None:
    assert partitions_holding(1, 64) == pytest.approx(1.0)
    assert partitions_holding(50, 1) == pytest.approx(1.0)
    assert partitions_holding(50, 64) == pytest.approx(64 * (1 - (63 / 64) ** 50))  # about 35
    assert partitions_holding(50, 64) < partitions_holding(50, 256) < 50
    with pytest.raises(ValueError):
        partitions_holding(50, 0)
