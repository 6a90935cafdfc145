"""`gpuplace sim` and `gpuplace bench sim` on a small synthetic trace; errors are one-line usage errors, and a
`--plot` path is checked before the run and written exactly where it was asked for."""

import json

import pytest
import typer
from typer.testing import CliRunner

from gpuplace.cli import bench, choices, sim
from gpuplace.traces import alibaba

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n-{i},64000,262144,{2 + 2 * (i % 2)},{'V100M16' if i % 2 else 'T4'}\n" for i in range(8)
)
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join(
    f"p-{i:03d},{4000 + 1000 * (i % 3)},8192,{1 if i % 5 else 0},{[250, 500, 1000][i % 3] if i % 5 else 0},\n"
    for i in range(60)
)


@pytest.fixture
def app(tmp_path, monkeypatch):
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(NODES)
    (tmp_path / "openb_pod_list_default.csv").write_text(PODS)
    monkeypatch.setenv(alibaba.TRACE_DIR_ENV, str(tmp_path))
    root = typer.Typer()
    sim.register(root)
    bench.register(root)
    return root


def test_sim_json_gives_one_object_per_policy(app):
    result = CliRunner().invoke(app, ["sim", "--policy", "fgd,bestfit", "--seeds", "1-3", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert [o["policy"] for o in out] == ["fgd", "bestfit"]
    for key in ("seeds", "unallocated_pct_at_100", "unallocated_pct_at_130", "fragmentation_pct_at_100",
                "failed_pods", "seconds"):
        assert key in out[0]
    assert out[0]["seeds"] == [1, 2, 3]


def test_sim_table_and_plot(app, tmp_path):
    plot = tmp_path / "curves.png"
    result = CliRunner().invoke(app, ["sim", "--policy", "random", "--seeds", "5", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert "random" in result.output and plot.stat().st_size > 0


@pytest.mark.parametrize("args, message", [
    (["--policy", "nope"], "unknown policy nope"),
    (["--seeds", "51-42"], "bad seed range"),
    (["--seeds", "x"], "bad seed range"),
    (["--pods", "missing.csv"], "no such file"),
])
def test_bad_input_is_a_clear_usage_error(app, args, message):
    result = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["sim", *args])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_bench_writes_ours_beside_the_published(app, tmp_path):
    out = tmp_path / "bench.md"
    result = CliRunner().invoke(app, ["bench", "sim", "--seeds", "1", "--policies", "fgd", "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "| default |" in text and "(4.77;" in text
    assert json.loads(out.with_suffix(".json").read_text())[0]["policy"] == "fgd"


def test_seed_parsing():
    assert choices.parse_seeds("42-44,50") == [42, 43, 44, 50]
    with pytest.raises(ValueError):
        choices.parse_seeds("3-1")


def test_sim_robotics_scenario_writes_its_plot_at_the_path_given(app, tmp_path):
    plot = tmp_path / "F"  # no extension: png, written at F itself (matplotlib alone would write F.png)
    result = CliRunner().invoke(app, ["sim", "--scenario", "robotics", "--policy", "exclusive", "--seeds", "0",
                                      "--json", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["policy"] == "exclusive"
    assert plot.read_bytes().startswith(b"\x89PNG") and not (tmp_path / "F.png").exists()


@pytest.mark.parametrize("where, message", [
    ("missing/curves.png", "does not exist"),
    (".", "is a directory"),
    ("curves.xyz", "cannot write .xyz images"),
])
def test_the_plot_path_is_checked_before_the_run(app, tmp_path, where, message):
    plot = tmp_path / where
    result = CliRunner(env={"COLUMNS": "250"}).invoke(
        app, ["sim", "--scenario", "robotics", "--policy", "exclusive", "--seeds", "0", "--json", "--plot", str(plot)])
    assert result.exit_code == 2 and message in result.output and "--plot" in result.output
    assert "slo_attainment" not in result.output  # refused before the run, not after it
