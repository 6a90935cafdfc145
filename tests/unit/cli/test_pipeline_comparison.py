"""`bench pipeline --against kube-scheduler` without a stack: the report's medians, ratios and verdict, the GPUs
per node a whole-GPU burst needs, kube-scheduler's equivalent of a gpuplace pod, and its configuration."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpuplace.cli.bench_pipeline import gpuplace_client_limits
from gpuplace.harness import kube_scheduler_process, stack_env
from gpuplace.harness.kafka_users import password_variable
from gpuplace.harness.kube_scheduler_process import ClientLimits, config_text, find_binary
from gpuplace.harness.kube_scheduler_run import gpu_limit, whole_gpu_manifest
from gpuplace.harness.pipeline_comparison import whole_gpus_per_node
from gpuplace.harness.pipeline_comparison_report import (
    Setup,
    comparison,
    cpu_medians,
    markdown,
    medians,
    ratio,
    report_json,
)
from gpuplace.harness.pipeline_run import FLEET_LABEL, PipelineRun, RunConfig, pod_manifest
from gpuplace.settings import Settings
from gpuplace.sim import robotics_fleet


def run(side: str, repeat: int, binds: float, p99: float, *, bound: int = 40, p50: float = 100.0) -> dict[str, Any]:
    return {"side": side, "repeat": repeat, "run_id": f"{side[:2]}{repeat}", "clusters": {}, "pods_submitted": 40,
            "pods_bound": bound, "pods_unschedulable": 40 - bound, "gpus_overcommitted": 0, "bound_twice": 0,
            "gpus_used": bound, "gpus_total": 80, "gpu_memory_used_pct": 1.0,
            "pending_to_bound_ms": {"p50": p50, "p95": p99 - 1, "p99": p99}, "binds_per_s": binds, "seconds": 9.0}


SETUP = Setup(command="gpuplace bench pipeline --against kube-scheduler", host="vm", nodes=10, pods=40,
              gpus_per_node=8, gpus_per_node_note="", clusters=2, policy="gpuplace",
              kube_scheduler="Kubernetes v1.34.4 (/bin/kube-scheduler)",
              kube_scheduler_limits=ClientLimits(5000, 10000).describe(), gpuplace_limits="no rate limit")


def test_medians_are_per_side_and_the_ratios_divide_gpuplace_by_kube_scheduler() -> None:
    runs = [run("kube-scheduler", 1, 100.0, 2000.0), run("gpuplace", 1, 20.0, 50000.0),
            run("kube-scheduler", 2, 150.0, 1000.0), run("gpuplace", 2, 30.0, 30000.0),
            run("kube-scheduler", 3, 120.0, 3000.0), run("gpuplace", 3, 10.0, 90000.0)]
    result = comparison(runs)
    assert result["medians"]["kube-scheduler"]["binds_per_s"] == 120.0
    assert result["medians"]["gpuplace"]["binds_per_s"] == 20.0
    assert result["medians"]["kube-scheduler"]["p99_ms"] == 2000.0
    assert result["medians"]["gpuplace"]["p99_ms"] == 50000.0
    assert result["ratios"] == {"binds_per_s": 0.167, "p99": 25.0}
    assert result["issue16_bar"] == {"binds_per_s_ratio_at_least_1": False, "p99_ratio_at_most_2": False,
                                     "met": False}


@pytest.mark.parametrize(("gp_binds", "gp_p99", "binds_ok", "p99_ok"), [
    (120.0, 4000.0, True, True),  # equal rate, p99 exactly twice: both hold (the bar is inclusive)
    (119.0, 4000.0, False, True),
    (200.0, 4001.0, True, False),
])
def test_issue16_bar_is_binds_ratio_at_least_1_and_p99_ratio_at_most_2(gp_binds: float, gp_p99: float,
                                                                      binds_ok: bool, p99_ok: bool) -> None:
    bar = comparison([run("kube-scheduler", 1, 120.0, 2000.0), run("gpuplace", 1, gp_binds, gp_p99)])["issue16_bar"]
    assert (bar["binds_per_s_ratio_at_least_1"], bar["p99_ratio_at_most_2"]) == (binds_ok, p99_ok)
    assert bar["met"] == (binds_ok and p99_ok)


def test_a_side_that_bound_nothing_gives_no_ratio_and_fails_the_bar() -> None:
    assert ratio(10.0, 0.0) is None
    result = comparison([run("kube-scheduler", 1, 0.0, 0.0, bound=0), run("gpuplace", 1, 20.0, 900.0)])
    assert result["ratios"] == {"binds_per_s": None, "p99": None}
    assert not result["issue16_bar"]["met"]
    assert "| ratio of the medians | n/a | n/a |" in markdown(SETUP, [run("kube-scheduler", 1, 0.0, 0.0, bound=0),
                                                                    run("gpuplace", 1, 20.0, 900.0)])


def test_medians_refuse_an_empty_side() -> None:
    with pytest.raises(ValueError, match="no runs"):
        medians([])
    with pytest.raises(ValueError, match="no runs"):
        comparison([run("gpuplace", 1, 20.0, 900.0)])


def test_markdown_names_the_setting_and_lists_both_sides_and_every_run() -> None:
    runs = [run("kube-scheduler", 1, 100.0, 2000.0), run("gpuplace", 1, 25.0, 40000.0, bound=39)]
    text = markdown(SETUP, runs)
    assert "clientConnection.qps 5000, clientConnection.burst 10000" in text
    assert SETUP.command in text and "Kubernetes v1.34.4" in text
    assert "| kube-scheduler | 100.0 | 100 | 1999 | 2000 | 40/40 | 0 | 0 |" in text
    assert "| gpuplace | 25.0 | 100 | 39999 | 40000 | 39/40 | 0 | 0 |" in text
    assert "| ratio of the medians | 0.250 | 20.000 |" in text
    assert "not met (binds/s: no, p99: no)" in text
    assert "| 1 | kube-scheduler | ku1 |" in text and "| 1 | gpuplace | gp1 |" in text
    body = report_json(SETUP, runs)
    assert json.loads(json.dumps(body))["runs"] == runs  # JSON-clean, raw runs kept
    assert body["setup"]["kube_scheduler_limits"] == SETUP.kube_scheduler_limits


def test_a_paced_comparison_says_its_rate_instead_of_a_burst() -> None:
    text = markdown(replace(SETUP, rate=50.0), [run("kube-scheduler", 1, 50.0, 300.0), run("gpuplace", 1, 49.0, 600.0)])
    assert "Stream (both): 40 pods" in text and "submitted at 50 pods/s, spread evenly" in text
    assert "submitted 24 at a time" not in text and "includes queueing" not in text
    assert "Burst (both)" in markdown(SETUP, [run("kube-scheduler", 1, 50.0, 300.0), run("gpuplace", 1, 49.0, 600.0)])


def test_gpus_per_node_fit_a_whole_gpu_burst_split_as_the_run_splits_it() -> None:
    assert whole_gpus_per_node(10, 40, 2) == 8  # 4 per node: the usual 8 stay
    assert whole_gpus_per_node(200, 2000, 2) == 10  # 1,000 pods on 100 nodes per cluster
    assert whole_gpus_per_node(200, 1601, 2) == 9  # the cluster that gets 801 pods needs 9 on its 100 nodes
    assert whole_gpus_per_node(3, 100, 2) == 50  # 50 pods on the second cluster's single node
    with pytest.raises(ValueError, match="no node"):
        whole_gpus_per_node(1, 10, 2)


def test_kube_scheduler_pod_is_gpuplaces_pod_with_a_whole_gpu_its_scheduler_and_the_fleet() -> None:
    pod, service_ms = robotics_fleet.pods(1, seed=3)[0]
    ours = pod_manifest(pod, "ns", "gpuplace", service_ms)
    theirs = whole_gpu_manifest(ours, scheduler="bench-ks", fleet="run1", gpus=pod.gpu.count)
    assert theirs["spec"]["schedulerName"] == "bench-ks"
    assert theirs["spec"]["nodeSelector"] == {FLEET_LABEL: "run1"}
    assert theirs["spec"]["containers"][0]["resources"] == {"requests": ours["spec"]["containers"][0]["resources"][
        "requests"], "limits": {"nvidia.com/gpu": "1"}}
    assert theirs["spec"]["priorityClassName"] == ours["spec"]["priorityClassName"]
    assert "annotations" not in theirs["metadata"] and theirs["metadata"]["name"] == ours["metadata"]["name"]
    assert ours["spec"]["schedulerName"] == "gpuplace" and "nodeSelector" not in ours["spec"]  # not mutated
    assert gpu_limit(theirs) == 1 and gpu_limit(ours) == 0


def test_config_raises_the_client_limits_names_the_profile_and_turns_leader_election_off() -> None:
    config = json.loads(config_text(kubeconfig="/k/east", scheduler_name="bench-ks", limits=ClientLimits(700, 900)))
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["clientConnection"] == {"kubeconfig": "/k/east", "qps": 700, "burst": 900}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["profiles"] == [{"schedulerName": "bench-ks"}]


def test_find_binary_prefers_the_option_then_the_variable_and_says_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPLACE_STACK_DIR", str(tmp_path / "no-stack"))
    monkeypatch.delenv(kube_scheduler_process.BINARY_VARIABLE, raising=False)
    assert stack_env.resolve(kube_scheduler_process.BINARY_VARIABLE) is None
    with pytest.raises(FileNotFoundError, match="--kube-scheduler PATH"):
        find_binary()
    exe = tmp_path / "kube-scheduler"
    exe.write_text("#!/bin/sh\n")
    with pytest.raises(FileNotFoundError, match="not an executable"):
        find_binary(exe)
    exe.chmod(0o755)
    assert find_binary(exe) == exe
    monkeypatch.setenv(kube_scheduler_process.BINARY_VARIABLE, str(exe))
    assert find_binary() == exe


def test_the_cpu_table_gives_each_sides_median_per_component_its_total_and_the_cores_busy() -> None:
    runs = [run("kube-scheduler", 1, 100.0, 2000.0), run("gpuplace", 1, 20.0, 50000.0),
            run("kube-scheduler", 2, 150.0, 1000.0), run("gpuplace", 2, 30.0, 30000.0)]
    for r, apiserver, scheduler in zip(runs, (10.0, 14.0, 12.0, 16.0), (1.0, 9.0, 3.0, 11.0), strict=True):
        r["cpu_s"] = {"kube-apiserver": apiserver, "scheduler under test": scheduler, "wall_s": 9.0}
    assert cpu_medians(runs) == {"kube-scheduler": {"kube-apiserver": 11.0, "scheduler under test": 2.0,
                                                    "wall_s": 9.0},
                                 "gpuplace": {"kube-apiserver": 15.0, "scheduler under test": 10.0, "wall_s": 9.0}}
    text = markdown(SETUP, runs)
    assert "| component | kube-scheduler | gpuplace |" in text
    assert "| scheduler under test | 2.0 | 10.0 |" in text
    assert "| **all** | **13.0** | **25.0** |" in text
    assert "| cores busy | 1.44 | 2.78 |" in text


def test_the_burst_table_gives_the_schedulers_cpu_per_pod_bound_with_kafka_and_postgres() -> None:
    runs = [run("kube-scheduler", 1, 100.0, 2000.0), run("gpuplace", 1, 20.0, 50000.0, bound=20)]
    runs[0]["burst_cpu_s"] = {"kube-apiserver": 8.0, "scheduler under test": 0.4, "kafka": 0.0, "postgres": 0.0,
                              "wall_s": 4.0}
    runs[1]["burst_cpu_s"] = {"kube-apiserver": 9.0, "scheduler under test": 1.0, "kafka": 0.5, "postgres": 0.1,
                              "wall_s": 8.0}
    text = markdown(SETUP, runs)
    assert "The same over the burst alone" in text
    assert "| **all** | **8.4** | **10.6** |" in text and "| cores busy | 2.10 | 1.32 |" in text
    # 0.4 CPU-s over 40 pods bound; (1.0 + 0.5 + 0.1) CPU-s over 20
    assert "| scheduler + kafka + postgres, ms per pod bound | 10.00 | 80.00 |" in text
    assert "burst alone" not in markdown(SETUP, [run("kube-scheduler", 1, 100.0, 2000.0), run("gpuplace", 1, 20.0,
                                                                                             50000.0)])


def test_the_schedulers_processes_are_listed_under_it_and_not_counted_twice() -> None:
    runs = [run("kube-scheduler", 1, 100.0, 2000.0), run("gpuplace", 1, 20.0, 50000.0, bound=20)]
    runs[0]["burst_cpu_s"] = {"scheduler under test": 0.4, "scheduler under test, kube-scheduler": 0.4,
                              "wall_s": 4.0}
    runs[1]["burst_cpu_s"] = {"scheduler under test": 1.0, "scheduler under test, placement": 0.7,
                              "scheduler under test, cluster-watcher": 0.3, "wall_s": 8.0}
    lines = markdown(SETUP, runs).splitlines()
    burst = next(i for i, line in enumerate(lines) if line.startswith("The same over the burst alone"))
    at = lines.index("| scheduler under test | 0.4 | 1.0 |", burst)
    assert lines[at + 1:at + 4] == ["| &nbsp;&nbsp;cluster-watcher | 0.0 | 0.3 |",
                                    "| &nbsp;&nbsp;kube-scheduler | 0.4 | 0.0 |",
                                    "| &nbsp;&nbsp;placement | 0.0 | 0.7 |"]
    assert "| **all** | **0.4** | **1.0** |" in lines


def test_runs_without_a_cpu_measurement_leave_the_cpu_table_out() -> None:
    runs = [run("kube-scheduler", 1, 100.0, 2000.0), run("gpuplace", 1, 20.0, 50000.0)]
    assert cpu_medians(runs) == {}
    assert "CPU seconds" not in markdown(SETUP, runs)


def test_the_bench_runs_its_services_with_the_bind_concurrency_it_reports(tmp_path: Path) -> None:
    """Service processes get a clean environment (chaos_faults.service_env drops GPUPLACE_*), so the run passes
    GPUPLACE_BIND_CONCURRENCY on; the report names the same number beside kube-scheduler's client limits."""
    settings = Settings(bind_concurrency=8)
    pipeline = PipelineRun(RunConfig(kubeconfigs={"east": "/dev/null", "west": "/dev/null"}), settings)
    processes = pipeline.service_processes(tmp_path)
    assert {p.env["GPUPLACE_BIND_CONCURRENCY"] for p in processes} == {"8"}
    assert "8 binds in flight (GPUPLACE_BIND_CONCURRENCY)" in gpuplace_client_limits(settings)


