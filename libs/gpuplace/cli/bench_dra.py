"""`gpuplace bench dra`: kube-scheduler's DRA allocator and gpuplace on the same ResourceSlice fleet and claim stream.

One run per scheduler, kube-scheduler first, each on a fresh KWOK fleet (`--nodes`, 8 GPUs each, one GPU model per
node, of robotics_fleet's mixed memory sizes) built from the same seed, with the same seeded stream of `--pods`
ResourceClaims (sim/dra_stream.py: perception memory slices and 1-8 whole-GPU training jobs) and their pods, in waves
(`--wave`). Each side is cleaned up (pods, claims, namespace, nodes, slices) before the next starts.

The stream is sized to the fleet by default (`--training-scale 0.7`: about 91% of what 200 nodes hold), so a claim
that fails fails for how the GPUs were shared out, which is what the bench compares. `--training-scale 1` asks 1.23x
the fleet: then which claims a scheduler turns away decides the count more than where it put the others (a
scheduler that spreads and turns the 8-GPU jobs away places more pods in number, and less GPU memory).
The report (markdown, a .json beside it; `--json` prints the JSON) gives pods placed, the first claim that failed and
the GPU memory stranded then, binds/s and pending-to-bound p50/p95/p99, side by side (dra_run.py, dra_report.py).
"""

from __future__ import annotations

import asyncio
import json
import platform
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console

from gpuplace.cli import bench
from gpuplace.cli.bench_pipeline import gpuplace_client_limits
from gpuplace.cli.console import new_console
from gpuplace.core.model import Node
from gpuplace.harness import dra_report
from gpuplace.harness.dra_run import DEFAULT_WAVE, DraKubeSchedulerRun, DraRun
from gpuplace.harness.kube_scheduler_process import (
    DEFAULT_BURST,
    DEFAULT_QPS,
    ClientLimits,
    binary_version,
    find_binary,
)
from gpuplace.harness.pipeline_comparison import run_then_clean
from gpuplace.harness.pipeline_comparison_report import GPUPLACE, KUBE_SCHEDULER, SIDES
from gpuplace.harness.pipeline_run import PipelineRun, RunConfig
from gpuplace.harness.stack_run import Nodes, PolicyName, local_stack, stage_bars
from gpuplace.settings import Settings
from gpuplace.sim import dra_stream

DEFAULT_OUT = Path("bench/results/dra.md")
GPUS_PER_NODE = 8
DEFAULT_SEED = 7
DEFAULT_TRAINING_SCALE = 0.7  # the stream sized to the fleet (module docstring)


def bench_dra(
    nodes: Nodes = 200,
    pods: int = typer.Option(2000, min=1, help="claims (one pod each)"),
    seed: int = typer.Option(DEFAULT_SEED, help="seed of the fleet and of the claim stream (both sides get the same)"),
    schedulers: str = typer.Option(",".join(SIDES), help="which to run, in this order: kube-scheduler, gpuplace"),
    policy: PolicyName = None,
    out: Path = typer.Option(DEFAULT_OUT, help="markdown report (a .json beside it)"),
    as_json: bool = typer.Option(False, "--json", help="print the report's JSON instead of its markdown"),
    kube_scheduler: Path | None = typer.Option(None, help="kube-scheduler binary (default: the local stack's)"),
    kube_scheduler_qps: float = typer.Option(DEFAULT_QPS, min=1, help="the bench kube-scheduler's "
                                             "clientConnection.qps"),
    kube_scheduler_burst: int = typer.Option(DEFAULT_BURST, min=1, help="its clientConnection.burst"),
    timeout: float = typer.Option(900.0, min=10, help="seconds each side may take to settle"),
    training_scale: float = typer.Option(DEFAULT_TRAINING_SCALE, min=0, help="multiplies the training jobs' share of "
                                         "the stream (34% of claims at 1): 0.7 asks about 91% of what 200 nodes "
                                         "hold, 1 asks 1.23x"),
    wave: int = typer.Option(DEFAULT_WAVE, min=0, help="claims per wave: each wave is submitted once the one before "
                             "has settled (bound or unschedulable), as claims arrive over time; 0 submits the whole "
                             "stream at once (a burst: binds/s and queueing, but the claims still queued count as "
                             "pending when the first one fails)"),
    deadlines: bool = typer.Option(False, help="perception pods carry their deadline and frame rate: gpuplace then "
                                   "also refuses GPUs where a pod would miss its deadline (kube-scheduler cannot); "
                                   "off, both solve the same memory-placement problem"),
) -> None:
    """Place the same DRA claim stream with kube-scheduler and with gpuplace; report both side by side."""
    settings, kubeconfigs = local_stack()
    policy = policy or settings.policy
    sides = _sides(schedulers)
    limits = ClientLimits(qps=kube_scheduler_qps, burst=kube_scheduler_burst)
    version, found = "not run", None
    if KUBE_SCHEDULER in sides:
        try:
            found = find_binary(kube_scheduler)
        except FileNotFoundError as exc:
            raise typer.BadParameter(str(exc)) from exc
        version = f"{asyncio.run(binary_version(found))} ({found})"
    stream = _Stream(deadlines=deadlines, training_scale=training_scale, wave=wave)
    console = new_console(stderr=True)
    runs: dict[str, dict] = {}
    setup_run: PipelineRun | None = None
    for side in sides:
        config = RunConfig(kubeconfigs=kubeconfigs, nodes=nodes, pods=pods, gpus_per_node=GPUS_PER_NODE, seed=seed,
                           policy=policy, timeout_s=timeout, keep=True, processes=True)
        run, runs[side] = _run_side(side, config, settings, stream, console, binary=found, limits=limits)
        setup_run = setup_run or run
    assert setup_run is not None
    fleet = [n for f in setup_run._fleets().values() for n in f]
    command = (f"gpuplace bench dra --nodes {nodes} --pods {pods} --seed {seed} --schedulers {','.join(sides)} "
               f"--policy {policy} --kube-scheduler-qps {limits.qps:g} --kube-scheduler-burst {limits.burst}"
               + (f" --training-scale {training_scale:g}" if training_scale != DEFAULT_TRAINING_SCALE else "")
               + (f" --wave {wave}" if wave != DEFAULT_WAVE else "")
               + (" --deadlines" if deadlines else ""))
    setup = _setup(command, fleet, stream, nodes=nodes, pods=pods, seed=seed, clusters=len(kubeconfigs),
                   policy=policy if GPUPLACE in sides else "not run", kube_scheduler=version, limits=limits,
                   settings=settings)
    report = dra_report.report_json(setup, runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dra_report.markdown(setup, runs))
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    typer.echo(json.dumps(report, indent=2) if as_json else dra_report.markdown(setup, runs))


