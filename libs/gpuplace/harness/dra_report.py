"""The report of `gpuplace bench dra`: kube-scheduler and gpuplace side by side on one DRA fleet and claim stream.

Pure (runs in, text and JSON out), so the figures the issue's verdict rests on are unit-tested without a stack. A run
is `DraResult.summary()` plus `side`. Issue 13's bar: gpuplace places at least as many pods as kube-scheduler and
strands at most half as much GPU memory at the first failure (a side whose claims all fit has no first failure and
strands nothing then).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gpuplace.harness.pipeline_comparison_report import GPUPLACE, KUBE_SCHEDULER, SIDES

BAR_STRANDED_RATIO = 0.5


@dataclass(frozen=True)
class Setup:
    command: str
    host: str
    nodes: int
    pods: int
    clusters: int
    seed: int
    gpus_per_node: int
    fleet: str  # the GPU models and how many nodes of each
    stream: str  # what the claims are
    arrival: str  # how they are submitted
    over_ask: float
    policy: str
    kube_scheduler: str  # version and binary
    kube_scheduler_limits: str
    gpuplace_limits: str


def _stranded_at_first_failure(run: dict[str, Any]) -> int:
    return int((run.get("first_failure") or {}).get("stranded_mib", 0))


def verdict(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Issue 13's bar, when both sides ran: placed (gp >= ks) and stranded at the first failure (gp <= ks / 2)."""
    if not all(side in runs for side in SIDES):
        return {"met": None, "why": "only " + ", ".join(runs) + " ran"}
    ks, gp = runs[KUBE_SCHEDULER], runs[GPUPLACE]
    placed = gp["pods_bound"] >= ks["pods_bound"]
    stranded = _stranded_at_first_failure(gp) <= BAR_STRANDED_RATIO * _stranded_at_first_failure(ks)
    return {"placed_at_least_as_many": placed, "stranded_at_most_half": stranded, "met": placed and stranded}


def report_json(setup: Setup, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"setup": asdict(setup), "sides": runs, "issue13_bar": verdict(runs)}


def _gib(mib: float) -> str:
    return f"{mib / 1024:,.1f} GiB"


def _stranded(figures: dict[str, Any] | None) -> str:
    if not figures:
        return "no claim failed"
    if not figures["pending"]:  # every claim placed: free memory, not stranded
        return f"no claim pending ({_gib(figures['free_mib'])} free)"
    return (f"{_gib(figures['stranded_mib'])} ({figures['stranded_pct_of_free']:.1f}% of {_gib(figures['free_mib'])} "
            f"free; {figures['pending']} pending)")


def _first_failure(failure: dict[str, Any] | None) -> str:
    if not failure:
        return "none"
    claim = failure["claim"]
    ask = (f"{claim['devices']} whole GPU(s)" if claim["memory_mib"] is None
           else f"{claim['memory_mib']} MiB of 1 GPU")
    return (f"{failure['pod'].split('/', 1)[-1]} ({ask}) at {failure['at_s']:.1f} s, after {failure['placed_before']} "
            f"placed / {failure['submitted_before']} submitted")


ROWS: tuple[tuple[str, Any], ...] = (
    ("pods placed", lambda r: f"**{r['pods_bound']}**/{r['pods_submitted']} ({r['placed_slices']} slices, "
                              f"{r['placed_whole']} whole-GPU)"),
    ("pods pending at the end", lambda r: f"{r['pods_pending']} ({r['pending_slices']} slices, "
                                          f"{r['pending_whole']} whole-GPU)"),
    ("first claim that failed", lambda r: _first_failure(r["first_failure"])),
    ("GPU memory stranded at the first failure", lambda r: _stranded(r["first_failure"])),
    ("... for the claims turned away by then only",
     lambda r: _stranded((r["first_failure"] or {}).get("turned_away"))),
    ("GPU memory stranded at the end", lambda r: _stranded(r["at_end"])),
    ("GPU memory allocated at the end", lambda r: f"{_gib(r['memory_allocated_mib'])} of "
                                                  f"{_gib(r['memory_total_mib'])} ({r['gpu_memory_used_pct']:.1f}%)"),
    ("binds/s", lambda r: f"{r['binds_per_s']:.1f}"),
    ("pending->bound p50 / p95 / p99 ms", lambda r: " / ".join(f"{r['pending_to_bound_ms'][p]:.0f}"
                                                                for p in ("p50", "p95", "p99"))),
    ("devices over-committed", lambda r: str(r["devices_overcommitted"])),
    ("bound without its claim allocated there", lambda r: str(r["bound_without_allocation"])),
    ("run seconds", lambda r: f"{r['seconds']:.0f}"),
)


