"""The report of `gpuplace bench pipeline --against kube-scheduler`: medians per scheduler, their ratios, every run.

Pure (runs in, text and JSON out), so the arithmetic the issue's verdict rests on is unit-tested without a stack.
A run is `RunResult.summary()` plus `side` (which scheduler) and `repeat` (1-based). Ratios are gpuplace over
kube-scheduler of the medians: binds/s above 1 and p99 below 1 favour gpuplace. Issue 16's bar is a binds/s
ratio of at least 1 and a p99 ratio of at most 2.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from gpuplace.harness.cpu_accounting import SCHEDULER, WALL

KUBE_SCHEDULER = "kube-scheduler"
GPUPLACE = "gpuplace"
SIDES = (KUBE_SCHEDULER, GPUPLACE)  # the order each repeat runs them in
BAR_BINDS_RATIO = 1.0  # gpuplace's median binds/s at least kube-scheduler's
BAR_P99_RATIO = 2.0  # gpuplace's median p99 at most twice kube-scheduler's


@dataclass(frozen=True)
class Setup:
    """What the report says about how the runs were made (written as given)."""

    command: str
    host: str
    nodes: int
    pods: int
    gpus_per_node: int
    gpus_per_node_note: str  # why it is not the default, or ""
    clusters: int
    policy: str
    kube_scheduler: str  # version and binary
    kube_scheduler_limits: str  # the setting, named
    gpuplace_limits: str
    rate: float | None = None  # pods per second (a steady stream); None: a burst


def medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median binds/s, p50/p95/p99 (ms), pods bound and over-commit/bound-twice maxima over `runs`."""
    if not runs:
        raise ValueError("no runs to take medians of")

    def median(key: str, sub: str | None = None) -> float:
        return float(statistics.median(r[key][sub] if sub else r[key] for r in runs))

    return {"binds_per_s": median("binds_per_s"), "p50_ms": median("pending_to_bound_ms", "p50"),
            "p95_ms": median("pending_to_bound_ms", "p95"), "p99_ms": median("pending_to_bound_ms", "p99"),
            "pods_bound": median("pods_bound"), "gpus_overcommitted": max(r["gpus_overcommitted"] for r in runs),
            "bound_twice": max(r["bound_twice"] for r in runs), "runs": len(runs)}


def ratio(ours: float, theirs: float) -> float | None:
    """ours / theirs, rounded to 3 places; None when theirs is 0 (no figure to compare with)."""
    return round(ours / theirs, 3) if theirs else None


