"""`gpuplace bench pipeline`: sustained binds/s and pending-to-bound latency through the whole pipeline.

Each repeat is a full `PipelineRun` on the local stack (fresh fleet, fresh topics): watcher -> Kafka ->
placement -> PostgreSQL -> bind -> apiserver. The report quotes medians over the repeats, with every
repeat listed, because these two-core machines are noisy.
"""

from __future__ import annotations

import asyncio
import json
import platform
import statistics
from pathlib import Path

import typer
from rich.console import Console

from gpuplace.cli import bench
from gpuplace.cli.pipeline_run import PipelineRun, RunConfig
from gpuplace.cli.stack_run import Nodes, PolicyName, local_stack

DEFAULT_OUT = Path("bench/results/pipeline.md")


def bench_pipeline(
    nodes: Nodes = 200,
    pods: int = typer.Option(2000, min=1, help="pods per repeat"),
    repeats: int = typer.Option(3, min=1, help="full runs; the report gives medians"),
    policy: PolicyName = None,
    out: Path = typer.Option(DEFAULT_OUT, help="markdown report (a .json with the raw runs beside it)"),
) -> None:
    """Run the pipeline REPEATS times and report median binds/s and pending-to-bound p50/p95/p99."""
    settings, kubeconfigs = local_stack()
    policy = policy or settings.policy
    console = Console(stderr=True)
    runs = []
    for i in range(repeats):
        config = RunConfig(kubeconfigs=kubeconfigs, nodes=nodes, pods=pods, policy=policy, seed=7 + i)
        result = asyncio.run(PipelineRun(config, settings).run())
        runs.append(result.summary())
        console.print(f"repeat {i + 1}/{repeats}: {result.binds_per_s} binds/s, "
                      f"p50/p95/p99 {result.pending_to_bound_ms}")
    report = _markdown(runs, nodes, pods, policy, repeats)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    out.with_suffix(".json").write_text(json.dumps(runs, indent=2) + "\n")
    typer.echo(report)


def _markdown(runs: list[dict], nodes: int, pods: int, policy: str, repeats: int) -> str:
    def median(key: str, sub: str | None = None) -> float:
        return statistics.median(r[key][sub] if sub else r[key] for r in runs)

    lines = [
        f"# Pipeline benchmark: {pods} pods on {nodes} KWOK nodes x 8 GPUs, {len(runs[0]['clusters'])} clusters",
        "",
        f"`gpuplace bench pipeline --nodes {nodes} --pods {pods} --repeats {repeats} --policy {policy}` "
        f"on {platform.node()} ({platform.processor() or platform.machine()}), medians of {len(runs)} runs.",
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
    lines += ["", "Pods are submitted as fast as the apiservers take them, so pending->bound includes queueing:",
              "it measures how long a burst of pods waits, and binds/s is the sustained drain rate.", ""]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    bench.bench_app.command("pipeline")(bench_pipeline)
