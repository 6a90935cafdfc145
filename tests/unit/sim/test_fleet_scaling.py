"""sim/fleet/scaling: the acting autoscaler adds the node waiting pods need, they land after the provisioning
delay, it removes its node once empty, and a run without it is as before."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import Stream
from gpuplace.core.model import Node, Pod
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.sim.fleet import FleetScenario, FleetSim, make_plan
from gpuplace.sim.fleet.headroom import placeholders, without
from gpuplace.sim.fleet.latency_view import grown_load
from gpuplace.sim.fleet.plan import (
    TRAINING,
    ClusterPlan,
    Deployment,
    FleetPlan,
    Job,
    Template,
    perception_pod,
    training_request,
)
from gpuplace.sim.fleet.scaling import NODE_PREFIX, Autoscale

A100 = "NVIDIA-A100-SXM4-40GB"
HOUR = 3600.0
SETTINGS = Autoscale(interval_s=300.0, grace_s=60.0, provision_s=300.0, unneeded_s=600.0)


def _job(name: str, at_s: float, hours: float) -> Job:
    pod = Pod(name, cpu_milli=48_000, memory_mib=262_144, gpu=training_request(8), workload_class=TRAINING)
    return Job(pod, TRAINING, "c0", at_s, hours * HOUR)


def _plan(jobs: list[Job], hours: float = 2.0, deployments: tuple[Deployment, ...] = ()) -> FleetPlan:
    """One cluster of one 8 x A100 node, the given training jobs and deployments (replicas constant), no churn;
    pods submitted in the first 5 s are before the warm-up ends (their waits are not counted)."""
    scenario = FleetScenario(regions=1, clusters_per_region=1, gpus_per_cluster=8, days=hours / 24.0, warmup_s=5.0,
                             daily_swing=0.0)
    node = Node.with_gpus("n0", 96_000, 786_432, 8, A100, 40_960)
    typical = [j.pod for j in jobs] + [perception_pod(d, d.templates[0], 0) for d in deployments]
    return FleetPlan(scenario, 7, (ClusterPlan("c0", "us-east", (node,)),), deployments, tuple(jobs), (),
                     {"c0": typical})


def _deployment(replicas: int) -> Deployment:
    """Replicas of 30 GiB each: one per A100 40 GB."""
    return Deployment("seg", "c0", replicas, 0.0, (Template(0, "segmentation", 30_720, 2000, 8192, 10.0, 8.0),), ())


def test_a_waiting_job_gets_a_node_that_joins_after_the_delay_and_goes_once_empty():
    # A takes the node at 0 for 1 h; B (8 GPUs) arrives at 10 s and waits: the tick at 300 s requests a node,
    # it joins at 600 s and B lands then (590 s of waiting); B ends at 4200 s, just before that tick, which sees
    # the node empty; the tick of 4800 s (600 s later) removes it; the plan's node is never removed.
    sim = FleetSim(_plan([_job("a", 0.0, 1.0), _job("b", 10.0, 1.0)]), "gpuplace", autoscale=SETTINGS)
    result = sim.run()
    scaled = result["autoscale"]
    assert (scaled["nodes_added"], scaled["nodes_removed"], scaled["gpus_added"]) == (1, 1, 8)
    assert scaled["peak_added_gpus"] == 8 and scaled["peak_fleet_gpus"] == 16
    assert scaled["by_shape"] == {f"8x{A100}:96c:768Gi": 1}
    (added,) = sim.autoscaler.nodes if sim.autoscaler else ()
    assert (added.requested_s, added.joined_s, added.removed_s) == (300.0, 600.0, 4800.0)
    assert added.node.name.startswith(NODE_PREFIX)
    assert scaled["added_gpu_hours"] == pytest.approx(8 * (4800.0 - 300.0) / HOUR, abs=0.1)
    assert result["fleet"]["pending"][TRAINING] == {"n": 1, "p50_s": 590.0, "p99_s": 590.0}
    assert sim.clusters["c0"].snapshot.node_names == ("n0",)  # its node is gone, the plan's stays


def test_without_waiting_nothing_is_added_and_the_run_is_as_without_it():
    plan = _plan([_job("a", 0.0, 1.0), _job("b", 4000.0, 0.5)])  # b comes after a has left: nothing waits
    runs = [FleetSim(plan, "gpuplace", autoscale=scale).run() for scale in (SETTINGS, None)]
    for run in runs:
        run.pop("seconds"), run.pop("cpu_seconds")
    scaled = runs[0].pop("autoscale")
    assert scaled["nodes_added"] == 0 and scaled["runs"] == 0 and scaled["ticks"] == 24  # 5, 10, ... 120 min
    assert runs[0] == runs[1] and "autoscale" not in runs[1]


def test_on_a_loaded_fleet_it_shortens_the_waits_and_adds_gpus():
    small = FleetScenario(regions=2, clusters_per_region=1, gpus_per_cluster=32, days=0.5)
    off = FleetSim(make_plan(small, 3), "gpuplace").run()["fleet"]
    on = FleetSim(make_plan(small, 3), "gpuplace", autoscale=Autoscale()).run()
    assert on["autoscale"]["gpus_added"] > 0
    assert on["fleet"]["pending_gpu"]["p99_s"] < off["pending_gpu"]["p99_s"]
    assert on["fleet"]["gpu_hours"] > off["gpu_hours"]


def test_the_latency_view_keeps_the_cluster_s_streams_and_adds_empty_rows():
    nodes = [Node.with_gpus("n0", 8000, 65536, 2, A100, 40_960)]
    load = GpuLoad.for_snapshot(ClusterSnapshot(nodes))
    load.charge("p", 0, (1,), Stream(30.0, "detector", 10.0, 33.3))
    grown = ClusterSnapshot(nodes).appended([Node.with_gpus("n1", 8000, 65536, 4, "NVIDIA-H100-80GB-HBM3", 81_920)])
    out = grown_load(load, grown)
    assert out.frame_rate_hz.shape[:2] == (2, 4) and out.frame_rate_hz[0, 1, 0] == 30.0
    assert not out.frame_rate_hz[1].any() and np.isinf(out.deadline_ms[1]).all()
    assert out.speed[0] == load.speed[0] and out.speed[1] != load.speed[0]
    assert load.frame_rate_hz.shape[:2] == (1, 2)  # the cluster's load is untouched
    with pytest.raises(ValueError, match="fewer than"):
        grown_load(out, ClusterSnapshot(nodes))


def test_headroom_keeps_room_for_more_replicas_and_keeps_the_node_that_holds_it():
    plan = _plan([], deployments=(_deployment(4),))  # 4 replicas take 4 of the node's 8 GPUs
    fits = FleetSim(plan, "gpuplace", autoscale=replace(SETTINGS, headroom=1.0)).run()["autoscale"]
    assert fits["nodes_added"] == 0 and fits["runs"] == 24  # 4 more fit on the free GPUs: asked, nothing to add
    sim = FleetSim(plan, "gpuplace", autoscale=replace(SETTINGS, headroom=2.0))
    spare = sim.run()["autoscale"]  # 8 more do not: a node for the other 4, kept all along though empty
    assert (spare["nodes_added"], spare["nodes_removed"], spare["peak_added_gpus"]) == (1, 0, 8)
    running = sim.clusters["c0"].running.values()
    assert sim.clusters["c0"].snapshot.n_nodes == 2 and len(running) == 4 and {r.node for r in running} == {"n0"}
    pods, streams = placeholders(plan, "c0", 0.0, 0.5)
    assert [p.name for p in pods] == ["headroom-seg-0", "headroom-seg-1"] and set(streams) == {p.name for p in pods}
    assert pods[0].gpu.memory_mib == 30_720 and streams[pods[0].name].frame_rate_hz == 10.0
    assert placeholders(plan, "c0", 0.0, 0.0) == ([], {})
    closed = without(sim.clusters["c0"].snapshot, "autoscaled-c0-0")
    assert not closed.free_memory_mib[1].any() and closed.cpu_free_milli[1] == 0
    assert sim.clusters["c0"].snapshot.free_memory_mib[1].all()  # a copy


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="positive interval"):
        Autoscale(interval_s=0)
    with pytest.raises(ValueError, match="non-negative"):
        Autoscale(headroom=-0.1)
    with pytest.raises(ValueError, match="max_nodes_per_cluster"):
        Autoscale(max_nodes_per_cluster=0)


def test_the_cli_scales_the_fleet_with_autoscale(tmp_path):
    import json

    import typer
    from typer.testing import CliRunner

    from gpuplace.cli import sim

    app = typer.Typer()
    sim.register(app)
    app.command("noop")(lambda: None)
    args = ["sim", "--scenario", "fleet", "--policy", "gpuplace", "--days", "0.25", "--seeds", "1",
            "--regions", "1", "--gpus-per-cluster", "16"]
    result = CliRunner().invoke(app, [*args, "--json", "--autoscale", "--save-runs", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)[0]
    (run,) = out["by_seed"]
    assert run["autoscale"]["interval_s"] == SETTINGS.interval_s and run["autoscale"]["ticks"] == 72
    assert out["autoscale"]["gpus_added"] == run["autoscale"]["gpus_added"]
    assert (tmp_path / "gpuplace-autoscale-seed1.json").exists()
    printed = CliRunner().invoke(app, [*args, "--autoscale"])
    assert printed.exit_code == 0 and "the acting autoscaler" in printed.output
    plain = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)[0]
    assert "autoscale" not in plain and "autoscale" not in plain["by_seed"][0]
    refused = CliRunner().invoke(app, [*args, "--autoscale-headroom", "0.1"])
    assert refused.exit_code == 2 and "needs" in refused.output  # the rich box may wrap the rest
