"""The fleet report's figures on a hand-made fleet (rows written through the repository, figures worked out by
hand below), and the same figures from a placement run's database and from its recorded log."""

from __future__ import annotations

import random

import pytest

from gpuplace.usecases.decide import decider
from gpuplace.usecases.fleet_report import (
    FleetReport,
    WorkloadLatency,
    summarize_windows,
    why_waiting,
)
from gpuplace.usecases.fleet_sources import from_database, from_log
from gpuplace.usecases.placement import PlacementService
from gpuplace.usecases.ports import GpuGrant
from tests.builders import node_event, pod_event
from tests.contract.store_contract import node_row, pod_row, window_row
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory
from tests.unit.usecases.test_replay import Recorder

GPU_FIT = "Tesla-V100-SXM2-16GB: 1 node(s): 0 of 1 GPU(s) with >= 732m and >= 12000 MiB free (largest hole 425m, " \
          "6964 MiB) (GpuFit)"


async def hand_made_fleet() -> FakeUnitOfWorkFactory:
    """east (region us-east): one node, two 16 GiB GPUs; pod a holds 9420 MiB (575m) of GPU 0, pod b (12000 MiB)
    waits on GpuFit, pod c is queued; five slam windows. west (eu-west): one 40 GiB GPU, nothing on it. lab: a
    node of the default region, no pod at all."""
    uow_factory = FakeUnitOfWorkFactory()
    async with uow_factory() as uow:
        await uow.nodes.upsert_node({**node_row("n1"), "cluster": "east", "region": "us-east"})
        await uow.nodes.upsert_node({**node_row("w1", gpus=1, gpu_memory_mib=40960), "cluster": "west",
                                     "region": "eu-west", "gpu_model": "A100"})
        await uow.nodes.upsert_node({**node_row("l1", gpus=1), "cluster": "lab"})
        for uid in ("a", "b", "c"):
            await uow.pods.upsert_pod({**pod_row(uid), "cluster": "east"})
        await uow.pods.upsert_pod({**pod_row("b"), "cluster": "east", "request": {
            "gpu_count": 1, "memory_mib_per_gpu": 12000}})
        await uow.allocations.reserve(cluster="east", pod_uid="a", node="n1", grants=[GpuGrant(0, 9420, 575)],
                                      cpu_milli=1000, memory_mib=1024, decision_id="d1")
        await uow.pods.set_pod_state("east", "a", "bound", node="n1")
        await uow.pods.set_pod_state("east", "b", "unschedulable", reason=GPU_FIT)
        for i, p95 in enumerate((10.0, 20.0, 30.0, 40.0, 50.0)):
            await uow.latency.add_latency_window({**window_row(f"s{i}"), "cluster": "east", "p95_ms": p95,
                                                "frames": 100, "deadline_misses": i, "deadline_ms": 45.0})
        await uow.commit()
    return uow_factory


async def test_the_figures_of_a_hand_made_fleet():
    report = await from_database(await hand_made_fleet())
    east, lab, west = sorted(report.clusters, key=lambda c: c.cluster)
    assert (east.region, west.region, lab.region) == ("us-east", "eu-west", "local")
    assert (east.nodes, east.gpus, east.gpus_in_use, east.gpu_memory_mib, east.gpu_memory_allocated_mib) == \
        (1, 2, 1, 32768, 9420)
    # M = {a: 1 GPU 9420 MiB (574m), b: 1 GPU 12000 MiB (732m)}, p = 1/2 each. Both fit GPU 1 (1000m free), and
    # for both GPU 0's 425m is too little: its 6964 MiB free are stranded for each shape.
    assert east.gpu_memory_stranded_mib == pytest.approx(6964.0)
    assert east.pods_placed == 1
    assert east.pods_waiting == {"unschedulable: GpuFit": 1, "queued": 1}
    (slam,) = east.latency
    assert (slam.workload, slam.windows, slam.frames, slam.deadline_misses) == ("slam", 5, 500, 10)
    assert slam.p95_ms == pytest.approx(48.0) and slam.worst_p95_ms == 50.0 and slam.deadline_ms == 45.0
    assert slam.slo_attainment == pytest.approx(0.98)
    # west: nothing holds its GPU and no pod makes a workload to measure against: allocated 0, stranded unknown
    assert (west.gpus, west.gpu_memory_mib, west.gpu_memory_allocated_mib) == (1, 40960, 0)
    assert west.gpu_memory_stranded_mib is None and lab.gpu_memory_stranded_mib is None

    fleet = report.fleet()
    assert (fleet.clusters, fleet.gpus, fleet.gpu_memory_mib, fleet.pods_waiting) == (3, 4, 32768 + 40960 + 16384, 2)
    assert fleet.gpu_memory_stranded_mib == pytest.approx(6964.0)
    assert fleet.stranded_pct == pytest.approx(100 * 6964 / (32768 + 40960 + 16384))
    assert fleet.slo_attainment == pytest.approx(0.98)
    regions = {t.name: t for t in report.regions()}
    assert sorted(regions) == ["eu-west", "local", "us-east"]
    assert regions["us-east"].allocated_pct == pytest.approx(100 * 9420 / 32768)
    assert regions["eu-west"].slo_attainment is None  # no frame there


