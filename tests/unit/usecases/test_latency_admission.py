"""Latency-aware admission in the placement service, and the model learning from latency windows."""

import json

from gpuplace.contracts.events import LatencyWindow
from gpuplace.usecases.decide import decider
from gpuplace.usecases.ingest import ingest_latency
from gpuplace.usecases.placement import PlacementService
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory

H200 = {"model": "NVIDIA-H200", "gpu_memory_mib": 143771}


async def test_camera_pods_stop_sharing_a_gpu_before_deadlines_break():
    uow_factory, api = FakeUnitOfWorkFactory(), FakeClusterApi()
    placement = PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit")
    await placement.on_node(node_event("h200", gpus=1, **H200))
    for i in range(40):  # 40 x 2 GiB fits the memory of one H200 many times over; the deadlines do not
        await placement.on_pod(pod_event(f"cam-{i}", memory_mib=2048, frame_rate_hz=30.0, deadline_ms=33.3,
                                         workload="detection"))
    await placement.drain()
    admitted = len(api.bound)
    assert 1 <= admitted < 40
    waiting = [json.loads(r["payload"]) for r in uow_factory.db.outbox
               if json.loads(r["payload"])["kind"] == "unschedulable"]
    assert len(waiting) == 40 - admitted
    assert "p95" in json.dumps(waiting[0]["reasons"])  # the reason names the latency bound


async def test_pods_without_a_frame_rate_are_packed_by_memory_only():
    uow_factory, api = FakeUnitOfWorkFactory(), FakeClusterApi()
    placement = PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit")
    await placement.on_node(node_event("h200", gpus=1, **H200))
    for i in range(40):
        await placement.on_pod(pod_event(f"batch-{i}", memory_mib=2048, deadline_ms=None))
    await placement.drain()
    assert len(api.bound) == 40  # 40 x 2048 = 81920 MiB <= 143771 MiB


async def test_latency_windows_refit_the_fleet_model():
    uow_factory, api = FakeUnitOfWorkFactory(), FakeClusterApi()
    placement = PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit")
    await placement.on_node(node_event("h200", gpus=1, **H200))
    await placement.on_pod(pod_event("solo", memory_mib=2048, frame_rate_hz=30.0, workload="segmentation"))
    await placement.drain()
    assert uow_factory.db.latency_models == {}
    for _ in range(3):
        await ingest_latency(uow_factory, LatencyWindow(
            cluster="east", namespace="robots", pod="solo", workload="segmentation", window_s=10, frames=300,
            p50_ms=6.0, p95_ms=7.0, p99_ms=7.5, deadline_ms=80.0), consumer="latency-ingest")
    state = uow_factory.db.latency_models["fleet"]
    assert "segmentation" in json.dumps(state)