def markdown(setup: Setup, runs: dict[str, dict[str, Any]]) -> str:
    sides = [s for s in SIDES if s in runs]
    bar = verdict(runs)
    lines = [
        f"# DRA placement: {setup.pods} claims on {setup.nodes} KWOK nodes x {setup.gpus_per_node} GPUs, "
        f"kube-scheduler and gpuplace",
        "",
        f"`{setup.command}` on {setup.host}: " + " then ".join(sides) + ", one after the other, on the same seeded "
        f"fleet and claim stream (seed {setup.seed}).",
        "",
        f"- Fleet (both): {setup.nodes} KWOK nodes over {setup.clusters} apiservers, one ResourceSlice each "
        f"(driver gpu.nvidia.com, {setup.gpus_per_node} devices with their memory as consumable capacity, "
        f"`allowMultipleAllocations`); {setup.fleet}. Created fresh for each side and deleted before the next.",
        f"- Claims (both): {setup.stream}; one ResourceClaim per pod, created right before its pod (24 at a time), "
        f"{setup.arrival}; {setup.over_ask:.2f}x what the fleet holds.",
        *([f"- kube-scheduler: {setup.kube_scheduler}, one of the bench's own per apiserver (its own schedulerName, "
            f"leader election off), its DRA plugin allocating. API client: **{setup.kube_scheduler_limits}**."]
          if KUBE_SCHEDULER in runs else ["- kube-scheduler: not run."]),
        *([f"- gpuplace: policy {setup.policy}, its services each in its own process. "
            f"API client: {setup.gpuplace_limits}."] if GPUPLACE in runs else ["- gpuplace: not run."]),
        "",
        "| | " + " | ".join(sides) + " |",
        "|---|" + "---|" * len(sides),
    ]
    for label, cell in ROWS:
        lines.append(f"| {label} | " + " | ".join(cell(runs[s]) for s in sides) + " |")
    lines.append("")
    if bar["met"] is None:
        lines.append(f"Issue 13's bar (gpuplace places at least as many, strands at most half at the first failure): "
                     f"not assessed, {bar['why']}.")
    else:
        lines.append(f"Issue 13's bar: {'met' if bar['met'] else 'not met'} (placed at least as many: "
                     f"{'yes' if bar['placed_at_least_as_many'] else 'no'}; stranded at most half at the first "
                     f"failure: {'yes' if bar['stranded_at_most_half'] else 'no'}).")
    lines += [
        "",
        "The first failure is the first time the run's pod watch sees PodScheduled=False/Unschedulable on a pod that "
        "is never bound in the run. Stranded memory is the free memory on devices no pending claim could use (a "
        "slice needs that much free on a device, whole GPUs need untouched devices, k of them on one node): at the "
        "first failure, from the placements made by then (pods bound by then, and pods placed that arrived ahead of "
        "the failed one: a scheduler deciding in batches reports a failure before the binds of its batch land) "
        "against the pods submitted and not placed then (in waves, taken once the failed claim's wave settled: the "
        "claims turned away; in a burst, mostly claims still queued, which can use almost any hole), and against "
        "only the claims reported unschedulable by then (the turned-away demand: the simulator's reading); at the "
        "end, against the pods still pending. Each cluster's claims count against its own devices only. "
        "Pending->bound runs from the pod's create call to the watch first showing a node, so it includes queueing; "
        "binds/s is pods bound over first submit to last bind (in waves, paced by the waves: `bench pipeline "
        "--against kube-scheduler` measures speed).",
        "",
    ]
    return "\n".join(lines)


__all__ = ["BAR_STRANDED_RATIO", "Setup", "markdown", "report_json", "verdict"]
