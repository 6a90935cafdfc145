"""What every Metrics implementation promises the use cases (usecases/ports.Metrics); subclassed once per
implementation: NullMetrics (tests/unit/test_null_metrics.py), PrometheusMetrics
(tests/unit/adapters/test_prometheus_metrics.py, which also checks the samples each call moves).

The use cases call a Metrics in the middle of their work, so the promises are about not getting in its way:
every value of each vocabulary is taken and nothing is raised; a watched source is read only when metrics are
scraped, never on registration, and no longer once its block has ended, however it ended.
"""

from __future__ import annotations

from typing import get_args

import pytest

from gpuplace.usecases.ports import (
    AttemptResult,
    BindResult,
    ClusterGauges,
    EvictResult,
    Metrics,
    NodeGpus,
    PlanOutcome,
)
from tests.contract.covers import covers


class MetricsContract:
    """Subclasses define `make_metrics()`, and `scrape(metrics)` if the implementation reads anything then."""

    def make_metrics(self) -> Metrics:
        raise NotImplementedError

    def scrape(self, metrics: Metrics) -> None:
        """Do what a scrape does (render the metrics); nothing for an implementation that keeps none."""

    @covers("scheduling_attempt", "bind", "eviction", "defrag_plan")
    def test_every_value_of_each_vocabulary_is_taken_without_raising(self) -> None:
        metrics = self.make_metrics()
        for cluster in ("east", "west"):
            for result in get_args(AttemptResult):
                assert metrics.scheduling_attempt(cluster, result, 0.004) is None
            for bind in get_args(BindResult):
                assert metrics.bind(cluster, bind) is None
            for evict in get_args(EvictResult):
                assert metrics.eviction(cluster, evict) is None
            for outcome in get_args(PlanOutcome):
                assert metrics.defrag_plan(cluster, outcome) is None
        self.scrape(metrics)

    @covers("pod_scheduled")
    def test_pods_scheduled_at_once_and_after_hours_are_taken(self) -> None:
        metrics = self.make_metrics()
        for seconds in (0.0, 0.004, 3 * 3600.0, 1e9):  # past the last bucket: +Inf
            assert metrics.pod_scheduled("east", seconds) is None
        assert metrics.pod_scheduled("west", 1.5) is None
        self.scrape(metrics)

    @covers("latency_window")
    def test_windows_with_no_miss_and_with_every_frame_missed_are_taken(self) -> None:
        metrics = self.make_metrics()
        assert metrics.latency_window("east", "slam", 300, 0) is None
        assert metrics.latency_window("east", "slam", 300, 300) is None
        assert metrics.latency_window("west", "detection", 1, 1) is None
        self.scrape(metrics)

    @covers("scale_hint")
    def test_a_hint_replaces_the_clusters_last_and_an_empty_one_clears_it(self) -> None:
        metrics = self.make_metrics()
        assert metrics.scale_hint("east", [("8xH100:96c:768Gi", "capacity", 2),
                                           ("2xA100:64c:256Gi", "fragmentation", 1)]) is None
        self.scrape(metrics)
        assert metrics.scale_hint("east", [("8xH100:96c:768Gi", "capacity", 1)]) is None
        assert metrics.scale_hint("east", ()) is None
        assert metrics.scale_hint("west", ()) is None  # a cluster never hinted before
        self.scrape(metrics)

    @covers("watching")
    def test_a_source_is_read_only_at_a_scrape_inside_its_block(self) -> None:
        metrics = self.make_metrics()
        calls: list[int] = []

        def source() -> list[ClusterGauges]:
            calls.append(1)
            return [ClusterGauges("east", {"unschedulable": 1}, 0.25, 1024.0,
                                  (NodeGpus("n1", "NVIDIA-H100-80GB-HBM3", 8, 8 * 81920, 9420, 1500),))]

        with metrics.watching(source):
            assert calls == []  # registering reads nothing
            self.scrape(metrics)
        read_inside = len(calls)
        self.scrape(metrics)
        assert len(calls) == read_inside  # the block ended: no longer read

    @covers("watching")
    def test_a_block_left_by_an_exception_releases_its_source_too(self) -> None:
        metrics = self.make_metrics()
        calls: list[int] = []
        with pytest.raises(KeyError), metrics.watching(lambda: calls.append(1) or []):
            raise KeyError("the placement service stopped")
        self.scrape(metrics)
        assert calls == []
