"""The harness on a fleet so small that one pod's arrival steps over the 100% mark (issue 39)."""

import numpy as np

from gpuplace.cli import sim
from gpuplace.core.model import GpuRequest, Node, Pod
from gpuplace.sim import kpi, simulator

# 3 nodes x 4 GPUs: a 4-GPU job moves the arrived demand by 33% of capacity.
NODES = [Node.with_gpus(f"n{i}", 64000, 262144, 4, "V100M16", 16384) for i in range(3)]
PODS = [Pod(f"j{i}", 4000, 8192, GpuRequest(4, 1000)) for i in range(3)] + [
    Pod(f"s{i}", 1000, 1024, GpuRequest(1, share)) for i, share in enumerate([300, 500, 700, 1000])]


def _jumping_seeds() -> list[simulator.SimulationResult]:
    """Seeds whose arrivals put no row within 99..101% (the averaged reading gives NaN)."""
    out = []
    for seed in range(20):
        result = simulator.run(NODES, PODS, "fgd", seed)
        if np.isnan(kpi.read_at(result.arrived_milli, result.allocated_pct(), result.total_gpus, 100)):
            out.append(result)
    return out


def test_arrivals_that_jump_over_the_mark_still_give_the_kpi_interpolated():
    jumping = _jumping_seeds()
    assert jumping, "the fleet is small enough for some seed to jump over 99..101%"
    for result in jumping:
        value = result.unallocated_pct_at(100)
        assert value is not None and not np.isnan(value)
        step = int(np.searchsorted(result.arrived_milli, result.total_gpus * 1000))  # first row past the mark
        either_side = 100.0 - result.allocated_pct()[[step - 1, step]]
        assert min(either_side) - 0.01 <= value <= max(either_side) + 0.01


def test_a_seed_short_of_the_mark_is_counted_apart_and_the_means_stay_numbers():
    reached = sim.RunSummary("t", "fgd", 1, 5.0, 4.0, 1.0, 10.0, 0, {}, 10, 0.1, {})
    short = sim.RunSummary("t", "fgd", 2, None, None, None, None, 0, {}, 9, 0.1, {})
    summary = sim.summarise([reached, short])
    assert summary["seeds_short_of_100"] == [2]
    assert summary["unallocated_pct_at_100"] == 5.0 and summary["unallocated_pct_at_130"] == 4.0
    assert sim.summarise([short])["unallocated_pct_at_100"] is None


def test_gpuplace_sim_prints_no_nan_on_such_a_fleet(tmp_path, monkeypatch):
    import json

    import typer
    from typer.testing import CliRunner

    from gpuplace.traces import alibaba

    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n-{i},64000,262144,4,V100M16\n" for i in range(3)))
    (tmp_path / "openb_pod_list_default.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        + "".join(f"j-{i},4000,8192,4,1000,\n" for i in range(3))
        + "".join(f"s-{i},1000,1024,1,{[300, 500, 700, 1000][i % 4]},\n" for i in range(8)))
    monkeypatch.setenv(alibaba.TRACE_DIR_ENV, str(tmp_path))
    root = typer.Typer()
    sim.register(root)
    root.command("noop")(lambda: None)  # two commands: typer keeps `sim` as a sub-command
    result = CliRunner().invoke(root, ["sim", "--policy", "fgd,gpuplace", "--seeds", "0-19", "--json"])
    assert result.exit_code == 0, result.output
    assert "NaN" not in result.output
    for summary in json.loads(result.output):
        by_seed = dict(zip(summary["seeds"], summary["unallocated_pct_at_100_by_seed"], strict=True))
        # the harness trims a trace that asks over 130% by dropping random pods: a big one can take the stream
        # below 100% (seed 16 ends at 97.5%) -- that seed is named, has no figure, and the mean is of the others
        assert summary["seeds_short_of_100"] == [s for s, v in by_seed.items() if v is None] == [16]
        reached = [v for v in by_seed.values() if v is not None]
        assert summary["unallocated_pct_at_100"] == round(sum(reached) / len(reached), 3)
