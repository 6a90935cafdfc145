"""usecases/scale_hints: a `scale_hint` event when pods have waited, once per change, and the gauge it sets."""

from __future__ import annotations

import asyncio
import json

import pytest

from gpuplace.adapters.metrics import PrometheusMetrics
from gpuplace.bootstrap import placement_worker
from gpuplace.contracts import topics
from gpuplace.contracts.events import GpuRequest
from gpuplace.usecases.decide import decider
from gpuplace.usecases.placement import PlacementService
from gpuplace.usecases.scale_hints import HintSettings, ScaleHinter, parse_shapes
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory

H100 = "NVIDIA-H100-80GB-HBM3:8:81559:96000:786432"


def hint_events(uow_factory: FakeUnitOfWorkFactory) -> list[dict]:
    return [json.loads(r["payload"]) for r in uow_factory.db.outbox if r["topic"] == topics.HINTS]


def wired(uow_factory: FakeUnitOfWorkFactory, api: FakeClusterApi, metrics: PrometheusMetrics,
          **settings: object) -> tuple[PlacementService, ScaleHinter]:
    worker = placement_worker(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit", metrics=metrics,
                              hints=HintSettings(**{"min_wait_s": 0.0, "interval_s": 0.0, **settings}))  # type: ignore[arg-type]
    assert worker.hints is not None
    return worker.service, worker.hints


async def settle(placement: PlacementService, hinter: ScaleHinter) -> None:
    await placement.drain()
    for _ in range(50):  # the hinter's check runs in its own task
        await asyncio.sleep(0.01)
        if not any(not t.done() for t in hinter._pending.values()):
            return


async def test_a_pod_too_big_for_the_fleet_gets_a_capacity_hint_naming_a_declared_shape_once(uow_factory, api):
    metrics = PrometheusMetrics(process_metrics=False)
    placement, hinter = wired(uow_factory, api, metrics, shapes=parse_shapes(H100))
    await placement.on_node(node_event("n1"))  # 2 x V100 16 GiB
    await placement.on_pod(pod_event("train-0", gpu=GpuRequest(gpu_count=4, share_milli_per_gpu=1000),
                                     frame_rate_hz=10.0, workload="occupancy-bev"))  # latency filter: not on new nodes
    await settle(placement, hinter)
    (event,) = hint_events(uow_factory)
    assert event["kind"] == "scale_hint" and event["cluster"] == "east" and event["waiting"] == 1
    assert event["blocked_by"] == {"capacity": 1}
    (addition,) = event["additions"]
    assert addition["shape"]["gpu_model"] == "NVIDIA-H100-80GB-HBM3" and addition["nodes"] == 1
    assert addition["blocked_by"] == "capacity"
    assert metrics.registry.get_sample_value("gpuplace_scale_hint_nodes", {
        "cluster": "east", "shape": addition["shape"]["name"], "blocked_by": "capacity"}) == 1

    await placement.on_pod(pod_event("train-0b", gpu=GpuRequest(gpu_count=4, share_milli_per_gpu=1000)))
    await settle(placement, hinter)
    assert len(hint_events(uow_factory)) == 2  # two pods wait now: the hint changed
    await placement.retry_waiting("east")
    await settle(placement, hinter)
    assert len(hint_events(uow_factory)) == 2  # tried again, same hint: not published again
    await hinter.drain()


async def test_no_hint_before_pods_have_waited_min_wait_s(uow_factory, api):
    placement, hinter = wired(uow_factory, api, PrometheusMetrics(process_metrics=False), min_wait_s=3600.0)
    await placement.on_node(node_event("n1"))
    await placement.on_pod(pod_event("big", memory_mib=20_000))
    await settle(placement, hinter)
    assert hint_events(uow_factory) == []
    assert any(not t.done() for t in hinter._pending.values())  # one check waits for the pod to have waited
    await hinter.drain()


def test_declared_shapes_are_parsed_and_a_bad_one_is_named() -> None:
    (shape,) = parse_shapes(H100)
    assert (shape.gpu_model, shape.gpu_count, shape.gpu_memory_mib) == ("NVIDIA-H100-80GB-HBM3", 8, 81559)
    assert parse_shapes("") == ()
    with pytest.raises(ValueError, match="'H100:8'"):
        parse_shapes(f"{H100}, H100:8")