async def test_a_report_reads_back_from_its_json_with_the_same_figures():
    report = await from_database(await hand_made_fleet())
    data = report.as_json()
    assert data["fleet"]["gpus"] == 4 and data["regions"][0]["name"] == "eu-west"
    assert data["clusters"][0]["cluster"] == "west"
    assert FleetReport.from_json(data).as_json() == data


async def test_only_the_clusters_asked_for_and_a_note_for_one_unknown():
    report = await from_database(await hand_made_fleet(), ["west", "nowhere"])
    assert [c.cluster for c in report.clusters] == ["west"]
    assert report.notes == ["cluster nowhere: the database knows no node or pod of it"]


def test_why_a_pod_waits_in_a_few_words():
    assert why_waiting({"state": "pending", "reason": None}) == "queued"
    assert why_waiting({"state": "pending", "reason": "conflict"}) == "pending: conflict"
    assert why_waiting({"state": "unschedulable", "reason": GPU_FIT + "; cpu-only: 2 node(s): no GPU (NodeRules)"}) \
        == "unschedulable: GpuFit+NodeRules"
    assert why_waiting({"state": "unschedulable", "reason": "reserve: capacity changed"}) == "unschedulable: reserve"


async def test_windows_summed_in_memory_as_the_store_sums_them():
    uow_factory = FakeUnitOfWorkFactory()
    rng = random.Random(5)
    windows = [{**window_row(f"p{i}"), "workload": rng.choice(["slam", "det"]), "p95_ms": rng.uniform(5, 90),
                "frames": rng.randrange(50, 300), "deadline_misses": rng.randrange(0, 9)} for i in range(40)]
    async with uow_factory() as uow:
        for w in windows:
            await uow.latency.add_latency_window(w)
        await uow.commit()
    async with uow_factory() as uow:
        stored = [WorkloadLatency(**r) for r in await uow.latency.latency_by_workload("contract")]
    summed = summarize_windows(windows)
    assert [w.workload for w in summed] == ["det", "slam"]
    for a, b in zip(summed, stored, strict=True):
        assert (a.windows, a.frames, a.deadline_misses, a.deadline_ms) == (b.windows, b.frames, b.deadline_misses,
                                                                           b.deadline_ms)
        assert a.p95_ms == pytest.approx(b.p95_ms) and a.worst_p95_ms == pytest.approx(b.worst_p95_ms)


async def test_a_placement_runs_database_and_its_log_give_the_same_figures():
    uow_factory, api = FakeUnitOfWorkFactory(), FakeClusterApi()
    recorder = Recorder(uow_factory, api, PlacementService(uow_factory, {"east": api}, decider("gpuplace"),
                                                           policy="gpuplace"))
    for i in range(4):
        await recorder.node(node_event(f"n{i}", gpus=2))
    rng = random.Random(3)
    running = []
    for i in range(60):
        event = pod_event(f"p-{i}", memory_mib=rng.choice([2048, 4096, 6000, 9420, 12000]), workload="slam")
        await recorder.pod(event)
        running.append(event)
        if i % 7 == 6:
            gone = running.pop(rng.randrange(len(running)))
            await recorder.pod(gone.model_copy(update={"kind": "deleted", "event_id": f"del-{gone.uid}"}))

    db = (await from_database(uow_factory)).clusters
    log = from_log(recorder.entries, source="log").clusters
    assert len(db) == len(log) == 1
    (d,), (g,) = db, log
    assert d.waiting > 0 and d.pods_placed > 0  # the run filled the fleet and had pods wait
    assert (g.region, g.nodes, g.gpus, g.gpus_in_use, g.gpu_memory_mib, g.gpu_memory_allocated_mib,
            g.pods_placed, g.pods_waiting) == \
        (d.region, d.nodes, d.gpus, d.gpus_in_use, d.gpu_memory_mib, d.gpu_memory_allocated_mib, d.pods_placed,
         d.pods_waiting)
    assert g.gpu_memory_stranded_mib == pytest.approx(d.gpu_memory_stranded_mib)
    assert d.gpu_memory_stranded_mib is not None and 0 < d.gpu_memory_stranded_mib <= \
        d.gpu_memory_mib - d.gpu_memory_allocated_mib
