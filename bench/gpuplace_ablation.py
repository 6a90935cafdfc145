"""What each part of the gpuplace policy gives: the policy with one part switched off at a time.

    python bench/gpuplace_ablation.py --trace default --seeds 42-51 [--variants full,no-hole-loss,...]

Variants (each switches off one idea of core/policies/gpuplace, by patching this process only):
- full: the policy as shipped;
- no-hole-loss: no LP pattern-price hole loss, nodes ranked by node-waste growth alone;
- no-stranding: W without the share a node's CPU and memory can no longer feed (FGD's view of CPU);
- no-pool-weights: shapes weighted by frequency alone (FGD's weights), not by the reach of their node pools;
- no-decay: the arriving mix is every pod seen so far, equally weighted (no half-life);
- no-cpu-scarce: hole loss blind to the node's CPU, and the reserve to the CPU of pods that ask no GPU
  (policy.CPU_SCARCE and whole_gpu_reserve.CPU_ONLY_EATS_CPU off; issue 39).
The KPI is unallocated GPU % at the 100% mark (the run stops there), mean over the seeds.
"""

from __future__ import annotations

from contextlib import ExitStack
from unittest import mock

import numpy as np
from trace_runs import seeded_runs, trace_parser, unallocated_at_100

from gpuplace.core.policies.gpuplace import hole_loss, node_waste, policy, whole_gpu_reserve


def _no_loss(self, gpu_type_id, share_milli, free_share_milli, cpu_left_milli=None):
    return np.where(np.asarray(free_share_milli) >= np.asarray(share_milli)[:, None], 0.0, np.inf)


def _no_stranding(workload, n_types):
    return np.zeros(n_types), np.zeros(n_types)  # ratio 0: CPU and memory feed every GPU


def _frequency_weights(workload, snapshot):
    return workload.shapes.probability.copy()


VARIANTS = {
    "full": [],
    "no-hole-loss": [mock.patch.object(hole_loss.HoleLoss, "loss_milli", _no_loss)],
    "no-stranding": [mock.patch.object(node_waste, "_stranding_ratios", _no_stranding)],
    "no-pool-weights": [mock.patch.object(node_waste, "shape_weights", _frequency_weights),
                        mock.patch.object(policy, "shape_weights", _frequency_weights)],
    "no-decay": [mock.patch.object(policy, "HALF_LIFE_PODS", 1e15)],
    "no-cpu-scarce": [mock.patch.object(policy, "CPU_SCARCE", False),
                      mock.patch.object(whole_gpu_reserve, "CPU_ONLY_EATS_CPU", False)],
}


def main() -> None:
    parser = trace_parser(__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    names = [v.strip() for v in args.variants.split(",")]
    if unknown := [v for v in names if v not in VARIANTS]:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    for name in names:
        with ExitStack() as patches:
            for patch in VARIANTS[name]:
                patches.enter_context(patch)
            values = [unallocated_at_100(run) for _, run in seeded_runs(args)]
        print(f"{args.trace} {name}: mean {np.mean(values):.3f}% (from {min(values):.3f} to {max(values):.3f})",
              flush=True)


if __name__ == "__main__":
    main()
