"""What the use cases count, on Prometheus's client and in-memory ports: each scheduling attempt and bind where it
happens, the pods not bound yet and the GPU stranded as a scrape reads them, defragmentation plans and their
evictions, and the frames of latency windows."""

from __future__ import annotations

import pytest

from gpuplace.adapters.metrics import MIB, PrometheusMetrics
from gpuplace.contracts.events import LatencyWindow
from gpuplace.usecases.decide import decider
from gpuplace.usecases.ingest import ingest_latency
from gpuplace.usecases.placement import PlacementService
from tests.builders import node_event, pod_event
from tests.fakes import FakeUnitOfWorkFactory
from tests.unit.usecases.test_defrag import fragmented_fleet


@pytest.fixture
def metrics() -> PrometheusMetrics:
    return PrometheusMetrics(process_metrics=False)


def sample(metrics: PrometheusMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def attempts(metrics: PrometheusMetrics, result: str) -> float | None:
    return sample(metrics, "gpuplace_scheduling_attempts_total", cluster="east", result=result)


def pending(metrics: PrometheusMetrics, reason: str) -> float | None:
    return sample(metrics, "gpuplace_pending_pods", cluster="east", reason=reason)


async def test_attempts_binds_and_waiting_pods_are_counted_as_they_happen(uow_factory, api, metrics):
    placement = PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit", metrics=metrics)
    api.gone.add("gone-0")
    with metrics.watching(placement.cluster_gauges):
        await placement.on_node(node_event("small", gpu_memory_mib=8192))
        await placement.drain()  # the retry of waiting pods a node event starts: none wait yet
        await placement.on_pod(pod_event("big-0", memory_mib=12000))
        await placement.on_pod(pod_event("odd-0", request_error="gpu-memory: not a quantity"))
        await placement.on_pod(pod_event("slam-0", memory_mib=4000))
        await placement.on_pod(pod_event("gone-0", memory_mib=4000))
        await placement.drain()
        assert (attempts(metrics, "reserved"), attempts(metrics, "unschedulable"), attempts(metrics, "invalid")) == \
            (2, 1, 1)
        assert sample(metrics, "gpuplace_binds_total", cluster="east") == 1
        assert sample(metrics, "gpuplace_bind_failures_total", cluster="east", reason="gone") == 1
        assert sample(metrics, "gpuplace_scheduling_attempt_duration_seconds_count", result="reserved") == 2
        assert pending(metrics, "unschedulable") == 1 and pending(metrics, "binding") == 0

        await placement.on_node(node_event("large", gpu_memory_mib=16384))  # big-0 fits there
        await placement.drain()
        assert attempts(metrics, "reserved") == 3 and sample(metrics, "gpuplace_binds_total", cluster="east") == 2
        assert pending(metrics, "unschedulable") == 0


async def test_stranded_gpu_is_the_free_share_and_memory_the_recent_pods_could_not_use(uow_factory, api, metrics):
    placement = PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit", metrics=metrics)
    with metrics.watching(placement.cluster_gauges):
        await placement.on_node(node_event("n1", gpus=2))
        assert sample(metrics, "gpuplace_stranded_gpu_share", cluster="east") is None  # no pod seen: no workload
        await placement.on_pod(pod_event("slam-0", memory_mib=9420))
        await placement.drain()
        # 9420 of 16384 MiB is 574m of GPU 0; its 426m (6964 MiB) left cannot take another such pod, GPU 1 can
        assert sample(metrics, "gpuplace_stranded_gpu_share", cluster="east") == pytest.approx(426 / 2000)
        assert sample(metrics, "gpuplace_stranded_gpu_memory_bytes", cluster="east") == 6964 * MIB


async def test_gpu_capacity_and_allocation_per_node_follow_placements_and_deletions(uow_factory, api, metrics):
    placement = PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit", metrics=metrics)
    n1 = {"cluster": "east", "node": "n1", "model": "Tesla-V100-SXM2-16GB"}
    with metrics.watching(placement.cluster_gauges):
        await placement.on_node(node_event("n1", gpus=2))
        await placement.on_node(node_event("cpu", gpus=0))  # no GPUs: no series
        await placement.drain()  # the view re-read after the burst of node events
        assert sample(metrics, "gpuplace_node_gpus", **n1) == 2
        assert sample(metrics, "gpuplace_node_gpu_memory_bytes", **n1) == 2 * 16384 * MIB
        assert sample(metrics, "gpuplace_node_gpus_allocated", **n1) == 0
        slam = pod_event("slam-0", memory_mib=9420)
        await placement.on_pod(slam)
        await placement.on_pod(pod_event("whole-0", memory_mib=16384))
        await placement.drain()
        # 9420 MiB of a 16384 MiB GPU is a 575m share (rounded up: core/demand.py) plus one whole GPU
        assert sample(metrics, "gpuplace_node_gpu_memory_allocated_bytes", **n1) == (9420 + 16384) * MIB
        allocated = sample(metrics, "gpuplace_node_gpus_allocated", **n1)
        assert allocated is not None and 1.5 < allocated < 1.6
        assert sample(metrics, "gpuplace_node_gpus", cluster="east", node="cpu", model="") is None
        api.delete_pod("robots", "slam-0")
        await placement.on_pod(pod_event("slam-0", uid=slam.uid, kind="deleted"))
        assert sample(metrics, "gpuplace_node_gpus_allocated", **n1) == 1
        assert sample(metrics, "gpuplace_node_gpu_memory_allocated_bytes", **n1) == 16384 * MIB


async def test_each_pod_bound_is_timed_from_first_seen_pending(uow_factory, api, metrics):
    placement = PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit", metrics=metrics)
    await placement.on_node(node_event("n1", gpus=1))
    for name in ("a", "b", "too-big"):
        await placement.on_pod(pod_event(name, memory_mib=60000 if name == "too-big" else 4000))
    await placement.drain()
    # two bound (the one that fits nowhere is not observed); the fake's clock stamps first_seen_at in 1970, so
    # each waited decades by this process's clock: past the last bucket, still counted
    assert sample(metrics, "gpuplace_pod_scheduling_sli_duration_seconds_count", cluster="east") == 2
    assert sample(metrics, "gpuplace_pod_scheduling_sli_duration_seconds_bucket", cluster="east", le="+Inf") == 2


async def test_a_defragmentation_counts_its_plan_evictions_and_outcome(metrics):
    uow_factory, api, placement, _ = await fragmented_fleet(metrics=metrics)
    await placement.on_pod(pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0))
    await placement.drain()
    assert api.bound[("robots", "urgent")] == "n1"
    plans = {o: sample(metrics, "gpuplace_defrag_plans_total", cluster="east", outcome=o)
             for o in ("planned", "completed", "aborted")}
    assert plans == {"planned": 1, "completed": 1, "aborted": 0}
    assert sample(metrics, "gpuplace_evictions_total", cluster="east", outcome="evicted") == 1


