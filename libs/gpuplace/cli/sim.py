"""`gpuplace sim`: replay an Alibaba trace through placement policies with the paper's harness.

    gpuplace sim --pods default --policy fgd,bestfit --seeds 42-51 --jobs 2 [--json] [--plot out.png]
    gpuplace sim --pods default --policy gpuplace --defrag [--max-moves-pct 3] --seeds 42-51 --json
    gpuplace sim --scenario fleet --policy gpuplace,fgd,bestfit [--defrag] [--no-latency] --days 7 --seeds 42-44
    gpuplace sim --scenario fleet --policy gpuplace --days 2 --seeds 42-44 --autoscalers 1 --json
    gpuplace sim --scenario fleet --policy gpuplace,fgd,bestfit --days 2 --seeds 42-44 --autoscale

`--pods` takes a CSV path or a trace short name (default, cpu050, ...) looked up in the trace
directory ($GPUPLACE_TRACE_DIR, else ../shared/traces/alibaba-gpu-v2023 from the repository root);
`--nodes` likewise (default: the GPU node list). Each (policy, seed) run is one process task; the
numbers are means over the seeds. Bad input is a usage error (exit 2) with a one-line message.
"""

from __future__ import annotations

import functools
import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import typer
from rich.progress import Progress
from rich.table import Table

from gpuplace.cli import scenario as scenarios
from gpuplace.cli import sim_fleet
from gpuplace.cli.choices import parse_policies, parse_seeds
from gpuplace.cli.console import new_console
from gpuplace.cli.plot_output import check_plot_path, save_figure
from gpuplace.core.policies import registry
from gpuplace.sim import defrag_simulator, kpi, simulator
from gpuplace.traces import alibaba


@dataclass(frozen=True)
class RunSummary:
    """What one (trace, policy, seed) run reports back to the CLI (small, picklable)."""

    trace: str
    policy: str
    seed: int
    unallocated_pct_at_100: float | None
    """None: the run's arrivals never reached 100% (kpi.at); such runs are counted apart, out of the means."""
    unallocated_pct_at_130: float | None
    fragmentation_pct_at_100: float | None
    fragmentation_ratio_pct_at_100: float | None
    failed_pods: int
    failed_by_shape: dict[str, int]
    arrivals: int
    seconds: float
    unallocated_curve: dict[int, float]
    moved_pods: int = 0
    moved_pods_pct: float | None = None
    """With --defrag: moves per placed pod over the run, %; None without."""


def run_grid(tasks: list[tuple], jobs: int, progress=None) -> list[RunSummary]:
    """Run (pods file, nodes file, trace label, policy, seed[, max moves % with --defrag]) tasks, `jobs`
    processes at a time."""
    if jobs <= 1:
        return [_tick(progress, _run_one(task)) for task in tasks]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return [_tick(progress, summary) for summary in pool.map(_run_one, tasks)]


def summarise(runs: list[RunSummary]) -> dict:
    """Means over seeds of one (trace, policy) group, the shape of the --json output."""
    failed: dict[str, float] = {}
    for run in runs:
        for shape, count in run.failed_by_shape.items():
            failed[shape] = failed.get(shape, 0) + count / len(runs)
    mean = lambda key: _mean([getattr(r, key) for r in runs])  # noqa: E731
    return {
        "policy": runs[0].policy, "pods": runs[0].trace, "seeds": [r.seed for r in runs],
        "seeds_short_of_100": [r.seed for r in runs if r.unallocated_pct_at_100 is None],
        "unallocated_pct_at_100": mean("unallocated_pct_at_100"),
        "unallocated_pct_at_130": mean("unallocated_pct_at_130"),
        "fragmentation_pct_at_100": mean("fragmentation_pct_at_100"),
        "fragmentation_ratio_pct_at_100": mean("fragmentation_ratio_pct_at_100"),
        "failed_pods": mean("failed_pods"), "arrivals": mean("arrivals"), "seconds": mean("seconds"),
        "unallocated_pct_at_100_by_seed": [r.unallocated_pct_at_100 for r in runs],
        "failed_pods_by_shape": dict(sorted(((k, round(v, 1)) for k, v in failed.items()), key=lambda kv: -kv[1])),
        **({"moved_pods_pct": mean("moved_pods_pct"), "moved_pods": mean("moved_pods")}
           if runs[0].moved_pods_pct is not None else {}),
    }


def _mean(values: list) -> float | None:
    """Mean over the runs that have the figure (3 decimals); None when none has it -- never NaN."""
    present = [v for v in values if v is not None]
    return round(float(np.mean(present)), 3) if present else None


def register(app: typer.Typer) -> None:
    app.command("sim", help="Replay an Alibaba trace through placement policies with the paper's harness.")(sim)


