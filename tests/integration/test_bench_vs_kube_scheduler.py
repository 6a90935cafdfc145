"""`gpuplace bench pipeline --against kube-scheduler` on the real stack, small: 10 nodes, 40 pods, one repeat.

Both sides must bind every pod of their burst on the same fleet, the report must carry both with their ratios
and name kube-scheduler's client setting, the bench's kube-schedulers must be gone afterwards, and the stack's
own kube-schedulers (shared with other sessions) must be the same processes as before. gpuplace's side runs on
a database of the test's own, so the shared one's schema (another branch may have migrated it) cannot matter.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuplace.cli import app as cli
from gpuplace.harness.stack_env import cluster_kubeconfigs, stack_dir
from tests.integration.child_processes import our_kube_schedulers

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def _stack_schedulers() -> dict[str, str]:
    return {p.stem: p.read_text().strip() for p in (stack_dir() / "pids").glob("kube-scheduler-*.pid")}


async def test_small_comparison_binds_every_pod_on_both_sides_and_reports_both(
        kafka_bootstrap: str, fresh_database: str, tmp_path: Path) -> None:
    assert len(cluster_kubeconfigs()) >= 2, "the pipeline bench runs on the stack's two clusters"
    before = _stack_schedulers()
    assert before, f"the stack runs no kube-scheduler ({stack_dir()}/pids)"
    out = tmp_path / "vs.md"
    cli._register_all()
    env = {"COLUMNS": "200", "GPUPLACE_KAFKA_BOOTSTRAP": kafka_bootstrap, "GPUPLACE_DATABASE_URL": fresh_database}
    result = await asyncio.to_thread(
        CliRunner().invoke, cli.app, ["bench", "pipeline", "--nodes", "10", "--pods", "40", "--repeats", "1",
                                      "--against", "kube-scheduler", "--out", str(out)], env=env)
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"

    report = json.loads(out.with_suffix(".json").read_text())
    sides = {r["side"]: r for r in report["runs"]}
    assert [r["side"] for r in report["runs"]] == ["kube-scheduler", "gpuplace"]
    for side, run in sides.items():
        assert run["pods_bound"] == run["pods_submitted"] == 40, (side, run)
        assert run["gpus_overcommitted"] == 0 and run["bound_twice"] == 0, (side, run)
        assert run["binds_per_s"] > 0 and run["pending_to_bound_ms"]["p99"] > 0, (side, run)
        assert run["gpus_total"] == 80, (side, run)  # the same fleet: 10 nodes x 8 GPUs
        assert 0 < run["burst_cpu_s"]["wall_s"] < run["cpu_s"]["wall_s"], (side, run)  # a window within the run
    assert report["ratios"]["binds_per_s"] == pytest.approx(
        sides["gpuplace"]["binds_per_s"] / sides["kube-scheduler"]["binds_per_s"], abs=1e-3)
    assert report["ratios"]["p99"] == pytest.approx(
        sides["gpuplace"]["pending_to_bound_ms"]["p99"] / sides["kube-scheduler"]["pending_to_bound_ms"]["p99"],
        abs=1e-3)
    text = out.read_text()
    assert "| kube-scheduler |" in text and "| gpuplace |" in text and "| ratio of the medians |" in text
    assert "clientConnection.qps 5000, clientConnection.burst 10000" in text
    assert "Kubernetes v1." in text
    assert "| scheduler + kafka + postgres, ms per pod bound |" in text

    assert our_kube_schedulers() == [], "the bench left its kube-scheduler running"
    assert _stack_schedulers() == before, "the stack's kube-schedulers were restarted"
