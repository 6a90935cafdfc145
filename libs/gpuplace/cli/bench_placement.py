"""`gpuplace bench placement`: placement decisions per second on a large synthetic cluster, policy beside policy.

    gpuplace bench placement --nodes 5000 --policies gpuplace,fgd --repeats 3

Each repeat builds a fleet of NODES nodes x 8 GPUs of mixed models (sim/robotics_fleet.py's product mix), fills it to
FILL_PCT of its GPU share with pods placed at random (the same starting cluster for every policy, so each meets
the same node states), then times DECISIONS decide-and-bind cycles of one policy after WARMUP untimed ones
(its caches start cold). Pods are drawn with replacement from an Alibaba trace (`--pods default`, any trace
name) or from sim/robotics_fleet.py's perception pods (`--pods robotics`, memory requests). One process, one thread
of Python; the report gives decisions per wall-clock second and per CPU second of the process (equal when one
core did the work), medians over the repeats with every run listed, because these shared machines are noisy.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import typer

from gpuplace.cli import bench
from gpuplace.cli.console import new_console
from gpuplace.cli.sim import parse_policies
from gpuplace.core.demand import Demand, nominal_share_milli, resolve
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.model import Pod
from gpuplace.core.policies import registry
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import typical_workload
from gpuplace.sim import robotics_fleet
from gpuplace.traces import alibaba

DEFAULT_OUT = Path("bench/results/placement.md")
GPUS_PER_NODE = 8


def bench_placement(
    nodes: int = typer.Option(5000, min=1, help="nodes in the synthetic fleet (8 GPUs each, mixed models)"),
    policies: str = typer.Option("gpuplace,fgd", help="policies to time, comma-separated"),
    pods: str = typer.Option("default", help="pod source: a trace short name or path, or 'robotics'"),
    fill_pct: float = typer.Option(50.0, min=0.0, max=95.0, help="GPU share filled at random before timing"),
    warmup: int = typer.Option(1000, min=0, help="untimed decisions per run before timing (caches start cold)"),
    decisions: int = typer.Option(2000, min=1, help="timed decisions per run"),
    repeats: int = typer.Option(3, min=1, help="runs per policy (seeds 0..repeats-1); the report gives medians"),
    out: Path = typer.Option(DEFAULT_OUT, help="markdown report (a .json with the raw runs beside it)"),
) -> None:
    """Median decisions/s of each policy on the same prefilled clusters."""
    try:
        names = parse_policies(policies)
        draw = _pod_source(pods)
    except (ValueError, alibaba.TraceError) as error:
        raise typer.BadParameter(str(error)) from None
    console = new_console(stderr=True)
    runs = []
    for seed in range(repeats):
        cluster = ClusterSnapshot(robotics_fleet.fleet(nodes, gpus_per_node=GPUS_PER_NODE, seed=seed))
        _prefill(cluster, draw, fill_pct, seed)
        stream = draw(warmup + decisions, 1_000_003 + seed)
        for name in names:
            run = _time_policy(cluster.copy(), name, stream, warmup, decisions, seed)
            runs.append(run)
            console.print(f"seed {seed} {name}: {run['decisions_per_s']:.0f} decisions/s "
                          f"({run['decisions_per_cpu_s']:.0f} per CPU s), GPU allocated "
                          f"{run['allocated_pct_start']:.1f}% -> {run['allocated_pct_end']:.1f}%")
    report = _markdown(runs, names, nodes, pods, fill_pct, warmup, decisions, repeats)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    out.with_suffix(".json").write_text(json.dumps(runs, indent=2) + "\n")
    typer.echo(report)


def _pod_source(pods: str) -> Callable[[int, int], list[Pod]]:
    """A function (count, seed) -> pods, drawn with replacement from the trace or from sim/robotics_fleet.py."""
    if pods == "robotics":
        return lambda count, seed: [pod for pod, _ in
                                    robotics_fleet.pods(count, seed=seed, prefix=f"perception-{seed}")]
    trace = alibaba.read_pods(alibaba.pod_file(pods))
    return lambda count, seed: [trace[i] for i in np.random.default_rng(seed).integers(len(trace), size=count)]


def _prefill(cluster: ClusterSnapshot, draw, fill_pct: float, seed: int) -> None:
    """Bind drawn pods to uniformly random feasible nodes until FILL_PCT of the GPU share has been requested."""
    policy = registry.create("random", PolicyContext(rng=np.random.default_rng(seed)))
    target, requested = fill_pct / 100.0 * cluster.total_gpu_milli, 0
    cache: dict[tuple, Demand] = {}
    for chunk in range(1_000_000):
        for pod in draw(1000, seed * 1000 + chunk):
            if requested >= target:
                return
            demand = _demand(pod, cluster, cache)
            decision = decide(cluster, demand, policy)
            if decision.scheduled:
                bind(cluster, demand, decision)
            requested += nominal_share_milli(pod, cluster)


def _time_policy(cluster: ClusterSnapshot, name: str, stream: list[Pod], warmup: int, decisions: int,
                 seed: int) -> dict:
    # FGD needs the typical workload up front: it gets the timed pods' own (the simulator's rule); gpuplace ignores it
    workload = typical_workload(stream, cluster.gpu_types)
    policy = registry.create(name, PolicyContext(workload=workload, rng=np.random.default_rng(seed)))
    cache: dict[tuple, Demand] = {}
    demands = [_demand(pod, cluster, cache) for pod in stream[: warmup + decisions]]
    for demand in demands[:warmup]:
        _place(cluster, demand, policy)
    start_pct = 100.0 * cluster.allocated_gpu_milli / cluster.total_gpu_milli
    placed = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for demand in demands[warmup:]:
        placed += _place(cluster, demand, policy)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "policy": name, "seed": seed, "decisions": decisions, "placed": placed,
        "seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
        "decisions_per_s": round(decisions / wall, 1), "decisions_per_cpu_s": round(decisions / max(cpu, 1e-9), 1),
        "allocated_pct_start": round(start_pct, 2),
        "allocated_pct_end": round(100.0 * cluster.allocated_gpu_milli / cluster.total_gpu_milli, 2),
    }


def _place(cluster: ClusterSnapshot, demand: Demand, policy) -> int:
    decision = decide(cluster, demand, policy)
    if decision.scheduled:
        bind(cluster, demand, decision)
    return int(decision.scheduled)


def _demand(pod: Pod, cluster: ClusterSnapshot, cache: dict[tuple, Demand]) -> Demand:
    """Resolved once per distinct request, as the simulator does (pods of one request share a Demand)."""
    key = (pod.cpu_milli, pod.memory_mib, pod.gpu)
    if key not in cache:
        cache[key] = resolve(pod, cluster)
    return cache[key]


def _markdown(runs: list[dict], names: list[str], nodes: int, pods: str, fill_pct: float, warmup: int,
              decisions: int, repeats: int) -> str:
    lines = [
        f"# Placement decisions per second: {nodes} nodes x {GPUS_PER_NODE} GPUs ({nodes * GPUS_PER_NODE} GPUs, "
        "mixed models)",
        "",
        f"`gpuplace bench placement --nodes {nodes} --policies {','.join(names)} --pods {pods} --fill-pct {fill_pct:g} "
        f"--warmup {warmup} --decisions {decisions} --repeats {repeats}` on {platform.node()} "
        f"({platform.processor() or platform.machine()}, Python {platform.python_version()}); medians of "
        f"{repeats} runs, each timing {decisions} decide-and-bind cycles after {warmup} untimed ones, on a fleet "
        f"prefilled at random to {fill_pct:g}% of its GPU share.",
        "",
        "| policy | decisions/s (median) | per CPU second (median) | ms per decision | runs (decisions/s) |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        mine = [r for r in runs if r["policy"] == name]
        rate = statistics.median(r["decisions_per_s"] for r in mine)
        cpu_rate = statistics.median(r["decisions_per_cpu_s"] for r in mine)
        each = ", ".join(f"{r['decisions_per_s']:.0f}" for r in mine)
        lines.append(f"| {name} | {rate:.0f} | {cpu_rate:.0f} | {1000.0 / rate:.2f} | {each} |")
    lines += ["", "Every run:", "",
              "| policy | seed | decisions/s | per CPU s | placed | GPU allocated % before -> after |",
              "|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['policy']} | {r['seed']} | {r['decisions_per_s']:.0f} | {r['decisions_per_cpu_s']:.0f} | "
                     f"{r['placed']}/{r['decisions']} | "
                     f"{r['allocated_pct_start']:.1f} -> {r['allocated_pct_end']:.1f} |")
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    bench.bench_app.command("placement")(bench_placement)


__all__ = ["bench_placement", "register"]