def _sides(schedulers: str) -> list[str]:
    """--schedulers: the sides to run, in order, each at most once."""
    sides = [s.strip() for s in schedulers.split(",") if s.strip()]
    if not sides or any(s not in SIDES for s in sides) or len(set(sides)) != len(sides):
        raise typer.BadParameter(f"--schedulers takes {', '.join(SIDES)} (each at most once), got {schedulers!r}")
    return sides


@dataclass(frozen=True)
class _Stream:
    """How the claim stream is asked for: deadlines on the perception pods, the training share, the wave size."""

    deadlines: bool
    training_scale: float
    wave: int


def _run_side(side: str, config: RunConfig, settings: Settings, stream: _Stream, console: Console, *,
              binary: Path | None, limits: ClientLimits) -> tuple[DraRun, dict]:
    """One scheduler's run of the stream, cleaned up after; the run (its fleet describes the setup) and its
    summary."""
    with stage_bars(console, width=10) as progress:
        run: DraRun = (DraKubeSchedulerRun(config, settings, progress, deadlines=stream.deadlines,
                                           training_scale=stream.training_scale, wave=stream.wave, binary=binary,
                                           limits=limits)
                       if side == KUBE_SCHEDULER else
                       DraRun(config, settings, progress, deadlines=stream.deadlines,
                              training_scale=stream.training_scale, wave=stream.wave))
        result = asyncio.run(run_then_clean(run))
    console.print(f"{side}: placed {result.pods_bound}/{config.pods}, {result.binds_per_s} binds/s, "
                  f"p50/p95/p99 {result.pending_to_bound_ms}")
    return run, result.summary()


def _setup(command: str, fleet: list[Node], stream: _Stream, *, nodes: int, pods: int, seed: int, clusters: int,
           policy: str, kube_scheduler: str, limits: ClientLimits, settings: Settings) -> dra_report.Setup:
    """What the report says of the run: the command, the host, the fleet and the claim stream."""
    models = Counter(n.gpu_model for n in fleet)
    claims = dra_stream.claims(pods, seed=seed, training_scale=stream.training_scale)
    kinds = Counter(p.workload_class if dra_stream.is_whole(p) else "slice" for p in claims)
    return dra_report.Setup(
        command=command, host=f"{platform.node()} ({platform.processor() or platform.machine()})",
        nodes=nodes, pods=pods, clusters=clusters, seed=seed, gpus_per_node=GPUS_PER_NODE,
        fleet=", ".join(f"{count} x {model} ({fleet_memory(fleet, model)} MiB)"
                        for model, count in sorted(models.items())),
        stream=f"{kinds['slice']} perception memory slices (2-24 GiB of one GPU"
               + ("; with their deadlines and frame rates), " if stream.deadlines else "; no deadlines), ")
               + ", ".join(f"{kinds[f'training-{k}gpu']} x {k} whole GPU(s)" for k, _ in dra_stream.TRAINING),
        arrival=f"in waves of {stream.wave}, each once the one before settled" if stream.wave else
                "all at once (a burst)",
        over_ask=dra_stream.over_ask(claims, fleet).ratio, policy=policy,
        kube_scheduler=kube_scheduler, kube_scheduler_limits=limits.describe(),
        gpuplace_limits=gpuplace_client_limits(settings))


def fleet_memory(fleet: list[Node], model: str) -> int:
    return next(n.gpu_memory_mib for n in fleet if n.gpu_model == model)


def register(app: typer.Typer) -> None:
    bench.bench_app.command("dra")(bench_dra)
