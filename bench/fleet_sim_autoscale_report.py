"""The acting autoscaler's section of bench/results/fleet-sim-autoscaler.md, printed as Markdown.

    python bench/fleet_sim_autoscale_report.py --runs DIR [--command "..."] [--headroom F]

Reads every `<policy>-autoscale-seed<N>.json` in DIR that `gpuplace sim --scenario fleet --autoscale --save-runs
DIR` kept (sim/fleet/scaling.py; with `--headroom F`, the `<policy>-autoscale-headroom<F>-seed<N>.json` of
`--autoscale-headroom F`) and prints, per policy and seed, what the autoscaler added and what the fleet used
beside the waits, then per seed whether gpuplace kept perception pods' p99 wait under 60 s with fewer GPUs than FGD
(GPUs added, the most of them alive at once, GPU-hours they ran): the issue's criterion, as measured, win or lose.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

COMMAND = "gpuplace sim --scenario fleet --policy gpuplace,fgd,bestfit --days 2 --seeds 42-44 --autoscale --json " \
          "--save-runs DIR --jobs 1"
LIMIT_S = 60.0
"""The issue's bound on perception pods' p99 wait."""
COSTS = (("autoscale", "gpus_added"), ("autoscale", "peak_added_gpus"), ("autoscale", "peak_fleet_gpus"),
         ("autoscale", "added_gpu_hours"), ("fleet", "gpu_hours"))
"""What a run used, compared per seed: GPUs added, the most of them at once, the fleet's most GPUs, GPU-hours of
the added nodes and of the whole fleet (after the warm-up)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--command", default=COMMAND)
    parser.add_argument("--headroom", type=float, default=0.0)
    args = parser.parse_args()
    pattern = f"*-autoscale-headroom{args.headroom:g}-seed*.json" if args.headroom else "*-autoscale-seed*.json"
    runs = [json.loads(p.read_text()) for p in sorted(args.runs.glob(pattern))]
    if not runs:
        raise SystemExit(f"no --autoscale runs in {args.runs}")
    runs.sort(key=lambda r: (r["policy"], r["seed"]))
    print("\n".join(report(runs, args.command)))


def report(runs: list[dict[str, Any]], command: str) -> list[str]:
    """The section's lines (module docstring)."""
    out = [f"    {command}", "", "| policy | seed | nodes added / removed | GPUs added | most added GPUs at once | "
           "fleet's most GPUs | added GPU-h | fleet GPU-h (after warm-up) | perception p99 wait (s) | "
           "GPU pods p99 wait (s) | SLO attain. | fragmentation-stranded GiB |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        a, f = r["autoscale"], r["fleet"]
        out.append(f"| {r['policy']} | {r['seed']} | {a['nodes_added']} / {a['nodes_removed']} | {a['gpus_added']:,} | "
                   f"{a['peak_added_gpus']:,} | {a['peak_fleet_gpus']:,} | {a['added_gpu_hours']:,.0f} | "
                   f"{f['gpu_hours']:,.0f} | {_s(f['pending']['perception']['p99_s'])} | "
                   f"{_s(f['pending_gpu']['p99_s'])} | "
                   f"{f['slo_attainment']:.3f} | {f['fragmentation_stranded_gib']:,.0f} |")
    out += ["", "gpuplace against FGD, per seed (gpuplace vs FGD; fewer: gpuplace's figure below FGD's):", "",
            "| seed | both perception p99 under 60 s | GPUs added | added GPUs at once | fleet's most GPUs "
            "| added GPU-h | fleet GPU-h |",
            "|---|---|---|---|---|---|---|"]
    by = {(r["policy"], r["seed"]): r for r in runs}
    for seed in sorted({r["seed"] for r in runs}):
        ours, fgd = by.get(("gpuplace", seed)), by.get(("fgd", seed))
        if ours is None or fgd is None:
            continue
        under = all((x["fleet"]["pending"]["perception"]["p99_s"] or 0.0) < LIMIT_S for x in (ours, fgd))
        cells = [f"{ours[s][k]:,.0f} vs {fgd[s][k]:,.0f}: {'fewer' if ours[s][k] < fgd[s][k] else 'not fewer'}"
                 for s, k in COSTS]
        out.append(f"| {seed} | {'yes' if under else 'no'} | {' | '.join(cells)} |")
    return out


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


if __name__ == "__main__":
    main()
