"""Windows refit the latency model, and the next placement reads the refit: a GPU whose predicted p95 would pass
the deadline with one more pod is refused, though no pod there has missed its deadline yet (issue 38)."""

import json

import pytest

from gpuplace.contracts.events import LatencyWindow
from gpuplace.usecases import deciding as placement_module  # MODEL_REFRESH_S is read there
from gpuplace.usecases.decide import decider
from gpuplace.usecases.ingest import ingest_latency
from gpuplace.usecases.latency_learning import MODEL_NAME
from gpuplace.usecases.placement import PlacementService
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory


def detector(name: str):
    return pod_event(name, memory_mib=4000, frame_rate_hz=30.0, deadline_ms=33.3, workload="detector")


def window(pod: str) -> LatencyWindow:
    # GPU-bound but within the deadline: p95 29 ms of 33.3 (no slo_violation), well above the solo floor
    return LatencyWindow(cluster="east", namespace="robots", pod=pod, workload="detector", node="n1", gpu_index=0,
                         window_s=10, frames=3000, p50_ms=20.0, p95_ms=29.0, p99_ms=31.0, deadline_ms=33.3,
                         co_runners=["robots/det-1" if pod == "det-0" else "robots/det-0"])


@pytest.mark.parametrize("refresh_s", [0.0, 3600.0])
async def test_the_next_placement_reads_the_model_the_windows_refit(monkeypatch, refresh_s):
    monkeypatch.setattr(placement_module, "MODEL_REFRESH_S", refresh_s)
    uow_factory, api = FakeUnitOfWorkFactory(), FakeClusterApi()
    placement = PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit")
    await placement.on_node(node_event("n1", gpus=2, model="NVIDIA-H200", gpu_memory_mib=143771))
    for name in ("det-0", "det-1"):  # an unseen class: 0.29 of its service time on the GPU, both fit on GPU 0
        await placement.on_pod(detector(name))
    await placement.drain()
    assert {api.assignments[("robots", n)]["gpus"][0]["index"] for n in ("det-0", "det-1")} == {0}

    for _ in range(3):
        for name in ("det-0", "det-1"):
            await ingest_latency(uow_factory, window(name), consumer="latency-ingest")
    assert not [r for r in uow_factory.db.outbox if json.loads(r["payload"])["kind"] == "slo_violation"]
    async with uow_factory() as uow:
        state = await uow.latency.load_latency_model(MODEL_NAME)
    assert state is not None and state["classes"]["detector"]["work_fraction"] > 0.8  # most of its time on the GPU

    await placement.on_pod(detector("det-2"))
    await placement.drain()
    # read at once: a third pod would overload GPU 0 (3 x 0.8+ of a 14.5 ms service per 33.3 ms); never read
    # (the refresh an hour away): bestfit stacks it on GPU 0 as the prior allows
    assert api.assignments[("robots", "det-2")]["gpus"][0]["index"] == (1 if refresh_s == 0.0 else 0)
