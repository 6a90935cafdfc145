"""`gpuplace sim --scenario fleet`: the fleet simulator (sim/fleet) per policy and seed, KPIs over the run.

    gpuplace sim --scenario fleet --policy gpuplace,fgd,bestfit [--defrag] [--no-latency] --days 7 --seeds 42-44 \\
        [--jobs N] [--json] [--plot fleet.png] [--autoscalers H] [--autoscale]

As the placement service runs them, every pod with a frame rate goes through the latency filter in front of the
policy; `--no-latency` runs the policies alone, for comparison (the label gains "-nolat").

Every (policy, seed) run simulates the same plan for that seed (sim/fleet/plan.py). Printed per policy: the
means over seeds of the fleet's time-averaged stranded GPU memory (FGD's measure, and split into fragmentation-
and time-stranded: sim/fleet/kpis.py), GPU memory allocated, p50/p99 pending time of GPU pods and of perception
pods, SLO attainment and pods moved per hour; `--json` gives them with every run's fleet and per-region
KPIs (the hourly series left out); `--plot` draws the fleet's stranded memory and waiting GPU pods over time.
Progress goes to stderr, one line per simulated day, so `--json` stays clean on stdout. `--save-runs DIR` writes
each run's whole result (hourly series included) to DIR as it finishes. `--autoscalers H` compares, every H
simulated hours, the nodes a whole-GPU autoscaler and a hint-driven one would add for each cluster's waiting pods
(sim/fleet/autoscaling.py; the simulation is not changed), adding per-seed totals to the JSON (`autoscalers`;
every observation too in --save-runs files) and a table to the printout; it costs time. `--autoscale` scales the
fleet with the acting autoscaler (sim/fleet/scaling.py: the hint-driven autoscaler's nodes, joining after 5 min,
removed after 10 min empty; the label gains "+autoscale"; `--autoscale-headroom F` keeps room for F more of each
perception deployment's replicas, sim/fleet/headroom.py): per run, the GPUs it added, its peak, the fleet's peak and
GPU-hours (`autoscale` in the JSON, a table in the printout).
"""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.table import Table

from gpuplace.cli.console import new_console
from gpuplace.cli.plot_output import save_figure
from gpuplace.core.policies import registry
from gpuplace.sim.fleet import FleetScenario, FleetSim, make_plan
from gpuplace.sim.fleet.autoscaling import AutoscalerComparison
from gpuplace.sim.fleet.plan import DAY_S, PERCEPTION
from gpuplace.sim.fleet.scaling import Autoscale

NAME = "fleet"
WARMUP_H = FleetScenario().warmup_s / 3600.0


def run(policies: list[str], seeds: list[int], *, days: float, defrag: bool, as_json: bool, plot: Path | None = None,
        jobs: int = 1, scenario: FleetScenario | None = None, save_runs: Path | None = None,
        autoscalers: int = 0, latency: bool = True, autoscale: Autoscale | None = None) -> list[dict[str, Any]]:
    """Run, print and return one summary per policy (see the module docstring). `autoscalers` > 0 compares the
    two autoscalers every that many simulated hours (sim/fleet/autoscaling.py)."""
    unknown = [p for p in policies if p not in registry.POLICIES]
    if not policies or unknown:
        given = ", ".join(unknown) or "(none)"
        raise typer.BadParameter(f"unknown policy {given}; known: {', '.join(registry.names())}")
    try:
        options = replace(scenario or FleetScenario(), days=days)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    if save_runs is not None:
        save_runs.mkdir(parents=True, exist_ok=True)
    # seed by seed, so that runs cut short leave whole comparisons behind (with --save-runs)
    tasks = [(options, seed, policy, defrag, jobs <= 1, save_runs, autoscalers, latency, autoscale)
             for seed in seeds for policy in policies]
    if jobs <= 1:
        runs = [_run_one(task) for task in tasks]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            runs = list(pool.map(_run_one, tasks))
    summaries = [summarise([r for r in runs if r["policy"] == p]) for p in policies]
    if as_json:
        typer.echo(json.dumps(summaries, indent=2))
    else:
        _print(summaries)
        if autoscalers:
            _print_autoscalers(summaries)
        if autoscale:
            _print_autoscale(runs)
    if plot is not None:
        write_plot(runs, plot)
    return summaries