def sim(
    pods: str = typer.Option("default", help="Pod CSV, or a trace short name (default, cpu050, ...)."),
    nodes: str = typer.Option(alibaba.DEFAULT_NODES, help="Node CSV, or a node list short name."),
    policy: str = typer.Option("gpuplace", help="Policy name(s), comma-separated: " + ", ".join(registry.names())),
    seeds: str = typer.Option("42-51", help="Seeds: N, N-M, or a comma-separated list."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON array, one object per policy."),
    plot: Path | None = typer.Option(None, help="Write the plot to this image (png without an extension): the "
                                                "allocation curves; with --scenario, its KPIs or time series."),
    jobs: int = typer.Option(1, min=1, help="Processes to run seeds in parallel."),
    defrag: bool = typer.Option(False, "--defrag", help="A pod blocked by fragmentation may have pods moved for it."),
    max_moves_pct: float = typer.Option(3.0, "--max-moves-pct", min=0.0,
                                        help="With --defrag: moves never exceed this % of the pods placed so far."),
    scenario: str | None = typer.Option(None, "--scenario",
                                        help="Run a scenario instead of a trace: `robotics` (perception pods "
                                             "arriving and departing; adds slo_attainment, pods_per_gpu) or "
                                             "`fleet` (regions of clusters under churn over --days; sim/fleet)."),
    days: float = typer.Option(7.0, "--days", help="With --scenario fleet: simulated days."),
    regions: int = typer.Option(5, "--regions", min=1, help="With --scenario fleet: regions (2 clusters each)."),
    gpus_per_cluster: int = typer.Option(100, "--gpus-per-cluster", min=8, help="With --scenario fleet."),
    save_runs: Path | None = typer.Option(None, "--save-runs", help="With --scenario fleet: a directory for each "
                                                                    "run's whole result (JSON, hourly series)."),
    autoscalers: int = typer.Option(0, "--autoscalers", min=0,
                                    help="With --scenario fleet: every this many simulated hours, compare the nodes "
                                         "a whole-GPU and a hint-driven autoscaler would add for the waiting pods "
                                         "(0: off; it costs time)."),
    autoscale: bool = typer.Option(False, "--autoscale", help="With --scenario fleet: every 5 simulated minutes add "
                                   "the nodes the hint-driven autoscaler computes for pods waiting past 60 s (they "
                                   "join 5 min later); remove them once empty for 10 min."),
    headroom: float = typer.Option(0.0, "--autoscale-headroom", min=0.0,
                                   help="With --autoscale: also keep room for this fraction more of each perception "
                                        "deployment's replicas (placeholders, as overprovisioning does)."),
    no_latency: bool = typer.Option(False, "--no-latency",
                                    help="With --scenario fleet: run the policies without the latency filter the "
                                         "placement service puts in front of every pod with a frame rate (on by "
                                         "default), for comparison."),
) -> None:
    if plot is not None:  # before the run, which may take minutes
        try:
            check_plot_path(plot)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="'--plot'") from None
    scaling = _autoscale(autoscale, headroom)
    if not scenario:
        _run_trace(pods, nodes, policy, seeds, as_json=as_json, plot=plot, jobs=jobs,
                   moves_pct=max_moves_pct if defrag else None)
        return
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    if scenario != sim_fleet.NAME:
        scenarios.run(scenario, policy, seed_list, as_json=as_json, plot=plot)
        return
    try:
        fleet = sim_fleet.FleetScenario(regions=regions, gpus_per_cluster=gpus_per_cluster, days=days)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    sim_fleet.run([p.strip() for p in policy.split(",") if p.strip()], seed_list, days=days, defrag=defrag,
                  as_json=as_json, plot=plot, jobs=jobs, scenario=fleet, save_runs=save_runs,
                  autoscalers=autoscalers, latency=not no_latency, autoscale=scaling)


def _autoscale(on: bool, headroom: float) -> sim_fleet.Autoscale | None:
    """The acting autoscaler's settings from `--autoscale` and `--autoscale-headroom` (None: off)."""
    if headroom and not on:
        raise typer.BadParameter("--autoscale-headroom needs --autoscale", param_hint="'--autoscale-headroom'")
    return sim_fleet.Autoscale(headroom=headroom) if on else None


