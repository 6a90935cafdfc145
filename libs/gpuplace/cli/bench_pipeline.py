"""`gpuplace bench pipeline`: sustained binds/s and pending-to-bound latency through the whole pipeline.

Each repeat is a full `PipelineRun` on the local stack (fresh fleet, fresh topics): watcher -> Kafka ->
placement -> PostgreSQL -> bind -> apiserver. The report quotes medians over the repeats, with every
repeat listed, because these two-core machines are noisy.

`--against kube-scheduler` measures kube-scheduler the same way on the same fleet and burst, alternating with
gpuplace over the repeats, and reports both and their ratios (pipeline_comparison.py,
pipeline_comparison_report.py; bench/results/pipeline-vs-kube-scheduler.md).
"""

from __future__ import annotations

import asyncio
import json
import platform
import statistics
from enum import StrEnum
from pathlib import Path

import typer
from kubernetes_asyncio import client

from gpuplace.cli import bench
from gpuplace.cli.console import new_console
from gpuplace.harness import pipeline_comparison_report
from gpuplace.harness.kube_scheduler_process import (
    DEFAULT_BURST,
    DEFAULT_QPS,
    ClientLimits,
    binary_version,
    find_binary,
)
from gpuplace.harness.pipeline_comparison import DEFAULT_GPUS_PER_NODE, Comparison, compare, whole_gpus_per_node
from gpuplace.harness.pipeline_run import PipelineRun, RunConfig, RunResult
from gpuplace.harness.stack_run import Nodes, PolicyName, local_stack
from gpuplace.settings import Settings

DEFAULT_OUT = Path("bench/results/pipeline.md")
DEFAULT_OUT_AGAINST = Path("bench/results/pipeline-vs-kube-scheduler.md")


class Against(StrEnum):
    kube_scheduler = "kube-scheduler"


def bench_pipeline(
    nodes: Nodes = 200,
    pods: int = typer.Option(2000, min=1, help="pods per repeat"),
    repeats: int = typer.Option(3, min=1, help="full runs; the report gives medians"),
    policy: PolicyName = None,
    out: Path | None = typer.Option(None, help="markdown report (a .json with the raw runs beside it); default "
                                    f"{DEFAULT_OUT}, with --against {DEFAULT_OUT_AGAINST}"),
    against: Against | None = typer.Option(None, help="also run this scheduler on the same fleet and burst, "
                                           "alternating with gpuplace, and report both with their ratios"),
    gpus_per_node: int | None = typer.Option(None, min=1, help=f"GPUs per fake node (default {DEFAULT_GPUS_PER_NODE}; "
                                             "with --against, raised if the burst does not fit as whole GPUs)"),
    kube_scheduler: Path | None = typer.Option(None, help="kube-scheduler binary (default: the local stack's)"),
    kube_scheduler_qps: float = typer.Option(DEFAULT_QPS, min=1, help="the bench kube-scheduler's "
                                             "clientConnection.qps"),
    kube_scheduler_burst: int = typer.Option(DEFAULT_BURST, min=1, help="its clientConnection.burst"),
    processes: bool = typer.Option(True, "--processes/--in-process", help="each gpuplace service its own process, "
                                   "as deployed (default), or all of them as tasks in the bench's process"),
    rate: float | None = typer.Option(None, min=0.1, help="submit the pods at this many per second, spread "
                                      "evenly (a steady stream), instead of as one burst"),
) -> None:
    """Run the pipeline REPEATS times and report median binds/s and pending-to-bound p50/p95/p99."""
    settings, kubeconfigs = local_stack()
    policy = policy or settings.policy
    if against is not None:
        limits = ClientLimits(qps=kube_scheduler_qps, burst=kube_scheduler_burst)
        _against_kube_scheduler(settings, kubeconfigs, nodes=nodes, pods=pods, repeats=repeats, policy=policy,
                                out=out or DEFAULT_OUT_AGAINST, gpus_per_node=gpus_per_node, binary=kube_scheduler,
                                limits=limits, processes=processes, rate=rate)
        return
    out = out or DEFAULT_OUT
    gpus = gpus_per_node or DEFAULT_GPUS_PER_NODE
    console = new_console(stderr=True)
    runs = []
    for i in range(repeats):
        config = RunConfig(kubeconfigs=kubeconfigs, nodes=nodes, pods=pods, gpus_per_node=gpus, policy=policy,
                           seed=7 + i, processes=processes, rate=rate)
        result = asyncio.run(PipelineRun(config, settings).run())
        runs.append(result.summary())
        console.print(f"repeat {i + 1}/{repeats}: {result.binds_per_s} binds/s, "
                      f"p50/p95/p99 {result.pending_to_bound_ms}")
    report = _markdown(runs, nodes, pods, policy, repeats, gpus, processes, rate)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    out.with_suffix(".json").write_text(json.dumps(runs, indent=2) + "\n")
    typer.echo(report)


