"""`gpuplace demo`: the whole pipeline on the local stack, a KWOK fleet and a stream of perception pods."""

from __future__ import annotations

import asyncio
import json
import logging

import typer
from rich.console import Console
from rich.table import Table

from gpuplace.cli.console import new_console
from gpuplace.cli.pipeline_run import PipelineRun, RunConfig, RunResult
from gpuplace.cli.stack_run import Keep, Nodes, PolicyName, local_stack, stage_bars


def demo(
    nodes: Nodes = 100,
    pods: int = typer.Option(800, min=1, help="perception pods to submit"),
    policy: PolicyName = None,
    seed: int = typer.Option(7, help="seed of the fleet and the pods"),
    timeout_s: float = typer.Option(600.0, help="give up after this many seconds"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as one JSON object"),
    keep: Keep = False,
) -> None:
    """Run the pipeline end to end on the local stack and summarise what it placed."""
    settings, kubeconfigs = local_stack("run `deploy/local/stack.sh up` (or `make demo`) first")
    logging.basicConfig(level=logging.WARNING)
    config = RunConfig(kubeconfigs=kubeconfigs, nodes=nodes, pods=pods, policy=policy, seed=seed,
                       timeout_s=timeout_s, keep=keep)
    console = new_console(stderr=True)
    with stage_bars(console, width=10, disable=as_json) as progress:
        try:
            result = asyncio.run(PipelineRun(config, settings, progress).run())
        except (OSError, TimeoutError, RuntimeError) as exc:
            console.print(f"[red]demo failed:[/red] {exc}")
            raise typer.Exit(1) from exc
    if as_json:
        typer.echo(json.dumps(result.summary()))
    else:
        _print_summary(new_console(), result)


def _print_summary(console: Console, result: RunResult) -> None:
    table = Table(title=f"gpuplace demo (run {result.run_id})", show_header=False)
    p = result.pending_to_bound_ms
    rows = [
        ("clusters", ", ".join(result.clusters)),
        ("pods submitted / bound / waiting", f"{result.pods_submitted} / {result.pods_bound} / "
                                             f"{result.pods_unschedulable}"),
        ("GPUs used", f"{result.gpus_used} of {result.gpus_total}"),
        ("GPU memory assigned", f"{result.gpu_memory_used_pct:.1f}% of the fleet's GPU memory"),
        ("pending -> bound p50 / p95 / p99", f"{p['p50']:.0f} / {p['p95']:.0f} / {p['p99']:.0f} ms"),
        ("binds per second", f"{result.binds_per_s:.1f}"),
        ("GPUs over-committed / pods bound twice", f"{result.gpus_overcommitted} / {result.bound_twice}"),
        ("wall time", f"{result.seconds:.1f} s"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
