"""PrometheusMetrics: the Metrics contract, the samples each call moves, the gauges read at a scrape, and the
README's table of metrics, which must list exactly what the registry exposes."""

from __future__ import annotations

import asyncio
import gc
import re
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuplace.adapters.metrics import MIB, REFRESH_TIMEOUT_S, PrometheusMetrics
from gpuplace.usecases.ports import ClusterGauges, Metrics, NodeGpus
from tests.contract.metrics_contract import MetricsContract

README = Path(__file__).resolve().parents[3] / "README.md"


class TestPrometheusMetrics(MetricsContract):
    def make_metrics(self) -> Metrics:
        return PrometheusMetrics(process_metrics=False)

    def scrape(self, metrics: Metrics) -> None:
        assert isinstance(metrics, PrometheusMetrics)
        list(text_string_to_metric_families(metrics.exposition().decode()))  # parses as Prometheus text


def value(metrics: PrometheusMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_attempts_are_counted_by_cluster_and_result_and_timed_by_result():
    metrics = PrometheusMetrics(process_metrics=False)
    metrics.scheduling_attempt("east", "reserved", 0.004)
    metrics.scheduling_attempt("east", "reserved", 0.2)
    metrics.scheduling_attempt("west", "unschedulable", 0.03)
    assert value(metrics, "gpuplace_scheduling_attempts_total", cluster="east", result="reserved") == 2
    assert value(metrics, "gpuplace_scheduling_attempts_total", cluster="west", result="unschedulable") == 1
    # a cluster's other results exist at zero from its first attempt on, so increase() sees their first one
    assert value(metrics, "gpuplace_scheduling_attempts_total", cluster="east", result="error") == 0
    assert value(metrics, "gpuplace_scheduling_attempt_duration_seconds_count", result="reserved") == 2
    assert value(metrics, "gpuplace_scheduling_attempt_duration_seconds_bucket", result="reserved", le="0.005") == 1
    assert value(metrics, "gpuplace_scheduling_attempt_duration_seconds_sum", result="reserved") == pytest.approx(0.204)


def test_binds_evictions_and_plans_are_counted_by_outcome():
    metrics = PrometheusMetrics(process_metrics=False)
    for result in ("bound", "bound", "conflict", "error"):
        metrics.bind("east", result)  # type: ignore[arg-type]
    metrics.eviction("east", "evicted")
    metrics.eviction("east", "refused")
    metrics.defrag_plan("east", "planned")
    metrics.defrag_plan("east", "aborted")
    assert value(metrics, "gpuplace_binds_total", cluster="east") == 2
    assert value(metrics, "gpuplace_bind_failures_total", cluster="east", reason="conflict") == 1
    assert value(metrics, "gpuplace_bind_failures_total", cluster="east", reason="error") == 1
    assert value(metrics, "gpuplace_bind_failures_total", cluster="east", reason="gone") == 0
    assert value(metrics, "gpuplace_bind_failures_total", cluster="east", reason="bound") is None  # not a failure
    assert value(metrics, "gpuplace_evictions_total", cluster="east", outcome="evicted") == 1
    assert value(metrics, "gpuplace_evictions_total", cluster="east", outcome="refused") == 1
    assert value(metrics, "gpuplace_defrag_plans_total", cluster="east", outcome="planned") == 1
    assert value(metrics, "gpuplace_defrag_plans_total", cluster="east", outcome="aborted") == 1
    assert value(metrics, "gpuplace_defrag_plans_total", cluster="east", outcome="completed") == 0


def test_pending_to_bound_is_a_histogram_on_kube_schedulers_buckets():
    metrics = PrometheusMetrics(process_metrics=False)
    metrics.bind("west", "bound")  # a cluster's histogram exists at zero from its first report on
    assert value(metrics, "gpuplace_pod_scheduling_sli_duration_seconds_count", cluster="west") == 0
    for seconds in (0.005, 0.3, 0.3, 7200.0):
        metrics.pod_scheduled("east", seconds)
    # ExponentialBuckets(0.01, 2, 20): 0.01, 0.02, ..., 0.01 x 2^19 = 5242.88 s, then +Inf
    assert value(metrics, "gpuplace_pod_scheduling_sli_duration_seconds_bucket", cluster="east", le="0.01") == 1
    assert value(metrics, "gpuplace_pod_scheduling_sli_duration_seconds_bucket", cluster="east", le="0.32") == 3
    assert value(metrics, "gpuplace_pod_scheduling_sli_duration_seconds_bucket", cluster="east", le="5242.88") == 3
    assert value(metrics, "gpuplace_pod_scheduling_sli_duration_seconds_bucket", cluster="east", le="+Inf") == 4
    assert value(metrics, "gpuplace_pod_scheduling_sli_duration_seconds_sum", cluster="east") == \
        pytest.approx(7200.605)


def test_gpu_capacity_and_allocation_per_node_and_model_are_read_at_the_scrape():
    metrics = PrometheusMetrics(process_metrics=False)
    h100 = [NodeGpus("n1", "NVIDIA-H100-80GB-HBM3", 8, 8 * 81920, 2 * 9420, 250)]
    a100 = [NodeGpus("a1", "NVIDIA-A100-SXM4-40GB", 4, 4 * 40960, 40960, 1000)]
    with metrics.watching(lambda: [ClusterGauges("east", {}, None, None, h100),
                                   ClusterGauges("west", {}, None, None, a100)]):
        east = {"cluster": "east", "node": "n1", "model": "NVIDIA-H100-80GB-HBM3"}
        assert value(metrics, "gpuplace_node_gpus", **east) == 8
        assert value(metrics, "gpuplace_node_gpus_allocated", **east) == 0.25  # two pods of an eighth each
        assert value(metrics, "gpuplace_node_gpu_memory_bytes", **east) == 8 * 81920 * MIB
        assert value(metrics, "gpuplace_node_gpu_memory_allocated_bytes", **east) == 2 * 9420 * MIB
        h100[0] = replace(h100[0], share_allocated_milli=1250)  # read again at each scrape
        assert value(metrics, "gpuplace_node_gpus_allocated", **east) == 1.25
        assert value(metrics, "gpuplace_node_gpus_allocated", cluster="west", node="a1",
                     model="NVIDIA-A100-SXM4-40GB") == 1
    assert value(metrics, "gpuplace_node_gpus", **east) is None  # the placement service stopped


def test_a_scale_hint_sets_nodes_per_shape_and_the_next_replaces_it():
    metrics = PrometheusMetrics(process_metrics=False)
    metrics.scale_hint("east", [("8xH100:96c:768Gi", "capacity", 3), ("2xA100:64c:256Gi", "fragmentation", 1)])
    metrics.scale_hint("west", [("8xH100:96c:768Gi", "capacity", 1)])
    assert value(metrics, "gpuplace_scale_hint_nodes", cluster="east", shape="8xH100:96c:768Gi",
                 blocked_by="capacity") == 3
    assert value(metrics, "gpuplace_scale_hint_nodes", cluster="east", shape="2xA100:64c:256Gi",
                 blocked_by="fragmentation") == 1
    metrics.scale_hint("east", [("8xH100:96c:768Gi", "capacity", 2)])
    assert value(metrics, "gpuplace_scale_hint_nodes", cluster="east", shape="8xH100:96c:768Gi",
                 blocked_by="capacity") == 2
    assert value(metrics, "gpuplace_scale_hint_nodes", cluster="east", shape="2xA100:64c:256Gi",
                 blocked_by="fragmentation") is None  # no longer hinted: gone, not stale
    metrics.scale_hint("east", ())
    assert value(metrics, "gpuplace_scale_hint_nodes", cluster="east", shape="8xH100:96c:768Gi",
                 blocked_by="capacity") is None
    assert value(metrics, "gpuplace_scale_hint_nodes", cluster="west", shape="8xH100:96c:768Gi",
                 blocked_by="capacity") == 1  # another cluster's hint stays


def test_slo_attainment_is_over_the_windows_of_the_horizon_and_misses_add_up():
    now = [1000.0]
    metrics = PrometheusMetrics(process_metrics=False, slo_horizon_s=300.0, clock=lambda: now[0])
    metrics.latency_window("east", "slam", 1000, 100)  # 90% within deadline
    now[0] += 200
    metrics.latency_window("east", "slam", 1000, 0)
    metrics.latency_window("east", "detection", 30, 3)
    assert value(metrics, "gpuplace_slo_attainment_ratio", cluster="east", workload="slam") == pytest.approx(0.95)
    assert value(metrics, "gpuplace_deadline_misses_total", cluster="east", workload="slam") == 100
    now[0] += 150  # the first window is older than the horizon now
    assert value(metrics, "gpuplace_slo_attainment_ratio", cluster="east", workload="slam") == 1.0
    assert value(metrics, "gpuplace_deadline_misses_total", cluster="east", workload="slam") == 100  # a counter
    now[0] += 300  # no window in the horizon: no attainment to report
    assert value(metrics, "gpuplace_slo_attainment_ratio", cluster="east", workload="slam") is None
    assert value(metrics, "gpuplace_slo_attainment_ratio", cluster="east", workload="detection") is None


def test_cluster_gauges_are_read_at_the_scrape_and_two_workers_pending_pods_add_up():
    metrics = PrometheusMetrics(process_metrics=False)
    pending = {"unschedulable": 3}
    one = lambda: [ClusterGauges("east", dict(pending), 0.125, 2048.0)]  # noqa: E731
    two = lambda: [ClusterGauges("east", {"unschedulable": 1, "binding": 2}, None, None),  # noqa: E731
                   ClusterGauges("west", {}, None, None)]
    with metrics.watching(one), metrics.watching(two):
        assert value(metrics, "gpuplace_pending_pods", cluster="east", reason="unschedulable") == 4
        pending["unschedulable"] = 5  # read again at each scrape, not when registered
        assert value(metrics, "gpuplace_pending_pods", cluster="east", reason="unschedulable") == 6
        assert value(metrics, "gpuplace_pending_pods", cluster="east", reason="binding") == 2
        assert value(metrics, "gpuplace_pending_pods", cluster="west", reason="defrag") == 0
        assert value(metrics, "gpuplace_stranded_gpu_share", cluster="east") == 0.125
        assert value(metrics, "gpuplace_stranded_gpu_memory_bytes", cluster="east") == 2048 * MIB
        assert value(metrics, "gpuplace_stranded_gpu_share", cluster="west") is None  # not measured yet
    assert value(metrics, "gpuplace_pending_pods", cluster="east", reason="unschedulable") is None


def test_a_failing_source_costs_its_own_gauges_only(caplog):
    metrics = PrometheusMetrics(process_metrics=False)
    assert value(metrics, "gpuplace_outbox_backlog_rows") is None  # no relay counted it: nothing to say
    metrics.dead_lettered("gpuplace.pods.v1")
    metrics.outbox_backlog(7)

    def broken() -> list[ClusterGauges]:
        raise RuntimeError("a bug in the placement service")

    with metrics.watching(broken), metrics.watching(lambda: [ClusterGauges("east", {"queued": 1}, 0.0, 0.0)]):
        assert value(metrics, "gpuplace_pending_pods", cluster="east", reason="queued") == 1
    assert "reading cluster gauges failed" in caplog.text
    assert value(metrics, "gpuplace_dead_letters_total", topic="gpuplace.pods.v1") == 1
    assert value(metrics, "gpuplace_outbox_backlog_rows") == 7


class Lag:
    def __init__(self, lags: dict[tuple[str, int], int]) -> None:
        self.value = lags
        self.hang = False

    async def lags(self) -> dict[tuple[str, int], int]:
        if self.hang:
            await asyncio.Event().wait()
        return dict(self.value)


async def test_consumer_lag_is_refreshed_before_a_scrape_and_a_silent_consumer_keeps_its_last(monkeypatch):
    monkeypatch.setattr("gpuplace.adapters.metrics.REFRESH_TIMEOUT_S", 0.05)
    metrics = PrometheusMetrics(process_metrics=False)
    pods, latency = Lag({("gpuplace.pods.v1", 0): 12, ("gpuplace.pods.v1", 3): 0}), Lag({("gpuplace.latency.v1", 1): 4})
    metrics.track_lag(pods)
    metrics.track_lag(latency)
    await metrics.refresh()
    assert value(metrics, "gpuplace_consumer_lag_records", topic="gpuplace.pods.v1", partition="0") == 12
    assert value(metrics, "gpuplace_consumer_lag_records", topic="gpuplace.latency.v1", partition="1") == 4

    pods.value = {("gpuplace.pods.v1", 3): 2}  # partition 0 went to another worker
    latency.hang = True
    await asyncio.wait_for(metrics.refresh(), 1 + REFRESH_TIMEOUT_S)
    assert value(metrics, "gpuplace_consumer_lag_records", topic="gpuplace.pods.v1", partition="0") is None
    assert value(metrics, "gpuplace_consumer_lag_records", topic="gpuplace.pods.v1", partition="3") == 2
    assert value(metrics, "gpuplace_consumer_lag_records", topic="gpuplace.latency.v1", partition="1") == 4

    del latency  # its consumer stopped and was dropped (a service restarted in process)
    gc.collect()
    await metrics.refresh()
    assert value(metrics, "gpuplace_consumer_lag_records", topic="gpuplace.latency.v1", partition="1") is None


def test_the_readme_lists_exactly_the_metrics_the_registry_exposes():
    metrics = PrometheusMetrics(process_metrics=False)
    exposed = {family.name for family in text_string_to_metric_families(metrics.exposition().decode())}
    exposed = {f"{name}_total" if name in _counters(metrics) else name for name in exposed}
    section = README.read_text().split("## Metrics and health", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(gpuplace_[a-z_]+)`", section, flags=re.M))
    assert listed == exposed


def _counters(metrics: PrometheusMetrics) -> set[str]:
    return {family.name for family in metrics.registry.collect() if family.type == "counter"}