def comparison(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per side, the gpuplace/kube-scheduler ratios of binds/s and p99, and whether issue 16's bar is met."""
    per_side = {side: medians([r for r in runs if r["side"] == side]) for side in SIDES}
    ks, gp = per_side[KUBE_SCHEDULER], per_side[GPUPLACE]
    ratios = {"binds_per_s": ratio(gp["binds_per_s"], ks["binds_per_s"]), "p99": ratio(gp["p99_ms"], ks["p99_ms"])}
    binds_ok = ratios["binds_per_s"] is not None and ratios["binds_per_s"] >= BAR_BINDS_RATIO
    p99_ok = ratios["p99"] is not None and ratios["p99"] <= BAR_P99_RATIO
    return {"medians": per_side, "ratios": ratios,
            "issue16_bar": {"binds_per_s_ratio_at_least_1": binds_ok, "p99_ratio_at_most_2": p99_ok,
                            "met": binds_ok and p99_ok}}


def report_json(setup: Setup, runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"setup": asdict(setup), **comparison(runs), "runs": runs}


def _fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def markdown(setup: Setup, runs: list[dict[str, Any]]) -> str:
    result = comparison(runs)
    repeats = max(r["repeat"] for r in runs)
    gpus = f"{setup.gpus_per_node} GPUs" + (f" ({setup.gpus_per_node_note})" if setup.gpus_per_node_note else "")
    lines = [
        f"# Pipeline benchmark against kube-scheduler: {setup.pods} pods on {setup.nodes} KWOK nodes x "
        f"{setup.gpus_per_node} GPUs, {setup.clusters} clusters",
        "",
        f"`{setup.command}` on {setup.host}: {repeats} repeat(s), each running kube-scheduler then gpuplace on the "
        "same seeded fleet and burst; medians over the repeats.",
        "",
        f"- Fleet (both): {setup.nodes} KWOK nodes split over {setup.clusters} apiservers, {gpus} each, the same "
        "CPU, memory and GPU models; created fresh for every run and deleted (namespace gone) before the next.",
        f"- {'Stream' if setup.rate else 'Burst'} (both): {setup.pods} pods, the same CPU, memory and priority "
        f"classes, submitted {f'at {setup.rate:g} pods/s, spread evenly' if setup.rate else '24 at a time'}; "
        "pending->bound is the submit call to the run's pod watch first showing a node.",
        f"- gpuplace: policy {setup.policy}; pods ask for a GPU-memory slice (gpuplace.io/gpu-memory). "
        f"API client: {setup.gpuplace_limits}.",
        f"- kube-scheduler: {setup.kube_scheduler}, one of the bench's own per apiserver (its own schedulerName, "
        "leader election off); pods ask for `limits: nvidia.com/gpu: 1` and select the run's fleet. "
        f"API client: **{setup.kube_scheduler_limits}**.",
        "",
        "| scheduler | binds/s | pending->bound p50 ms | p95 ms | p99 ms | bound | over-committed GPUs | bound twice |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for side in SIDES:
        m = result["medians"][side]
        lines.append(f"| {side} | {m['binds_per_s']:.1f} | {m['p50_ms']:.0f} | {m['p95_ms']:.0f} | "
                     f"{m['p99_ms']:.0f} | {m['pods_bound']:.0f}/{setup.pods} | {m['gpus_overcommitted']} | "
                     f"{m['bound_twice']} |")
    ratios, bar = result["ratios"], result["issue16_bar"]
    lines += [
        "",
        "| gpuplace / kube-scheduler | binds/s | p99 |",
        "|---|---|---|",
        f"| ratio of the medians | {_fmt_ratio(ratios['binds_per_s'])} | {_fmt_ratio(ratios['p99'])} |",
        "",
        f"Issue 16's bar (binds/s ratio >= {BAR_BINDS_RATIO:g}, p99 ratio <= {BAR_P99_RATIO:g}): "
        f"{'met' if bar['met'] else 'not met'} (binds/s: {'yes' if bar['binds_per_s_ratio_at_least_1'] else 'no'}, "
        f"p99: {'yes' if bar['p99_ratio_at_most_2'] else 'no'}).",
        "",
        "Every run, in the order they ran:",
        "",
        "| repeat | scheduler | run | binds/s | p50 | p95 | p99 | bound | unschedulable | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        p = r["pending_to_bound_ms"]
        lines.append(f"| {r['repeat']} | {r['side']} | {r['run_id']} | {r['binds_per_s']} | {p['p50']} | {p['p95']} | "
                     f"{p['p99']} | {r['pods_bound']}/{r['pods_submitted']} | {r['pods_unschedulable']} | "
                     f"{r['seconds']} |")
    lines += ["", (f"Pods are submitted at {setup.rate:g} per second, so binds/s is at most that rate and "
                   "pending->bound is what a pod of a steady stream waits for its scheduler."
                   if setup.rate else
                   "Pods are submitted as fast as the apiservers take them, so pending->bound includes queueing: it "
                   "measures how long a burst waits, and binds/s (pods bound over first submit to last bind) is the "
                   "sustained drain rate."), ""]
    return "\n".join(lines + _cpu_lines(runs))


def cpu_medians(runs: list[dict[str, Any]], key: str = "cpu_s") -> dict[str, dict[str, float]]:
    """Per side, the median over the runs that measured it (`key`: "cpu_s", the whole run, or "burst_cpu_s") of
    each component's CPU seconds and of the measurement's wall time (`wall_s`); sides with no measurement are
    left out."""
    found: dict[str, dict[str, float]] = {}
    for side in SIDES:
        measured = [r for r in runs if r["side"] == side and r.get(key)]
        if measured:
            keys = list(dict.fromkeys(k for r in measured for k in r[key]))
            found[side] = {k: float(statistics.median(r[key].get(k, 0.0) for r in measured)) for k in keys}
    return found


_WHOLE_RUN = ("CPU seconds spent during a run, from the fleet's creation to the burst drained and the scheduler "
              "stopped (start-up included; medians over the repeats; read from /proc by "
              "`gpuplace.harness.cpu_accounting`). `other` is anything else on the machine. \"cores busy\" is all of "
              "it over that window's wall time.")
_BURST = ("The same over the burst alone, from the first submit until every pod was bound: what each side's "
          "scheduling costs the machine while the apiservers take the pods. The last row is the scheduler's own "
          "CPU per pod bound, with what it needs to run (gpuplace's Kafka and PostgreSQL).")
_PIPELINE = (SCHEDULER, "kafka", "postgres")


def _cpu_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Where the CPU went: the medians of cpu_medians, a column per side, over the whole run and over the burst."""
    lines = _cpu_table(_WHOLE_RUN, cpu_medians(runs))
    burst = cpu_medians(runs, "burst_cpu_s")
    if burst:
        bound = {side: statistics.median(r["pods_bound"] for r in runs if r["side"] == side) for side in burst}
        per_pod = {side: 1000.0 * sum(burst[side].get(k, 0.0) for k in _PIPELINE) / bound[side] if bound[side]
                   else None for side in burst}
        lines += _cpu_table(_BURST, burst)[:-1]
        lines += ["| scheduler + kafka + postgres, ms per pod bound | " + " | ".join(
            f"{per_pod[s]:.2f}" if per_pod[s] is not None else "n/a" for s in burst) + " |", ""]
    return lines


def _cpu_table(title: str, per_side: dict[str, dict[str, float]]) -> list[str]:
    if not per_side:
        return []
    sides = list(per_side)
    components = list(dict.fromkeys(k for side in sides for k in per_side[side] if k != WALL))
    lines = [title, "", "| component | " + " | ".join(sides) + " |", "|---|" + "---|" * len(sides)]
    for component in components:
        lines.append(f"| {component} | " + " | ".join(f"{per_side[s].get(component, 0.0):.1f}" for s in sides) + " |")
    totals = {s: sum(v for k, v in per_side[s].items() if k != WALL) for s in sides}
    wall = {s: per_side[s].get(WALL, 0.0) for s in sides}
    lines.append("| **all** | " + " | ".join(f"**{totals[s]:.1f}**" for s in sides) + " |")
    lines.append("| wall time (s) | " + " | ".join(f"{wall[s]:.1f}" for s in sides) + " |")
    lines.append("| cores busy | " + " | ".join(f"{totals[s] / wall[s]:.2f}" if wall[s] else "n/a" for s in sides)
                 + " |")
    return [*lines, ""]


__all__ = ["GPUPLACE", "KUBE_SCHEDULER", "SIDES", "Setup", "comparison", "cpu_medians", "markdown", "medians",
           "ratio", "report_json"]