async def test_an_eviction_a_disruption_budget_refuses_counts_as_refused_and_the_plan_as_aborted(metrics):
    _, api, placement, _ = await fragmented_fleet(refuse=True, metrics=metrics)
    await placement.on_pod(pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0))
    await placement.drain()
    assert sample(metrics, "gpuplace_evictions_total", cluster="east", outcome="refused") == 1
    assert sample(metrics, "gpuplace_evictions_total", cluster="east", outcome="evicted") == 0
    assert sample(metrics, "gpuplace_defrag_plans_total", cluster="east", outcome="aborted") == 1


async def test_latency_windows_count_their_misses_once_and_attainment_is_the_share_of_frames_in_time(metrics):
    uow_factory = FakeUnitOfWorkFactory()
    first = LatencyWindow(cluster="east", namespace="robots", pod="slam-0", workload="slam", window_s=10,
                          frames=300, p50_ms=20, p95_ms=40, p99_ms=45, deadline_ms=33.0, deadline_misses=30)
    second = first.model_copy(update={"event_id": "another", "deadline_misses": 0})
    for window in (first, first, second):  # the first one redelivered: counted once
        await ingest_latency(uow_factory, window, consumer="latency-ingest", metrics=metrics)
    assert sample(metrics, "gpuplace_deadline_misses_total", cluster="east", workload="slam") == 30
    assert sample(metrics, "gpuplace_slo_attainment_ratio", cluster="east", workload="slam") == pytest.approx(0.95)
