"""bench/results/fleet-sim-autoscaler.{md,json}: whole-GPU vs hint-driven autoscaler in the fleet simulator.

    python bench/fleet_sim_autoscaler_report.py --runs DIR [--out bench/results] [--command "..."]

Reads every `<policy>[-defrag]-seed<N>.json` in DIR that `gpuplace sim --scenario fleet --autoscalers H
--save-runs DIR` kept (sim/fleet/autoscaling.py: at every H-th simulated hour, per cluster with GPU pods waiting,
the nodes each autoscaler would add to place every waiting pod) and writes, per policy and seed: the observations
that needed nodes, the nodes each added summed over them, in how many the hints added fewer / as many / more, the
GPUs and GPU memory each added, the waiting pods and what the hints said blocked them; whether the hints added
fewer on every seed (the issue's criterion, as measured, win or lose); and every observation where the two differ.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

COMMAND = ("gpuplace sim --scenario fleet --policy gpuplace,fgd --days 2 --seeds 42-44 --autoscalers 1 --json "
           "--save-runs DIR --jobs 2")
SCOPE = "needs_nodes_both_placed_all"
TITLE = "# Hint-driven vs whole-GPU autoscaler in the fleet simulator (issue 18, part 4)"
"""This report's first line; what the file has above it (bench/fleet_sim_autoscale_report.py's part) is kept."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--command", default=COMMAND)
    args = parser.parse_args()
    runs = [json.loads(p.read_text()) for p in sorted(args.runs.glob("*-seed*.json"))]
    runs = [r for r in runs if "autoscalers" in r]
    if not runs:
        raise SystemExit(f"no runs with --autoscalers in {args.runs}")
    runs.sort(key=lambda r: (r["policy"], r["defrag"], r["seed"]))
    rows = [_row(r) for r in runs]
    verdict = {}
    for label in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == label]
        verdict[label] = all(r["hint_driven_nodes"] < r["whole_gpu_nodes"] for r in mine)
    differing = [{"variant": _variant(r), "seed": r["seed"], **o} for r in runs for o in r["autoscaler_observations"]
                 if o["whole-gpu"]["nodes_added"] != o["hint-driven"]["nodes_added"]]
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"command": args.command, "scope": SCOPE, "by_run": rows, "hints_fewer_on_every_seed": verdict,
               "differing_observations": differing}
    (args.out / "fleet-sim-autoscaler.json").write_text(json.dumps(summary, indent=1) + "\n")
    path = args.out / "fleet-sim-autoscaler.md"
    kept = path.read_text().split(TITLE)[0] if path.exists() else ""  # the acting autoscaler's part stays on top
    path.write_text(kept + _markdown(summary, runs))


def _variant(run: dict[str, Any]) -> str:
    return run["policy"] + (" +defrag" if run["defrag"] else "")


def _row(run: dict[str, Any]) -> dict[str, Any]:
    a = run["autoscalers"]
    counted = [o for o in run["autoscaler_observations"] if _counted(o)]
    return {"variant": _variant(run), "seed": run["seed"], "days": run["days"], **a[SCOPE],
            "observations_all": a["all"]["observations"],
            "whole_gpu": a["whole_gpu"], "hint_driven": a["hint_driven"], "waiting_pods": a["waiting_pods"],
            "waiting_gpu_pods": a["waiting_gpu_pods"], "waiting_training_pods": a["waiting_training_pods"],
            "counted_waiting_pods": sum(o["waiting"] for o in counted),
            "counted_waiting_training_pods": sum(o["waiting_training"] for o in counted),
            "hint_blocked_by": a["hint_blocked_by"], "seconds": a["seconds"], "run_seconds": run["seconds"]}


def _counted(o: dict[str, Any]) -> bool:
    """autoscaling.py's needs_nodes_both_placed_all, on one saved observation."""
    runs = (o["whole-gpu"], o["hint-driven"])
    return any(r["nodes_added"] for r in runs) and not any(r["unplaced"] for r in runs)