def _run_trace(pods: str, nodes: str, policy: str, seeds: str, *, as_json: bool, plot: Path | None, jobs: int,
               moves_pct: float | None) -> None:
    """`gpuplace sim` on a trace: every policy over every seed, summarised as a table (or JSON) and a plot."""
    try:
        policies, seed_list = parse_policies(policy), parse_seeds(seeds)
        pods_path, nodes_path = alibaba.pod_file(pods), alibaba.node_file(nodes)
    except (ValueError, alibaba.TraceError) as error:
        raise typer.BadParameter(str(error)) from None
    label = pods if not Path(pods).is_file() else Path(pods).stem
    tasks = [(pods_path, nodes_path, label, p, s, moves_pct) for p in policies for s in seed_list]
    try:
        if as_json:
            runs = run_grid(tasks, jobs)
        else:
            with Progress(transient=True) as bar:
                handle = bar.add_task(f"{label}: {len(tasks)} runs", total=len(tasks))
                runs = run_grid(tasks, jobs, (bar, handle))
    except alibaba.TraceError as error:
        raise typer.BadParameter(str(error)) from None
    groups = [[r for r in runs if r.policy == p] for p in policies]
    summaries = [summarise(g) for g in groups]
    if as_json:
        typer.echo(json.dumps(summaries, indent=2))
    else:
        _print_table(summaries)
    if plot is not None:
        write_plot(groups, plot, title=label)


def write_plot(groups: list[list[RunSummary]], path: Path, title: str = "") -> None:
    """Unallocated GPU vs arrived demand, median over seeds with the interquartile band (paper Fig. 7)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 3.5), dpi=120)
    for runs in groups:
        points = sorted(set.intersection(*(set(r.unallocated_curve) for r in runs)))
        values = np.array([[r.unallocated_curve[p] for p in points] for r in runs])  # (n_seeds, n_points)
        line = ax.plot(points, np.median(values, axis=0), label=runs[0].policy, linewidth=2.5)[0]
        low, high = np.percentile(values, [25, 75], axis=0)
        ax.fill_between(points, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.plot([0, 100], [100, 0], linestyle=":", color="grey", alpha=0.8, label="Ideal")
    ax.set(xlim=(75, 130), ylim=(0, 25), title=title, ylabel="Unalloc. GPU (%)",
           xlabel="Arrived workloads (in % of cluster GPU capacity)")
    ax.grid(linestyle="-.", alpha=0.8)
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1.05), frameon=False)
    save_figure(fig, path)
    plt.close(fig)


def _print_table(summaries: list[dict]) -> None:
    table = Table(title=f"{summaries[0]['pods']}: means over seeds {_seed_text(summaries[0]['seeds'])}")
    # unallocated GPU % at 100/130% arrived; fragmented GPU % of capacity and of idle GPU at 100%
    # short of 100%: seeds whose arrivals never reached the mark, left out of the means
    for column in ("policy", "unalloc@100", "unalloc@130", "frag@100", "frag/idle", "short of 100%", "failed",
                   "most failed", "s/run"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for s in summaries:
        top = next(iter(s["failed_pods_by_shape"].items()), None)
        table.add_row(s["policy"], _cell(s["unallocated_pct_at_100"]), _cell(s["unallocated_pct_at_130"]),
                      _cell(s["fragmentation_pct_at_100"]), _cell(s["fragmentation_ratio_pct_at_100"], 1),
                      str(len(s["seeds_short_of_100"])), f"{s['failed_pods']:.0f}",
                      f"{top[0]} ({top[1]:.0f})" if top else "-", f"{s['seconds']:.2f}")
    new_console().print(table)


def _cell(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _seed_text(seeds: list[int]) -> str:
    contiguous = seeds == list(range(seeds[0], seeds[-1] + 1))
    return f"{seeds[0]}-{seeds[-1]}" if contiguous and len(seeds) > 1 else ",".join(map(str, seeds))


def _tick(progress, summary: RunSummary) -> RunSummary:
    if progress is not None:
        bar, handle = progress
        bar.advance(handle)
    return summary


@functools.lru_cache(maxsize=8)
def _read(pods_path: Path, nodes_path: Path):
    return alibaba.read_nodes(nodes_path), alibaba.read_pods(pods_path)


def _run_one(task: tuple) -> RunSummary:
    pods_path, nodes_path, label, policy, seed, *defrag = task
    max_moves_pct = defrag[0] if defrag else None
    nodes, pods = _read(pods_path, nodes_path)
    started = time.perf_counter()
    moved = None
    if max_moves_pct is None:
        result = simulator.run(nodes, pods, policy, seed)
    else:
        moved = defrag_simulator.run(nodes, pods, policy, seed, max_moves_pct=max_moves_pct)
        result = moved.simulation
    seconds = time.perf_counter() - started
    read = functools.partial(kpi.read, result.arrived_milli, total_gpus=result.total_gpus, arrived_pct=100)
    unallocated = 100.0 - result.allocated_pct()
    return RunSummary(
        label, policy, seed, result.unallocated_pct_at(100), result.unallocated_pct_at(130),
        read(values_pct=result.fragmentation_pct()), read(values_pct=result.fragmentation_ratio_pct()),
        result.failed_pods, result.failed_by_shape, result.n_arrivals, seconds,
        kpi.curve(result.arrived_milli, unallocated, result.total_gpus),
        moved.moved_pods if moved else 0, moved.moved_pods_pct if moved else None,
    )


__all__ = ["RunSummary", "register", "run_grid", "summarise"]
