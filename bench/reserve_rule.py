"""The whole-GPU reserve's setting swept: gpuplace with PolicyContext.whole_gpu_reserve at each of --scales.

    python bench/reserve_rule.py --trace default --seeds 42-51 --scales 0,0.25,0.5,1,2,4

The reserve is part of the policy (core/policies/gpuplace/whole_gpu_reserve.py; default policy.WHOLE_GPU_RESERVE);
this only sets its scale, 0 being off, and reads the KPI at the 100% mark as the other scripts here do
(trace_runs.unallocated_at_100; `gpuplace sim` averages the rows at 100%, within a few hundredths). Per scale: the
mean over the seeds, the worst and best seed, and how many pods the reserve held back (kept off every node the
standard filters passed) per run.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from trace_runs import seeded_runs, trace_parser, unallocated_at_100

from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.policies.gpuplace.policy import Gpuplace


def main() -> None:
    parser = trace_parser(__doc__.splitlines()[0])
    parser.add_argument("--scales", default="0,0.5,1,2", help="comma-separated whole_gpu_reserve values")
    args = parser.parse_args()
    scales = [float(s) for s in args.scales.split(",")]
    values: dict[float, list[float]] = {s: [] for s in scales}
    held: dict[float, list[int]] = {s: [] for s in scales}
    for seed, run in seeded_runs(args):
        for scale in scales:
            policy = Gpuplace(PolicyContext(workload=run.workload, whole_gpu_reserve=scale))
            fresh = replace(run, snapshot=run.snapshot.copy())  # unallocated_at_100 charges the snapshot
            values[scale].append(unallocated_at_100(fresh, policy))
            held[scale].append(policy.held_back)
            print(f"{args.trace} seed {seed} scale {scale:g}: {values[scale][-1]:.3f}% unallocated at 100%, "
                  f"{policy.held_back} pods held back", flush=True)
    for scale in scales:
        v = values[scale]
        print(f"{args.trace} whole_gpu_reserve {scale:g}: mean {np.mean(v):.3f} worst {max(v):.3f} best "
              f"{min(v):.3f}, held back {min(held[scale])}-{max(held[scale])} per run")


if __name__ == "__main__":
    main()
