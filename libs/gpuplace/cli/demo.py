"""`gpuplace demo`: the whole pipeline on the local stack, a KWOK fleet and a stream of perception pods.

The first thing a new user asks after the demo is why a pod went where it did, so its summary ends with the two
commands that answer it for this run: `gpuplace explain` (reads PostgreSQL, which keeps the run's pods and
decisions) and `gpuplace replay` (reads the run's topics). The demo keeps its topics for that, and deletes those
of the demo before it when it starts (the run id of the last demo is kept in the stack's directory), so demos do
not pile topics up on the broker. `--keep` also leaves the fleet and the pods in the clusters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid

import typer
from rich.console import Console
from rich.table import Table

from gpuplace.adapters.kafka import delete_topics
from gpuplace.cli.console import new_console
from gpuplace.contracts import topics
from gpuplace.harness.pipeline_run import PipelineRun, RunConfig, RunResult
from gpuplace.harness.stack_env import stack_dir
from gpuplace.harness.stack_run import Keep, Nodes, PolicyName, local_stack, stage_bars
from gpuplace.settings import Settings

LAST_DEMO = "last-demo-run"  # in the stack's directory: the run id whose topics the next demo deletes


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
                       timeout_s=timeout_s, keep=keep, keep_log=True, run_id=f"demo{uuid.uuid4().hex[:6]}")
    console = new_console(stderr=True)
    with stage_bars(console, width=10, disable=as_json) as progress:
        run = PipelineRun(config, settings, progress)
        try:
            result = asyncio.run(_run(run, settings))
        except (OSError, TimeoutError, RuntimeError) as exc:
            console.print(f"[red]demo failed:[/red] {exc}")
            raise typer.Exit(1) from exc
    commands = next_commands(result, run.suffix)
    if as_json:
        typer.echo(json.dumps({**result.summary(), "next": commands}))
    else:
        _print_summary(new_console(), result, commands)


async def _run(run: PipelineRun, settings: Settings) -> RunResult:
    """The run, after deleting the last demo's topics; its own run id is recorded once it has ended."""
    record = stack_dir() / LAST_DEMO
    if record.is_file() and (last := record.read_text().strip()):
        await delete_topics(settings.kafka, [t + f".run-{last}" for t in topics.ALL_TOPICS])
    try:
        return await run.run()
    finally:
        with contextlib.suppress(OSError):  # a stack directory this user cannot write: topics stay, as before
            record.write_text(run.config.run_id + "\n")


def next_commands(result: RunResult, suffix: str) -> dict[str, str]:
    """The commands that explain the run's first bound pod and replay its cluster's decisions from the topics."""
    if not result.bound_at:
        return {}
    cluster, pod = min(result.bound_at, key=result.bound_at.__getitem__).split("/", 1)
    return {"explain": f"gpuplace explain {result.namespace}/{pod} --cluster {cluster}",
            "replay": f"gpuplace replay --cluster {cluster} --topic-suffix {suffix}"}


def _print_summary(console: Console, result: RunResult, commands: dict[str, str]) -> None:
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
    if commands:
        console.print("Why the first pod went where it did, and this run's decisions decided again from its log "
                      "(kept until the next demo):", highlight=False)
        console.print(f"  {commands['explain']}\n  {commands['replay']}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