def _run_one(task: tuple[FleetScenario, int, str, bool, bool, Path | None, int, bool, Autoscale | None]
             ) -> dict[str, Any]:
    scenario, seed, policy, defrag, verbose, save_runs, autoscalers, latency, autoscale = task
    scaled = ("" if autoscale is None
              else "-autoscale" + (f"-headroom{autoscale.headroom:g}" if autoscale.headroom else ""))
    flags = "" if autoscale is None else " --autoscale" + (f" --autoscale-headroom {autoscale.headroom:g}"
                                                           if autoscale.headroom else "")
    label = f"fleet {policy}{' --defrag' if defrag else ''}{'' if latency else ' --no-latency'}{flags} seed {seed}"
    day = [0]

    def progress(now_s: float, total_s: float) -> None:
        if verbose and now_s >= (day[0] + 1) * DAY_S:
            day[0] = int(now_s // DAY_S)
            typer.echo(f"{label}: day {day[0]}/{total_s / DAY_S:g}", err=True)

    comparison = AutoscalerComparison(every_h=autoscalers) if autoscalers else None
    result = FleetSim(make_plan(scenario, seed), policy, defrag=defrag, latency=latency, progress=progress,
                      observer=comparison, autoscale=autoscale).run()
    if comparison is not None:
        result["autoscalers"] = comparison.totals()
        result["autoscaler_observations"] = [o.as_dict() for o in comparison.observations]
    typer.echo(f"{label}: done in {result['seconds']:.1f} s", err=True)
    if save_runs is not None:
        name = f"{policy}{'-defrag' if defrag else ''}{'' if latency else '-nolat'}{scaled}-seed{seed}.json"
        (save_runs / name).write_text(json.dumps(result, indent=1))
    return result


FLEET_KPIS = ("stranded_gpu_memory_gib", "fragmentation_stranded_gib", "time_stranded_gib",
              "stranded_gpu_memory_pct", "gpu_memory_allocated_pct", "allocation_pct",
              "waiting_gpu_pods_mean", "slo_attainment", "moved_pods_per_hour")


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over seeds of one policy's runs, with each run's KPIs (fleet and per region) beside them."""
    fleet = [r["fleet"] for r in runs]
    out: dict[str, Any] = {"scenario": NAME, "policy": runs[0]["policy"], "defrag": runs[0]["defrag"],
                           "latency": runs[0].get("latency", False),
                           "days": runs[0]["days"], "seeds": [r["seed"] for r in runs]}
    for kpi in FLEET_KPIS:
        values = [f[kpi] for f in fleet if f[kpi] is not None]
        out[kpi] = round(float(np.mean(values)), 4) if values else None
    for scope in ("pending_gpu", *(f"pending.{k}" for k in fleet[0]["pending"])):
        for q in ("p50_s", "p99_s"):
            values = [v for v in (_read(f, scope)[q] for f in fleet) if v is not None]
            out[f"{scope.replace('.', '_')}_{q}"] = round(float(np.mean(values)), 1) if values else None
    out["seconds_per_run"] = round(float(np.mean([r["seconds"] for r in runs])), 1)
    out["by_seed"] = [{k: v for k, v in r.items() if k not in ("series", "autoscaler_observations")} for r in runs]
    if all("autoscalers" in r for r in runs):
        out["autoscalers"] = _autoscaler_summary(runs)
    if all("autoscale" in r for r in runs):  # the acting autoscaler: means over seeds of what it added
        out["autoscale"] = {k: round(float(np.mean([r["autoscale"][k] for r in runs])), 1)
                            for k in ("gpus_added", "peak_added_gpus", "peak_fleet_gpus", "added_gpu_hours")}
    return out


def _autoscaler_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per seed, the nodes each autoscaler added summed over the observations that needed any (both placing every
    waiting pod), the pods the hints moved instead (all observations), and whether the hints added fewer on every
    seed -- the issue's criterion, as measured."""
    rows = []
    for r in runs:
        scope = r["autoscalers"]["needs_nodes_both_placed_all"]
        moved = r["autoscalers"]["hint_driven"]["pods_moved"]
        rows.append({"seed": r["seed"], **scope, "hint_driven_pods_moved": moved})
    return {"by_seed": rows,
            "hints_fewer_on_every_seed": all(r["hint_driven_nodes"] < r["whole_gpu_nodes"] for r in rows)}


def _read(fleet: dict[str, Any], scope: str) -> dict[str, Any]:
    value: Any = fleet
    for part in scope.split("."):
        value = value[part]
    return dict(value)


def write_plot(runs: list[dict[str, Any]], path: Path) -> None:
    """Per policy (first seed): the fleet's stranded GPU memory and waiting GPU pods, hour by hour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first_seed = min(r["seed"] for r in runs)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), dpi=120, sharex=True)
    for r in (r for r in runs if r["seed"] == first_seed):
        rows = [row for row in r["series"] if row["t_h"] >= WARMUP_H] or r["series"]  # after filling the empty fleet
        hours = [row["t_h"] for row in rows]
        regions = [k for k in rows[0] if k != "t_h"]
        stranded = [sum(row[g]["stranded_gib"] for g in regions) for row in rows]
        waiting = [sum(row[g]["waiting_gpu_pods"] for g in regions) for row in rows]
        label = r["policy"] + (" + defrag" if r["defrag"] else "")
        top.plot(hours, stranded, label=label, linewidth=1.5)
        bottom.plot(hours, waiting, label=label, linewidth=1.5)
    top.set(ylabel="stranded GPU memory (GiB)", title=f"fleet, seed {first_seed}")
    bottom.set(ylabel="GPU pods waiting", xlabel="simulated hours")
    for ax in (top, bottom):
        ax.grid(linestyle="-.", alpha=0.6)
    top.legend(loc="upper left", bbox_to_anchor=(1, 1.02), frameon=False)
    save_figure(fig, path)
    plt.close(fig)


def _print(summaries: list[dict[str, Any]]) -> None:
    s0 = summaries[0]
    table = Table(title=f"fleet, {s0['days']:g} days: means over seeds {s0['seeds']}")
    for column in ("policy", "stranded GiB (FGD)", "fragmentation-stranded GiB", "time-stranded GiB",
                   "GPU mem alloc %", "GPU pods p50 / p99 s", "perception p50 / p99 s", "SLO", "moved/h", "s/run"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for s in summaries:
        table.add_row(s["policy"] + (" +defrag" if s["defrag"] else "") + ("" if s["latency"] else " -latency")
                      + (" +autoscale" if "autoscale" in s else ""),
                      f"{s['stranded_gpu_memory_gib']:.0f}", f"{s['fragmentation_stranded_gib']:.0f}",
                      f"{s['time_stranded_gib']:.0f}", f"{s['gpu_memory_allocated_pct']:.1f}",
                      f"{_num(s['pending_gpu_p50_s'])} / {_num(s['pending_gpu_p99_s'])}",
                      f"{_num(s['pending_perception_p50_s'])} / {_num(s['pending_perception_p99_s'])}",
                      _num(s["slo_attainment"], "{:.3f}"),
                      f"{s['moved_pods_per_hour']:.2f}", f"{s['seconds_per_run']:.1f}")
    new_console().print(table)


def _print_autoscalers(summaries: list[dict[str, Any]]) -> None:
    table = Table(title="nodes the autoscalers would add, summed over the observations that needed nodes "
                        "(both placing every waiting pod)")
    for column in ("policy", "seed", "observations", "whole-gpu nodes", "hint-driven nodes",
                   "hints fewer / equal / more", "pods the hints moved"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for s in summaries:
        for row in s["autoscalers"]["by_seed"]:
            table.add_row(s["policy"] + (" +defrag" if s["defrag"] else ""), str(row["seed"]),
                          str(row["observations"]), str(row["whole_gpu_nodes"]), str(row["hint_driven_nodes"]),
                          f"{row['hints_fewer']} / {row['hints_equal']} / {row['hints_more']}",
                          str(row["hint_driven_pods_moved"]))
    new_console().print(table)


def _print_autoscale(runs: list[dict[str, Any]]) -> None:
    """Per run: what the acting autoscaler added and what the fleet used, beside the waits it was for."""
    table = Table(title="the acting autoscaler, per run (GPU-hours of the fleet after the warm-up)")
    for column in ("policy", "seed", "nodes added / removed", "GPUs added", "peak added GPUs", "peak fleet GPUs",
                   "added GPU-h", "fleet GPU-h", "perception p99 s", "GPU pods p99 s", "SLO"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for r in runs:
        a, f = r["autoscale"], r["fleet"]
        table.add_row(r["policy"], str(r["seed"]), f"{a['nodes_added']} / {a['nodes_removed']}", str(a["gpus_added"]),
                      str(a["peak_added_gpus"]), str(a["peak_fleet_gpus"]), f"{a['added_gpu_hours']:.0f}",
                      f"{f['gpu_hours']:.0f}", _num(f["pending"][PERCEPTION]["p99_s"]), _num(f["pending_gpu"]["p99_s"]),
                      _num(f["slo_attainment"], "{:.3f}"))
    new_console().print(table)


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


__all__ = ["Autoscale", "FLEET_KPIS", "FleetScenario", "NAME", "WARMUP_H", "run", "summarise", "write_plot"]
