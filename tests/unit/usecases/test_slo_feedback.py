"""A pod past its deadline closes its GPU to new pods and is marked for a move (issue 6, SLO feedback)."""

import json

from gpuplace.contracts.events import LatencyWindow, PlacementEvent
from gpuplace.usecases.decide import decider
from gpuplace.usecases.ingest import ingest_latency
from gpuplace.usecases.placement import PlacementService
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory


def window(pod: str, p95_ms: float, *, deadline_ms: float = 80.0) -> LatencyWindow:
    return LatencyWindow(cluster="east", namespace="robots", pod=pod, workload="slam", window_s=10, frames=125,
                         p50_ms=p95_ms / 2, p95_ms=p95_ms, p99_ms=p95_ms * 1.2, deadline_ms=deadline_ms)


async def test_a_deadline_miss_closes_the_gpu_and_later_pods_go_elsewhere():
    uow_factory, api = FakeUnitOfWorkFactory(), FakeClusterApi()
    placement = PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit")
    await placement.on_node(node_event("n1", gpus=2))
    await placement.on_pod(pod_event("slam-0", memory_mib=4000))
    await placement.drain()
    assert api.assignments[("robots", "slam-0")]["gpus"][0]["index"] == 0

    await ingest_latency(uow_factory, window("slam-0", p95_ms=70.0), consumer="latency-ingest")  # within deadline
    await ingest_latency(uow_factory, window("slam-0", p95_ms=95.0), consumer="latency-ingest")  # 95 > 80 ms
    await ingest_latency(uow_factory, window("slam-0", p95_ms=99.0), consumer="latency-ingest")  # reported once
    violations = [json.loads(r["payload"]) for r in uow_factory.db.outbox
                  if json.loads(r["payload"])["kind"] == "slo_violation"]
    assert len(violations) == 1 and violations[0]["pod"] == "slam-0" and violations[0]["node"] == "n1"
    assert uow_factory.db.gpus[("east", "n1", 0)]["slo_blocked_at"] is not None
    assert next(iter(uow_factory.db.pods.values()))["move_requested_at"] is not None

    await placement.on_placement(PlacementEvent.model_validate(violations[0]))
    await placement.on_pod(pod_event("slam-1", memory_mib=4000))  # best fit would pick GPU 0 again
    await placement.drain()
    assert api.assignments[("robots", "slam-1")]["gpus"][0]["index"] == 1
