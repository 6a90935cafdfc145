"""Experiment (not adopted): keep whole GPUs for whole-GPU pods by refusing shared pods that would strand them.

    python bench/admission_experiment.py --trace default --seeds 42-51 --gate 0.6 --cpu-scale 1.0 [--steer-only]

On `default`, gpuplace ends at the 100% mark with ~3% of the cluster in 190m holes beside lone 810m pods while
whole-GPU pods fail. The LP floor (lp_floor.py) drops ~240 810m pods and puts whole-GPU pods in their place. This
wraps gpuplace with that trade as a rule: once the allocated share passes GATE, a shared one-GPU pod of at least
MIN_SHARE_MILLI (trace_runs) may not open a fresh GPU on a node that could still feed each of its free GPUs the CPU a
whole-GPU pod asks per GPU (running mean over the whole-GPU pods seen, times --cpu-scale); it goes elsewhere or, if no
node is left, is not placed. --steer-only never refuses: if every node is excluded the pod is placed as gpuplace says.
The KPI is read at the 100% mark, where the run stops.
"""

from __future__ import annotations

import numpy as np
from trace_runs import BehindFilter, opens_a_gpu, seeded_runs, trace_parser, unallocated_at_100

from gpuplace.core.model import MILLI_PER_GPU


class KeepWholeGpus(BehindFilter):
    """gpuplace behind the reservation filter above."""

    name = "gpuplace+keep-whole"

    def __init__(self, base, total_milli: int, gate: float, cpu_scale: float, steer_only: bool) -> None:
        super().__init__(base)
        self.total_milli, self.gate = total_milli, gate
        self.cpu_scale, self.steer_only = cpu_scale, steer_only
        self.whole_cpu_milli, self.whole_gpus = 0.0, 0
        self.excluded_decisions = 0

    def filter(self, snapshot, demand) -> np.ndarray:
        feasible = self.base.filter(snapshot, demand)
        share = demand.share_milli_by_type[snapshot.gpu_type_id]  # (n_nodes,)
        if demand.gpu_count and share.min() >= MILLI_PER_GPU:
            self.whole_cpu_milli += demand.cpu_milli
            self.whole_gpus += demand.gpu_count
        allocated = 1.0 - snapshot.free_share_milli.sum() / self.total_milli
        if demand.gpu_count != 1 or not self.whole_gpus or allocated < self.gate:
            return feasible
        free = snapshot.free_share_milli
        cpu_per_gpu = self.cpu_scale * self.whole_cpu_milli / self.whole_gpus
        feeds_whole = snapshot.cpu_free_milli - demand.cpu_milli >= (free == MILLI_PER_GPU).sum(axis=1) * cpu_per_gpu
        excluded = feasible & opens_a_gpu(snapshot, share) & feeds_whole
        if not excluded.any():
            return feasible
        kept = feasible & ~excluded
        if not kept.any():
            if self.steer_only:
                return feasible
            self.refused += 1
        self.excluded_decisions += 1
        return kept


def main() -> None:
    parser = trace_parser(__doc__.splitlines()[0])
    parser.add_argument("--gate", type=float, default=0.6, help="allocated share from which the rule applies")
    parser.add_argument("--cpu-scale", type=float, default=1.0, help="times the mean CPU per GPU of whole-GPU pods")
    parser.add_argument("--steer-only", action="store_true", help="never refuse a pod that fits somewhere")
    args = parser.parse_args()
    values = []
    for seed, run in seeded_runs(args):
        policy = KeepWholeGpus(run.placer, run.snapshot.total_gpu_milli, args.gate, args.cpu_scale, args.steer_only)
        values.append(unallocated_at_100(run, policy))
        print(f"{args.trace} seed {seed}: {values[-1]:.3f}% unallocated at 100%; {policy.excluded_decisions} "
              f"decisions excluded nodes, {policy.refused} pods refused although they fit", flush=True)
    print(f"{args.trace} gate {args.gate} cpu-scale {args.cpu_scale} steer-only {args.steer_only}: "
          f"mean {np.mean(values):.3f}% (from {min(values):.3f} to {max(values):.3f})")


if __name__ == "__main__":
    main()