def _markdown(summary: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    rows = summary["by_run"]
    days = rows[0]["days"]
    lines = [
        TITLE, "",
        f"    {summary['command']}",
        "    python bench/fleet_sim_autoscaler_report.py --runs DIR", "",
        f"The fleet of bench/results/fleet-sim.md (5 regions, 10 clusters, about 1,000 GPUs, churn), {days:g} "
        "simulated days. Every simulated hour (`--autoscalers 1`), for each cluster with GPU pods waiting, both "
        "autoscalers of sim/autoscaler.py get the same copy of the cluster and the same waiting pods (queue "
        "order) and run to completion: add nodes, place the waiting pods with the run's policy, until all are "
        "placed (sim/fleet/autoscaling.py). Before it adds nodes, the hint-driven one makes room for the pods "
        "the hints find blocked by fragmentation with the defragmenter's plans, within the simulation's "
        "eviction limits (at most 3 pods per plan, 20 evictions per cluster and hour, 2 moves per pod and "
        "hour, counted with the evictions the run already made); the pods it moved are a column. The nodes are "
        "never added to the simulation: each observation asks "
        "what each autoscaler would add at that moment, from the state the policy alone made (a run with the "
        "comparison equals one without it; unit-tested). Sums are over observations, so a backlog that waits "
        "for hours is counted every hour.", "",
        "Counted: the observations where at least one autoscaler added a node and both placed every waiting pod "
        "(the same pending pods); the waiting pods column sums those observations' waiting pods. The others are "
        "the first sample, at 0 h, when the empty fleet's first pods wait for a pass that places them without "
        "new nodes.", "",
        "| policy | seed | observations (all / needing nodes) | whole-gpu nodes | hint-driven nodes | hints fewer / "
        "equal / more | pods the hints moved (all observations) | GPU memory added, whole-gpu / hints (GiB) | "
        "waiting pods (training) | blocked, per hints (all observations) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        blocked = ", ".join(f"{k} {v}" for k, v in r["hint_blocked_by"].items()) or "-"
        lines.append(
            f"| {r['variant']} | {r['seed']} | {r['observations_all']} / {r['observations']} | "
            f"{r['whole_gpu_nodes']} | {r['hint_driven_nodes']} | {r['hints_fewer']} / {r['hints_equal']} / "
            f"{r['hints_more']} | {r['hint_driven'].get('pods_moved', 0)} | "
            f"{r['whole_gpu']['gpu_memory_added_gib']:.0f} / "
            f"{r['hint_driven']['gpu_memory_added_gib']:.0f} | {r['counted_waiting_pods']} "
            f"({r['counted_waiting_training_pods']}) | "
            f"{blocked} |")
    lines += ["", "Hint-driven adds fewer nodes than whole-GPU, summed per seed, on every seed:", ""]
    lines += [f"- {label}: **{'yes' if ok else 'no'}**" for label, ok in summary["hints_fewer_on_every_seed"].items()]
    unplaced = [(r["variant"], r["seed"], r["whole_gpu"]["unplaced_pods"], r["hint_driven"]["unplaced_pods"])
                for r in rows if r["whole_gpu"]["unplaced_pods"] or r["hint_driven"]["unplaced_pods"]]
    if unplaced:
        lines += ["", "Pods left unplaced (those observations are not counted above): "
                  + "; ".join(f"{v} seed {s}: whole-gpu {w}, hints {h}" for v, s, w, h in unplaced)]
    lines += ["", "Nodes by shape, summed over all observations:", "",
              "| policy | seed | whole-gpu | hint-driven |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['seed']} | {_shapes(r['whole_gpu']['by_shape'])} | "
                     f"{_shapes(r['hint_driven']['by_shape'])} |")
    lines += ["", "## Every observation where the two differ", "",
              "| policy | seed | hour | cluster | waiting (training) | whole-gpu | hint-driven (pods moved) |",
              "|---|---|---|---|---|---|---|"]
    for o in summary["differing_observations"]:
        w, h = o["whole-gpu"], o["hint-driven"]
        lines.append(f"| {o['variant']} | {o['seed']} | {o['t_h']:g} | {o['cluster']} | {o['waiting']} "
                     f"({o['waiting_training']}) | {w['nodes_added']}: {_shapes(w['by_shape'])} | "
                     f"{h['nodes_added']}: {_shapes(h['by_shape'])} ({h.get('pods_moved', 0)}) |")
    if not summary["differing_observations"]:
        lines.append("| (none) | | | | | | |")
    lines += ["", *NOTES, ""]
    return "\n".join(lines)


def _shapes(by_shape: dict[str, int]) -> str:
    return ", ".join(f"{n} x {s}" for s, n in by_shape.items()) or "-"


NOTES = [
    "## Reading it",
    "",
    "In this fleet the pods that wait for new nodes are mostly training jobs of 1, 2, 4 or 8 whole GPUs: "
    "perception pods (memory slices) go first in the queue and rarely wait past the first hour. For a "
    "whole-GPU pod a hole is no use, so counting the pods into new nodes, the hints and the whole-GPU count "
    "come to the same number in most observations (both pack powers of two into 8-GPU nodes, which ceil(GPUs "
    "short / 8) already does optimally). What the count cannot see is that a job blocked by fragmentation "
    "needs no node at all: the GPUs it needs are free, spread over nodes that each hold a slice or a small job. "
    "The hints say so (the blocked column), and acting on them with the defragmenter's moves is where most of "
    "the difference comes from. Without the moves (the hints' node additions alone, as measured on a9d671d) "
    "hint-driven added 1396, 829 and 590 nodes under gpuplace (seeds 42, 43, 44; whole-gpu 1457, 832, 590) "
    "and 1289, 1537 and 1788 under fgd (whole-gpu 1341, 1553, 1789): fewer on every seed under fgd, not under "
    "gpuplace, whose backlog is almost all training jobs.",
    "",
    "The hints also win where perception slices wait beside the training jobs (the whole-GPU count takes each "
    "slice for a GPU) and, for the same count, pick a smaller shape (8 x A100 40 GB rather than H100 80 GB or "
    "H200: a fifth to a half less GPU memory added), which a count of nodes does not reward. The gap in "
    "bench/results/autoscaler-hints.md (hints 7-8 nodes against 21-27) comes from a wave of perception slices "
    "waiting on a fragmented fleet.",
    "",
    "Caveats: whole-gpu is a model of cluster-autoscaler's GPU accounting, not the binary; observations are "
    "hourly snapshots, not a closed loop (neither the nodes nor the moves are applied to the run), so a "
    "backlog, and the moves made for it, are counted again every hour; 2 simulated days, not 7.",
]


if __name__ == "__main__":
    main()
