"""`gpuplace bench explain` on a small fleet: every case gets the outcome it is named for, the report's figures are
consistent (explaining is the call's CPU less the decision's), and the report and its JSON are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplace.cli.bench_explain import bench_explain, build_view, cases, time_case
from gpuplace.usecases.decide import Decider


@pytest.fixture(scope="module")
def view():
    return build_view(60, 70.0, 0)


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.name)
def test_each_case_is_refused_or_placed_as_named_and_timed(view, case) -> None:
    row = time_case(view, Decider("gpuplace"), case, warmup=1, repeats=3)
    assert row["case"] == case.name and row["repeats"] == 3
    assert 0 < row["median_ms"] <= row["p90_ms"] <= row["max_ms"]
    assert row["decide_alone_ms"] > 0 and row["decide_alone_cpu_ms"] >= 0
    assert row["explain_cpu_ms"] == pytest.approx(max(row["cpu_median_ms"] - row["decide_alone_cpu_ms"], 0.0))
    outcome = str(row["outcome"])
    assert outcome.startswith("placed on ") if case.placeable else outcome.startswith("0/60 nodes are available: ")


def test_the_gpu_fit_case_says_kubes_reason_without_each_nodes_numbers(view) -> None:
    """The worst case of issue 16: kube's message counts one GpuFit reason per GPU model; the per-class reasons
    (after " | ") keep the largest hole."""
    row = time_case(view, Decider("gpuplace"), cases()[0], warmup=0, repeats=1)
    message, _, per_class = str(row["outcome"]).partition(" | ")
    assert "fewer than 8 GPU(s)" in message and "largest hole" not in message
    assert "largest hole" in per_class


def test_the_report_and_its_json_are_written(tmp_path: Path) -> None:
    out = tmp_path / "explain.md"
    bench_explain(nodes=30, policy="bestfit", fill_pct=50.0, warmup=0, repeats=2, seed=1, out=out)
    report = out.read_text()
    assert "| case | median ms |" in report and "explaining CPU ms" in report
    rows = json.loads(out.with_suffix(".json").read_text())
    assert [r["case"] for r in rows] == [c.name for c in cases()]
