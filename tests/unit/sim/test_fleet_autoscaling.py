"""sim/fleet/autoscaling: both autoscalers asked, as pods wait in the fleet simulator, without changing the run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from gpuplace.sim.fleet import FleetScenario, FleetSim, make_plan
from gpuplace.sim.fleet.autoscaling import AUTOSCALERS, AutoscalerComparison

SMALL = FleetScenario(regions=2, clusters_per_region=1, gpus_per_cluster=32, days=0.5)


def _without_timing(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("seconds", "cpu_seconds")}


def _state(sim: FleetSim) -> list[tuple]:
    """Everything of each cluster an observer could disturb: the snapshot's free room, the queue and the policy."""
    out = []
    for cluster in sim.clusters.values():
        s = cluster.snapshot
        out.append((s.uid, s.node_names, s.free_share_milli.copy(), s.free_memory_mib.copy(), s.cpu_free_milli.copy(),
                    s.memory_free_mib.copy(), s.version.copy(), [p.name for p in cluster.waiting_pods()],
                    sorted(cluster.running), id(cluster.policy)))
    return out


def _same(before: list[tuple], after: list[tuple]) -> None:
    assert len(before) == len(after)
    for b, a in zip(before, after, strict=True):
        for x, y in zip(b, a, strict=True):
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, y)
            else:
                assert x == y


def test_each_observation_records_both_autoscalers_and_leaves_the_simulation_as_it_was():
    comparison = AutoscalerComparison(every_h=2)
    checked = [0]

    def observe(sim: FleetSim, now_s: float) -> None:
        before = _state(sim)
        comparison(sim, now_s)
        _same(before, _state(sim))
        checked[0] += 1

    with_it = FleetSim(make_plan(SMALL, 3), "gpuplace", observer=observe).run()
    without = FleetSim(make_plan(SMALL, 3), "gpuplace").run()
    assert _without_timing(with_it) == _without_timing(without)  # same KPIs, series, decisions: nothing leaked
    assert checked[0] == 13  # hourly from 0 to 12 h

    obs = comparison.observations
    assert obs and {o.t_h % 2 for o in obs} == {0}  # every second hour only
    assert all(o.waiting_gpu > 0 and [r.autoscaler for r in o.runs] == list(AUTOSCALERS) for o in obs)
    needing = [o for o in obs if any(r.nodes_added for r in o.runs)]
    assert needing, "on this fleet GPU pods wait for room that only new nodes give"
    for o in needing:
        for r in o.runs:  # what each would add, by shape, and whether that placed every waiting pod
            assert r.nodes_added == sum(r.by_shape.values()) and r.placed + len(r.unplaced) == o.waiting

    totals = comparison.totals()
    for scope in ("all", "needs_nodes", "needs_nodes_both_placed_all"):
        t = totals[scope]
        assert t["hints_fewer"] + t["hints_equal"] + t["hints_more"] == t["observations"]
    assert totals["all"]["observations"] == len(obs) and totals["needs_nodes"]["observations"] == len(needing)
    assert totals["all"]["whole_gpu_nodes"] == sum(o.run("whole-gpu").nodes_added for o in obs) > 0
    assert totals["all"]["hint_driven_nodes"] == sum(o.run("hint-driven").nodes_added for o in obs) > 0
    assert sum(totals["whole_gpu"]["by_shape"].values()) == totals["all"]["whole_gpu_nodes"]


def test_the_comparison_is_deterministic_and_refuses_a_bad_interval():
    runs = []
    for _ in range(2):
        comparison = AutoscalerComparison(every_h=4)
        FleetSim(make_plan(SMALL, 5), "bestfit", observer=comparison).run()
        runs.append([o.as_dict() for o in comparison.observations])
    assert runs[0] == runs[1] and runs[0]
    with pytest.raises(ValueError, match="every_h"):
        AutoscalerComparison(every_h=0)


def test_the_cli_adds_the_autoscaler_totals_per_seed(tmp_path):
    from gpuplace.cli import sim

    app = typer.Typer()
    sim.register(app)
    app.command("noop")(lambda: None)
    result = CliRunner().invoke(app, ["sim", "--scenario", "fleet", "--policy", "bestfit", "--days", "0.25",
                                      "--seeds", "1-2", "--regions", "1", "--gpus-per-cluster", "16", "--json",
                                      "--autoscalers", "3", "--save-runs", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)[0]
    assert [r["seed"] for r in out["autoscalers"]["by_seed"]] == [1, 2]
    assert isinstance(out["autoscalers"]["hints_fewer_on_every_seed"], bool)
    assert all("autoscalers" in r and "autoscaler_observations" not in r for r in out["by_seed"])
    saved = json.loads((tmp_path / "bestfit-seed1.json").read_text())
    assert saved["autoscalers"]["every_h"] == 3
    assert len(saved["autoscaler_observations"]) == saved["autoscalers"]["all"]["observations"]
