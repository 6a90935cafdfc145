"""`gpuplace bench sim`: all six paper policies over every trace, beside the published numbers.

Runs each policy on each pod trace of the trace directory for the seeds (default 42-51) and writes a
markdown table: our unallocated GPU % at 100% arrived demand, the published value (Weng et al.,
ATC'23, as DESIGN.md §6 quotes it) and the difference, one cell per trace and policy.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import typer
from rich.progress import Progress

from gpuplace.cli.choices import parse_policies, parse_seeds
from gpuplace.cli.console import new_console
from gpuplace.cli.sim import run_grid, summarise
from gpuplace.core.policies.registry import PAPER_POLICIES
from gpuplace.traces import alibaba

PUBLISHED_UNALLOCATED_PCT_AT_100 = {
    # trace: Random, DotProd, GpuClustering, GpuPacking, BestFit, FGD (mean of seeds 42-51)
    "default": (13.70, 9.38, 8.35, 8.22, 7.14, 4.77),
    "cpu050": (10.98, 6.97, 6.48, 6.54, 6.44, 5.00),
    "cpu200": (16.97, 12.55, 10.33, 10.02, 7.85, 5.18),
    "gpushare40": (15.14, 10.70, 10.24, 10.23, 8.56, 6.04),
    "gpushare80": (19.38, 15.86, 15.50, 15.35, 13.34, 10.92),
    "gpuspec10": (13.74, 9.83, 8.04, 7.76, 6.90, 5.34),
    "gpuspec25": (14.58, 14.56, 13.59, 13.23, 14.33, 6.09),
    "multigpu20": (13.08, 8.15, 6.66, 6.50, 6.27, 4.47),
    "multigpu40": (14.62, 5.96, 4.65, 4.41, 4.90, 3.09),
}
"""Published unallocated GPU % at 100% arrived demand, columns in PAPER_POLICIES order."""

DEFAULT_OUT = Path("bench/results/sim-vs-published.md")

bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks, with medians and published baselines.")


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


@bench_app.command("sim", help="Every paper policy on every trace with the paper's harness, beside FGD's published "
                               "figures (results/sim-vs-published.md).")
def bench_sim(
    seeds: str = typer.Option("42-51", help="Seeds: N, N-M, or a comma-separated list."),
    traces: str = typer.Option("", help="Comma-separated trace names (default: every trace in the directory)."),
    policies: str = typer.Option(",".join(PAPER_POLICIES), help="Policies to run."),
    jobs: int = typer.Option(1, min=1, help="Processes to run in parallel."),
    out: Path = typer.Option(DEFAULT_OUT, help="Markdown file to write (a .json with the raw means beside it)."),
) -> None:
    try:
        seed_list, policy_list = parse_seeds(seeds), parse_policies(policies)
        names = [t for t in traces.split(",") if t] or list(alibaba.trace_names())
        files = {name: alibaba.pod_file(name) for name in names}
        nodes = alibaba.node_file()
    except (ValueError, alibaba.TraceError) as error:
        raise typer.BadParameter(str(error)) from None
    if not names:
        raise typer.BadParameter(f"no pod traces in {alibaba.trace_dir()}")
    tasks = [(files[t], nodes, t, p, s) for t in names for p in policy_list for s in seed_list]
    started = time.perf_counter()
    with Progress(transient=True) as bar:
        runs = run_grid(tasks, jobs, (bar, bar.add_task(f"{len(tasks)} runs", total=len(tasks))))
    summaries = [summarise([r for r in runs if r.trace == t and r.policy == p]) for t in names for p in policy_list]
    command = f"gpuplace bench sim --seeds {seeds} --jobs {jobs}" + (f" --traces {traces}" if traces else "")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_markdown(summaries, command, time.perf_counter() - started))
    out.with_suffix(".json").write_text(json.dumps([_trimmed(s) for s in summaries], indent=2) + "\n")
    new_console().print(f"wrote {out} and {out.with_suffix('.json')}")


def render_markdown(summaries: list[dict], command: str, seconds: float) -> str:
    """The comparison table: one row per trace, 'ours (published, diff)' per policy."""
    policies = list(dict.fromkeys(s["policy"] for s in summaries))
    traces = list(dict.fromkeys(s["pods"] for s in summaries))
    by_cell = {(s["pods"], s["policy"]): s for s in summaries}
    lines = [
        "# Trace simulator vs. published FGD results",
        "",
        "Unallocated GPU % at 100% arrived demand, mean over seeds "
        f"{summaries[0]['seeds'][0]}-{summaries[0]['seeds'][-1]}: ours (published; ours - published).",
        f"Measured with `{command}` in {seconds:.0f} s on {platform.machine()} / Python {platform.python_version()}.",
        "",
        "| trace | " + " | ".join(policies) + " |",
        "|---|" + "---|" * len(policies),
    ]
    worst = 0.0
    for trace in traces:
        cells = []
        for policy in policies:
            ours = by_cell[(trace, policy)]["unallocated_pct_at_100"]
            short = len(by_cell[(trace, policy)]["seeds_short_of_100"])
            note = f" [{short} seeds short of 100%]" if short else ""
            published = _published(trace, policy)
            if ours is None or published is None:
                cells.append(("n/a" if ours is None else f"{ours:.2f}") + note)
                continue
            diff = ours - published
            worst = max(worst, abs(diff)) if trace != "default" else worst
            cells.append(f"{ours:.2f} ({published:.2f}; {diff:+.2f})" + note)
        lines.append(f"| {trace} | " + " | ".join(cells) + " |")
    lines += ["", f"Largest |difference| outside `default`: {worst:.2f} points.", ""]
    return "\n".join(lines)


def _trimmed(summary: dict, shapes: int = 10) -> dict:
    """The summary with only its most failed shapes, to keep the results file readable."""
    failed = dict(list(summary["failed_pods_by_shape"].items())[:shapes])
    return {**summary, "failed_pods_by_shape": failed}


def _published(trace: str, policy: str) -> float | None:
    row = PUBLISHED_UNALLOCATED_PCT_AT_100.get(trace)
    if row is None or policy not in PAPER_POLICIES:
        return None
    return row[PAPER_POLICIES.index(policy)]
