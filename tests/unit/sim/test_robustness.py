"""The robustness suite's generator and runner (sim/robustness.py) and its command's quick mode."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from gpuplace.cli import app as cli
from gpuplace.core.demand import nominal_share_milli
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.sim import robustness


def test_a_case_is_the_same_for_the_same_seed_and_differs_across_seeds():
    family = robustness.FAMILIES["v100-8gpu"]
    one, again, other = (robustness.case(family, s, scale=0.2) for s in (5, 5, 6))
    assert one == again
    assert one.pods != other.pods
    assert len(one.nodes) == 10 and one.order == robustness.ORDERS[5 % 4]


@pytest.mark.parametrize("order", robustness.ORDERS)
def test_every_order_keeps_the_pods_and_puts_large_jobs_where_it_says(order):
    family = robustness.FAMILIES["two-models"]
    stream = robustness.case(family, 3, order, scale=0.3).pods
    drawn = robustness.case(family, 3, "random", scale=0.3).pods
    assert sorted(p.name for p in stream) == sorted(p.name for p in drawn)
    large = [i for i, p in enumerate(stream) if p.gpu.count >= robustness.LARGE_GPUS]
    assert large, "the family draws large jobs"
    if order == "large-first":
        assert large == list(range(len(large)))
    if order == "large-last":
        assert large == list(range(len(stream) - len(large), len(stream)))


ISSUE_39 = ("mixed-96", "mixed-200", "cpu-heavy-144", "slices-128", "cpu-slices-160")


@pytest.mark.parametrize("name", ISSUE_39)
def test_the_wider_families_are_small_fleets_of_three_models_on_nodes_of_2_4_and_8_gpus(name):
    family = robustness.FAMILIES[name]
    gpus = sum(count * per_node for count, per_node, *_ in family.nodes)
    assert 96 <= gpus <= 200
    assert len({model for _, _, (model, _), _, _ in family.nodes}) >= 3
    assert len({mib for _, _, (_, mib), _, _ in family.nodes}) >= 3
    assert {per_node for _, per_node, *_ in family.nodes} == {2, 4, 8}
    assert family.orders == robustness.ORDERS


def test_waves_alternate_whole_gpu_jobs_with_the_rest():
    stream = robustness.case(robustness.FAMILIES["mixed-96"], 3, "waves").pods
    whole = np.array([p.gpu.count > 0 and p.gpu.memory_mib is None for p in stream])
    phases = 1 + np.count_nonzero(whole[1:] != whole[:-1])  # runs of one kind
    assert not whole[0] and phases == 2 * robustness.WAVES


def test_cpu_heavy_first_puts_the_cpu_hungriest_quarter_first():
    run = robustness.case(robustness.FAMILIES["cpu-heavy-144"], 3, "cpu-heavy-first")
    snapshot = ClusterSnapshot(run.nodes)
    ratio = [p.cpu_milli / nominal_share_milli(p, snapshot) if p.gpu.needs_gpu else np.inf for p in run.pods]
    first = round(robustness.CPU_HEAVY_PART * len(ratio))
    assert min(ratio[:first]) >= max(ratio[first:])


def test_the_stream_reaches_past_the_100_percent_mark_and_the_kpi_is_read():
    run = robustness.case(robustness.FAMILIES["a100-4gpu"], 1, scale=0.25)
    first, second = robustness.run_case(run, "bestfit"), robustness.run_case(run, "bestfit")
    assert first.unallocated_pct_at_100 == second.unallocated_pct_at_100  # deterministic
    assert 0.0 <= first.unallocated_pct_at_100 < 100.0
    assert first.arrivals == len(run.pods)


def _invoke(*args: str):
    cli._register_all()
    return CliRunner().invoke(cli.app, ["bench", "robustness", *args])


def test_quick_mode_writes_the_table_and_every_seed(tmp_path):
    out = tmp_path / "robustness.md"
    result = _invoke("--quick", "--families", "v100-8gpu", "--policies", "gpuplace,fgd", "--out", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(out.with_suffix(".json").read_text())
    assert len(data["runs"]) == 2 * 4 and data["scale"] == 0.4
    rows = {r["policy"]: r for r in data["summary"]}
    assert rows["fgd"]["seeds_worse_than_fgd"] is None and rows["gpuplace"]["seeds"] == 4
    assert rows["gpuplace"]["worst"] >= rows["gpuplace"]["median"]
    assert "| v100-8gpu | gpuplace | 4 |" in out.read_text()


def test_unknown_family_is_a_usage_error(tmp_path):
    result = _invoke("--families", "nope", "--out", str(tmp_path / "r.md"))
    assert result.exit_code == 2 and "unknown family" in result.output


def test_a_run_short_of_the_mark_is_counted_apart_not_averaged():
    from gpuplace.cli.bench_robustness import render_markdown, summarise

    def outcome(policy, seed, value):
        return robustness.Outcome("f", policy, seed, "random", value, {}, 10, 0.1)

    rows = summarise([outcome("fgd", 0, 2.0), outcome("gpuplace", 0, 1.0),
                      outcome("fgd", 1, None), outcome("gpuplace", 1, None), outcome("gpuplace", 2, 3.0)])
    ours = next(r for r in rows if r["policy"] == "gpuplace")
    assert (ours["seeds"], ours["short_of_100"], ours["mean"]) == (2, 1, 2.0)
    assert ours["seeds_worse_than_fgd"] == 0  # seed 2 has no FGD figure to lose to
    assert "nan" not in render_markdown(rows, "cmd", 1.0, 1.0).lower()


def test_declared_gpuplace_is_told_the_runs_whole_gpu_shapes_and_runs_in_the_command(tmp_path):
    run = robustness.case(robustness.FAMILIES["mixed-96"], 2, scale=0.5)
    shapes = robustness.whole_gpu_shapes(run.pods)
    assert shapes and all(r.share_milli == 1000 and r.memory_mib is None for r in shapes)
    assert {(r.count, r.allowed_models) for r in shapes} == {
        (p.gpu.count, p.gpu.allowed_models) for p in run.pods if p.gpu.count and p.gpu.memory_mib is None}
    out = tmp_path / "r.md"
    result = _invoke("--quick", "--families", "mixed-96", "--policies", f"{robustness.DECLARED},fgd", "--out", str(out))
    assert result.exit_code == 0, result.output
    rows = {r["policy"]: r for r in json.loads(out.with_suffix(".json").read_text())["summary"]}
    assert rows[robustness.DECLARED]["seeds"] == 4 and rows[robustness.DECLARED]["seeds_worse_than_fgd"] is not None
    assert _invoke("--policies", "nope," + robustness.DECLARED, "--out", str(out)).exit_code == 2