def test_the_bench_runs_placement_with_the_policy_settings_it_was_given(tmp_path: Path) -> None:
    """GPUPLACE_EXPECTED_SHAPES, GPUPLACE_WHOLE_GPU_RESERVE and GPUPLACE_LATENCY_MARGIN move decisions: a bench given
    them runs its services with them; unset, placement keeps its defaults."""
    settings = Settings(expected_shapes="8xgpu", whole_gpu_reserve=0.0, latency_margin=0.2)
    pipeline = PipelineRun(RunConfig(kubeconfigs={"east": "/dev/null"}), settings)
    for process in pipeline.service_processes(tmp_path):
        assert (process.env["GPUPLACE_EXPECTED_SHAPES"], process.env["GPUPLACE_WHOLE_GPU_RESERVE"],
                process.env["GPUPLACE_LATENCY_MARGIN"]) == ("8xgpu", "0.0", "0.2")
    plain = PipelineRun(RunConfig(kubeconfigs={"east": "/dev/null"}), Settings()).service_processes(tmp_path)
    assert not any({"GPUPLACE_EXPECTED_SHAPES", "GPUPLACE_WHOLE_GPU_RESERVE"} & set(p.env) for p in plain)


def test_the_bench_runs_each_service_as_its_own_kafka_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local stack gives every service a Kafka user the ACLs bind it to (deploy/local/kafka/acls.txt): the
    bench's services log in as those users, so a run shows the grants suffice, not the admin's power."""
    monkeypatch.setenv("GPUPLACE_STACK_DIR", str(tmp_path))
    for user in ("placement", "cluster-watcher", "telemetry-ingest", "latency-ingest"):
        monkeypatch.setenv(password_variable(user), f"{user}-pw")
    settings = Settings(kafka_security_protocol="SASL_SSL", kafka_username="admin", kafka_password="admin-pw")
    pipeline = PipelineRun(RunConfig(kubeconfigs={"east": "/dev/null", "west": "/dev/null"}), settings)
    users = {p.label: (p.env["GPUPLACE_KAFKA_USERNAME"], p.env["GPUPLACE_KAFKA_PASSWORD"])
             for p in pipeline.service_processes(tmp_path / "run")}
    assert users and all(user == service.split(":")[0] and password == f"{user}-pw"
                         for service, (user, password) in users.items()), users
