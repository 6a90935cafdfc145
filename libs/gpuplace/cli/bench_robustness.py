"""`gpuplace bench robustness`: policies side by side on small generated fleets, many seeds (issue 19).

    gpuplace bench robustness --jobs 2                       # 3 families x 100 seeds x gpuplace, fgd, bestfit
    gpuplace bench robustness --quick                        # 4 seeds on fleets a fifth the size (tests)

Families, arrival orders and the KPI: gpuplace.sim.robustness. Per family and policy the report gives the mean,
median, p95 and worst seed of the unallocated GPU % at 100% arrived, how many seeds each policy loses to FGD, and
the mean per arrival order; `results/robustness.md` + `.json` (every seed's figure in the json).
"""

from __future__ import annotations

import json
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import typer
from rich.progress import Progress

from gpuplace.cli import bench
from gpuplace.cli.choices import parse_policies, parse_seeds
from gpuplace.cli.console import new_console
from gpuplace.sim import robustness

DEFAULT_OUT = Path("bench/results/robustness.md")
QUICK_SEEDS, QUICK_SCALE = "0-3", 0.4
DEFAULT_POLICIES = "gpuplace,fgd,bestfit"


def bench_robustness(
    seeds: str = typer.Option("0-99", help="Seeds: N, N-M, or a comma-separated list (>= 100 for the issue's bar)."),
    families: str = typer.Option(",".join(robustness.FAMILIES), help="Comma-separated families."),
    policies: str = typer.Option(DEFAULT_POLICIES, help="Policies to run; `" + robustness.DECLARED + "` is "
                                 "gpuplace told the run's whole-GPU shapes (gpuplace.sim.robustness)."),
    order: str = typer.Option("", help="One arrival order for every seed (default: seed % n picks one of the "
                                       "family's n orders: " + ", ".join(robustness.ORDERS) + ")."),
    quick: bool = typer.Option(False, help=f"Seeds {QUICK_SEEDS} on fleets {QUICK_SCALE:g} x the size (tests)."),
    jobs: int = typer.Option(1, min=1, help="Processes to run in parallel."),
    out: Path = typer.Option(DEFAULT_OUT, help="Markdown file to write (a .json with every seed beside it)."),
) -> None:
    try:
        seed_list = parse_seeds(QUICK_SEEDS if quick else seeds)
        policy_list = [p.strip() for p in policies.split(",") if p.strip()]
        registered = [p for p in policy_list if p != robustness.DECLARED]
        if registered or not policy_list:
            parse_policies(",".join(registered))  # the reason, when one is unknown or none is given
        family_list = [f for f in families.split(",") if f]
        unknown = [f for f in family_list if f not in robustness.FAMILIES]
        if unknown or not family_list:
            raise ValueError(f"unknown family {', '.join(unknown)!r}; known: {', '.join(robustness.FAMILIES)}")
        if order and order not in robustness.ORDERS:
            raise ValueError(f"unknown order {order!r}; known: {', '.join(robustness.ORDERS)}")
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    scale = QUICK_SCALE if quick else 1.0
    tasks = [(f, p, s, order or None, scale) for f in family_list for s in seed_list for p in policy_list]
    started = time.perf_counter()
    with Progress(transient=True) as bar:
        task = bar.add_task(f"{len(tasks)} runs", total=len(tasks))
        outcomes = run_all(tasks, jobs, lambda: bar.advance(task))
    command = "gpuplace bench robustness" + (" --quick" if quick else f" --seeds {seeds}") + f" --jobs {jobs}" + (
        f" --families {families}" if families != ",".join(robustness.FAMILIES) else "") + (
        f" --policies {policies}" if policies != DEFAULT_POLICIES else "") + (f" --order {order}" if order else "")
    table = summarise(outcomes)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_markdown(table, command, time.perf_counter() - started, scale))
    out.with_suffix(".json").write_text(json.dumps(
        {"command": command, "scale": scale, "summary": table,
         "runs": [o.__dict__ for o in outcomes]}, indent=1) + "\n")
    new_console().print(out.read_text())
    new_console().print(f"wrote {out} and {out.with_suffix('.json')}")


def run_all(tasks: list[tuple], jobs: int, tick=None) -> list[robustness.Outcome]:
    """Every task through robustness.run_one, `jobs` processes at a time, in task order."""
    results = []
    if jobs <= 1:
        iterator = map(robustness.run_one, tasks)
        for outcome in iterator:
            results.append(outcome)
            if tick:
                tick()
        return results
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for outcome in pool.map(robustness.run_one, tasks, chunksize=2):
            results.append(outcome)
            if tick:
                tick()
    return results