def _against_kube_scheduler(settings: Settings, kubeconfigs: dict[str, str], *, nodes: int, pods: int,
                            repeats: int, policy: str, out: Path, gpus_per_node: int | None, binary: Path | None,
                            limits: ClientLimits, processes: bool, rate: float | None = None) -> None:
    """`--against kube-scheduler`: ks, gp, ks, gp, ... on the same fleet and burst; report, medians and ratios."""
    console = new_console(stderr=True)
    try:
        found = find_binary(binary)
        fit = whole_gpus_per_node(nodes, pods, len(kubeconfigs))
    except (FileNotFoundError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    note = ""
    if gpus_per_node is None:
        gpus_per_node = fit
        if fit > DEFAULT_GPUS_PER_NODE:
            note = f"raised from {DEFAULT_GPUS_PER_NODE} so that {pods} pods fit as whole GPUs"
            console.print(f"GPUs per node: {fit} ({note}), for both schedulers")
    elif gpus_per_node < fit:
        console.print(f"[yellow]warning: {pods} whole-GPU pods need {fit} GPUs per node; with {gpus_per_node} "
                      "kube-scheduler leaves some unschedulable (and may preempt)[/yellow]")
    version = asyncio.run(binary_version(found))
    comparison = Comparison(kubeconfigs=kubeconfigs, nodes=nodes, pods=pods, repeats=repeats,
                            gpus_per_node=gpus_per_node, binary=found, limits=limits, policy=policy,
                            processes=processes, rate=rate)

    def on_run(side: str, repeat: int, result: RunResult) -> None:
        console.print(f"repeat {repeat}/{repeats} {side}: {result.binds_per_s} binds/s, "
                      f"p50/p95/p99 {result.pending_to_bound_ms}, bound {result.pods_bound}/{pods}")

    runs = compare(comparison, settings, on_run=on_run)
    command = (f"gpuplace bench pipeline --nodes {nodes} --pods {pods} --repeats {repeats} --policy {policy} "
               f"--against kube-scheduler --gpus-per-node {gpus_per_node} --kube-scheduler-qps {limits.qps:g} "
               f"--kube-scheduler-burst {limits.burst}" + ("" if processes else " --in-process")
               + (f" --rate {rate:g}" if rate else ""))
    setup = pipeline_comparison_report.Setup(
        command=command, host=f"{platform.node()} ({platform.processor() or platform.machine()})", nodes=nodes,
        pods=pods, gpus_per_node=gpus_per_node, gpus_per_node_note=note, clusters=len(kubeconfigs), policy=policy,
        kube_scheduler=f"{version} ({found})", kube_scheduler_limits=limits.describe(),
        gpuplace_limits=gpuplace_client_limits(settings), rate=rate)
    report = pipeline_comparison_report.markdown(setup, runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    out.with_suffix(".json").write_text(json.dumps(pipeline_comparison_report.report_json(setup, runs), indent=2)
                                        + "\n")
    typer.echo(report)


def gpuplace_client_limits(settings: Settings) -> str:
    """How gpuplace's kube client is limited, for the report beside kube-scheduler's setting."""
    pool = client.Configuration().connection_pool_maxsize
    return (f"kubernetes_asyncio, no client-side rate limit (no QPS/burst); at most {pool} connections per "
            f"apiserver (connection_pool_maxsize) and {settings.bind_concurrency} binds in flight "
            "(GPUPLACE_BIND_CONCURRENCY)")


def _markdown(runs: list[dict], nodes: int, pods: int, policy: str, repeats: int, gpus: int,
              processes: bool = True, rate: float | None = None) -> str:
    def median(key: str, sub: str | None = None) -> float:
        return statistics.median(r[key][sub] if sub else r[key] for r in runs)

    lines = [
        f"# Pipeline benchmark: {pods} pods on {nodes} KWOK nodes x {gpus} GPUs, {len(runs[0]['clusters'])} clusters",
        "",
        f"`gpuplace bench pipeline --nodes {nodes} --pods {pods} --repeats {repeats} --policy {policy}"
        f"{'' if processes else ' --in-process'}{f' --rate {rate:g}' if rate else ''}` on "
        f"{platform.node()} ({platform.processor() or platform.machine()}), "
        f"medians of {len(runs)} runs; the services "
        f"{'each in its own process, as deployed' if processes else 'as tasks in the bench process'}.",
        "",
        "| binds/s | pending->bound p50 ms | p95 ms | p99 ms | bound | over-committed GPUs | bound twice |",
        "|---|---|---|---|---|---|---|",
        f"| {median('binds_per_s'):.1f} | {median('pending_to_bound_ms', 'p50'):.0f} | "
        f"{median('pending_to_bound_ms', 'p95'):.0f} | {median('pending_to_bound_ms', 'p99'):.0f} | "
        f"{median('pods_bound'):.0f}/{pods} | {max(r['gpus_overcommitted'] for r in runs)} | "
        f"{max(r['bound_twice'] for r in runs)} |",
        "",
        "Every run:",
        "",
        "| run | binds/s | p50 | p95 | p99 | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        p = r["pending_to_bound_ms"]
        lines.append(f"| {r['run_id']} | {r['binds_per_s']} | {p['p50']} | {p['p95']} | {p['p99']} | {r['seconds']} |")
    lines += ["", f"Pods are submitted at {rate:g} per second: pending->bound is what a pod of a steady stream waits."
              if rate else "Pods are submitted as fast as the apiservers take them, so pending->bound includes "
              "queueing:\nit measures how long a burst of pods waits, and binds/s is the sustained drain rate.", ""]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    bench.bench_app.command("pipeline")(bench_pipeline)
