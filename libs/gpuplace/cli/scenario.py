"""`gpuplace scenario robotics`: placement policies over time on a perception fleet, judged by latency.

    gpuplace scenario robotics --policy exclusive,fgd,gpuplace --seeds 0 [--latency-data DIR] [--json]

Runs sim/scenarios/robotics.py once per policy and seed (the same arrivals for every policy) and
prints, per policy, the means over seeds of slo_attainment, deadline_miss_frames_pct and
pods_per_gpu (with the per-seed values in --json). `--latency-data` fits the latency tails on a
colocation directory first; without it the tails fitted on the shared H200 data are used.
`gpuplace sim --scenario robotics` calls `run` with the same arguments. `gpuplace scenario fleet` runs the fleet
simulator (cli/sim_fleet.py) for its default 7 days; `gpuplace sim --scenario fleet` has its options.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import typer
from rich.table import Table

from gpuplace.cli import sim_fleet
from gpuplace.cli.choices import parse_seeds
from gpuplace.cli.console import new_console
from gpuplace.cli.plot_output import save_figure
from gpuplace.core.latency import fit
from gpuplace.core.latency.model import DEFAULT_MODEL, LatencyModel
from gpuplace.core.latency.speed import relative_speed
from gpuplace.sim.fleet import FleetScenario
from gpuplace.sim.scenarios import robotics
from gpuplace.traces import colocation

SCENARIOS = (robotics.NAME, sim_fleet.NAME)
DEFAULTS = robotics.RoboticsScenario()
KPIS = ("slo_attainment", "deadline_miss_frames_pct", "pods_per_gpu", "pods_per_fleet_gpu", "placed_pct",
        "busy_gpus_mean", "overloaded_gpu_time_pct")


def register(app: typer.Typer) -> None:
    app.command("scenario", help=__doc__.split("\n\n")[0])(scenario_command)


def scenario_command(
    name: str = typer.Argument(robotics.NAME, help="Scenario: " + ", ".join(SCENARIOS)),
    policy: str = typer.Option("exclusive,fgd,gpuplace", help="Policies, comma-separated (or <policy>+latency)."),
    seeds: str = typer.Option("0", help="Seeds: N, N-M, or a comma-separated list."),
    latency_data: Path | None = typer.Option(None, help="Colocation directory to fit the latency tails on."),
    nodes: int = typer.Option(DEFAULTS.n_nodes, min=1, help="Nodes in the fleet (8 GPUs each)."),
    pods: int = typer.Option(DEFAULTS.n_pods, min=1, help="Pods arriving over the run."),
    offered: float = typer.Option(DEFAULTS.offered_pods_per_gpu, min=0.01, help="Offered running pods per GPU."),
    margin: float = typer.Option(DEFAULTS.margin, min=0.0, max=0.99, help="Deadline share kept in reserve."),
    learn: bool = typer.Option(DEFAULTS.learn, help="Classes start from the prior and are learned online."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON array, one object per policy."),
) -> None:
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    options = replace(DEFAULTS, n_nodes=nodes, n_pods=pods, offered_pods_per_gpu=offered, margin=margin, learn=learn)
    run(name, policy, seed_list, as_json=as_json, latency_data=latency_data, options=options)


def run(name: str, policy: str, seeds: list[int], *, as_json: bool, latency_data: Path | None = None,
        options: robotics.RoboticsScenario = DEFAULTS, plot: Path | None = None) -> list[dict]:
    """Run scenario `name` for the comma-separated `policy` names and `seeds`, print, return the summaries; with
    `plot`, also draw them there (the fleet scenario: its hourly series).

    Bad names and unreadable data are typer.BadParameter (a one-line usage error, exit 2).
    """
    if name not in SCENARIOS:
        raise typer.BadParameter(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    policies = [p.strip() for p in policy.split(",") if p.strip()]
    if name == sim_fleet.NAME:  # its own options live on `gpuplace sim --scenario fleet` (--days, --defrag, --plot)
        return sim_fleet.run(policies, seeds, days=FleetScenario().days, defrag=False, as_json=as_json, plot=plot)
    model = _model(latency_data)
    try:
        runs = [r for seed in seeds
                for r in robotics.run_robotics_scenario(policies, seed, scenario=options, model=model)]
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    summaries = [summarise([r for r in runs if r["policy"] == p]) for p in policies]
    if as_json:
        typer.echo(json.dumps(summaries, indent=2))
    else:
        _print(summaries)
    if plot is not None:
        write_plot(summaries, plot)
    return summaries


PLOTTED = (("slo_attainment", "SLO attainment %", 100.0), ("deadline_miss_frames_pct", "frames past deadline %", 1.0),
           ("pods_per_gpu", "pods / busy GPU", 1.0))


def write_plot(summaries: list[dict], path: Path) -> None:
    """One panel per KPI of PLOTTED: a bar per policy (the mean over seeds), each seed's value a dot on it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PLOTTED), figsize=(4 * len(PLOTTED), 3.5), dpi=120)
    names = [s["policy"] for s in summaries]
    for ax, (kpi, label, scale) in zip(axes, PLOTTED, strict=True):
        ax.bar(names, [scale * s[kpi] for s in summaries], color="tab:blue", alpha=0.6)
        for x, s in enumerate(summaries):
            ax.plot([x] * len(s["by_seed"]), [scale * r[kpi] for r in s["by_seed"]], "k.", markersize=4)
        ax.set(title=label)
        ax.tick_params(axis="x", labelrotation=30)
        ax.grid(axis="y", linestyle="-.", alpha=0.6)
    fig.suptitle(f"{summaries[0]['scenario']}: seeds {', '.join(map(str, summaries[0]['seeds']))}", y=1.04)
    save_figure(fig, path)
    plt.close(fig)


def summarise(runs: list[dict]) -> dict:
    """Means over seeds of one policy's runs, with the per-seed KPIs beside them."""
    out = {"scenario": runs[0]["scenario"], "policy": runs[0]["policy"], "seeds": [r["seed"] for r in runs]}
    for kpi in KPIS:
        out[kpi] = round(float(np.mean([r[kpi] for r in runs])), 4)
    out["by_seed"] = [{k: r[k] for k in ("seed", *KPIS, "placed_pods", "arrived_pods")} for r in runs]
    if "learned_work_fraction" in runs[-1]:
        out["learned_work_fraction"] = runs[-1]["learned_work_fraction"]
    return out


def _model(latency_data: Path | None) -> LatencyModel:
    if latency_data is None:
        return DEFAULT_MODEL
    try:
        table = colocation.read_frames(latency_data)
    except colocation.ColocationDataError as error:
        raise typer.BadParameter(str(error)) from None
    return fit.fit(table, gpu_speed=relative_speed(colocation.DEFAULT_GPU))


def _print(summaries: list[dict]) -> None:
    table = Table(title=f"{summaries[0]['scenario']}: means over seeds {summaries[0]['seeds']}")
    for column in ("policy", "SLO attainment", "frames past deadline %", "pods / busy GPU", "pods / GPU",
                   "placed %"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for s in summaries:
        table.add_row(s["policy"], f"{100 * s['slo_attainment']:.2f}%", f"{s['deadline_miss_frames_pct']:.3f}",
                      f"{s['pods_per_gpu']:.2f}", f"{s['pods_per_fleet_gpu']:.2f}", f"{s['placed_pct']:.1f}")
    new_console().print(table)


__all__ = ["KPIS", "SCENARIOS", "register", "run", "summarise"]