def summarise(outcomes: list[robustness.Outcome]) -> list[dict]:
    """Per (family, policy): mean, median, p95, worst seed, seeds lost to FGD, mean per arrival order.

    A run whose arrivals fell short of 100% has no KPI: it is counted in `short_of_100` and left out of every
    figure (and of the comparison with FGD), so that one such seed never turns a mean into NaN."""
    fgd = {(o.family, o.seed): o.unallocated_pct_at_100 for o in outcomes
           if o.policy == "fgd" and o.unallocated_pct_at_100 is not None}
    rows = []
    for family in dict.fromkeys(o.family for o in outcomes):
        for policy in dict.fromkeys(o.policy for o in outcomes):
            every = [o for o in outcomes if o.family == family and o.policy == policy]
            runs = [o for o in every if o.unallocated_pct_at_100 is not None]
            if not every:
                continue
            if not runs:
                rows.append({"family": family, "policy": policy, "seeds": 0, "short_of_100": len(every)})
                continue
            values = np.array([o.unallocated_pct_at_100 for o in runs])
            worst = runs[int(np.argmax(values))]
            by_order = {order: round(float(np.mean([_kpi(o) for o in runs if o.order == order])), 2)
                        for order in robustness.ORDERS if any(o.order == order for o in runs)}
            lost = sum(_kpi(o) > fgd[(family, o.seed)] + 1e-9 for o in runs if (family, o.seed) in fgd)
            rows.append({
                "family": family, "policy": policy, "seeds": len(runs), "short_of_100": len(every) - len(runs),
                "mean": round(float(values.mean()), 2), "median": round(float(np.median(values)), 2),
                "p95": round(float(np.percentile(values, 95)), 2), "worst": float(values.max()),
                "worst_seed": worst.seed, "worst_order": worst.order,
                "seeds_worse_than_fgd": int(lost) if fgd and policy != "fgd" else None,
                "mean_by_order": by_order, "seconds_per_run": round(float(np.mean([o.seconds for o in runs])), 2),
            })
    return rows


def _kpi(outcome: robustness.Outcome) -> float:
    assert outcome.unallocated_pct_at_100 is not None  # summarise keeps only the runs that reached 100%
    return outcome.unallocated_pct_at_100


def render_markdown(rows: list[dict], command: str, seconds: float, scale: float) -> str:
    lines = [
        "# Robustness: small fleets, many seeds, several arrival orders",
        "",
        "Unallocated GPU % at 100% arrived demand (the paper's KPI) per seed; families and arrival orders are "
        "defined in `libs/gpuplace/sim/robustness.py` (seed % n picks one of the family's n orders unless `--order` "
        "is given).",
        f"Measured with `{command}` in {seconds:.0f} s on {platform.machine()} / Python "
        f"{platform.python_version()}" + (f"; fleets {scale:g} x their size." if scale != 1.0 else "."),
        "",
        "Seeds short of 100%: runs whose arrivals never reached the mark, left out of every other column.",
        "",
        "| family | policy | seeds | short of 100% | mean | median | p95 | worst (seed, order) | "
        "seeds worse than FGD | " + " | ".join(f"mean {o}" for o in robustness.ORDERS) + " | s/run |",
        "|---|---|---|---|---|---|---|---|---|" + "---|" * len(robustness.ORDERS) + "---|",
    ]
    for r in rows:
        if not r["seeds"]:
            lines.append(f"| {r['family']} | {r['policy']} | 0 | {r['short_of_100']} |" + " - |" * (
                6 + len(robustness.ORDERS)))
            continue
        lost = "" if r["seeds_worse_than_fgd"] is None else str(r["seeds_worse_than_fgd"])
        orders = " | ".join(f"{r['mean_by_order'][o]:.2f}" if o in r["mean_by_order"] else "-"
                            for o in robustness.ORDERS)
        lines.append(f"| {r['family']} | {r['policy']} | {r['seeds']} | {r['short_of_100']} | {r['mean']:.2f} | "
                     f"{r['median']:.2f} | {r['p95']:.2f} | {r['worst']:.2f} ({r['worst_seed']}, {r['worst_order']}) | "
                     f"{lost} | {orders} | {r['seconds_per_run']:.2f} |")
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    del app  # a sub-command of `gpuplace bench` (bench.py's typer), registered there
    bench.bench_app.command("robustness", help="Policies on small generated fleets over many seeds and arrival "
                                               "orders: mean, median, p95, worst seed (results/robustness.md).")(
        bench_robustness)


__all__ = ["bench_robustness", "register", "render_markdown", "run_all", "summarise"]
