"""Experiment (not adopted): keep the last whole GPUs for whole-GPU pods once they are scarcer than the mix asks.

    python bench/reserve_experiment.py --trace default --seeds 42-51 --reserve -1.0

Issue 19 asked `default` at <= 3.7. gpuplace places every pod that fits, and there the 810m pods strand ~3% of
the cluster in 190m holes whatever the placement (results/gpuplace-vs-fgd.md: shape dominance, LP floors); only
refusing 810m pods that fit lets whole-GPU pods take their GPUs. admission_experiment.py refuses from a fixed
allocated share (0.6, tuned on `default`). This one refuses only near the end, by a rule with no trace constant:
a shared one-GPU pod of at least trace_runs.MIN_SHARE_MILLI may not open a fresh GPU once the whole GPUs whose node can
still feed a whole-GPU pod's CPU (running mean per GPU of the whole-GPU pods seen) number no more than the part
of the free capacity the arriving mix would give to whole-GPU pods (their part of the GPU demand seen x free
GPUs), times -reserve. It assumes arrivals fill the cluster in the mix's proportions (the harness's arrivals run
to 130%; a live fleet's need not). A positive --reserve is instead a fixed share of the cluster's GPUs.
"""

from __future__ import annotations

import numpy as np
from trace_runs import BehindFilter, opens_a_gpu, seeded_runs, trace_parser, unallocated_at_100

from gpuplace.core.model import MILLI_PER_GPU


class KeepLastWholeGpus(BehindFilter):
    """gpuplace behind the reserve filter above."""

    name = "gpuplace+reserve"

    def __init__(self, base, total_gpus: int, reserve: float) -> None:
        super().__init__(base)
        self.total_gpus, self.reserve = total_gpus, reserve
        self.whole_cpu_milli, self.whole_gpus, self.gpu_demand = 0.0, 0, 0.0

    def filter(self, snapshot, demand) -> np.ndarray:
        feasible = self.base.filter(snapshot, demand)
        share = demand.share_milli_by_type[snapshot.gpu_type_id]  # (n_nodes,)
        if demand.gpu_count:
            self.gpu_demand += demand.gpu_count * min(int(share.min()), MILLI_PER_GPU) / MILLI_PER_GPU
            if share.min() >= MILLI_PER_GPU:
                self.whole_cpu_milli += demand.cpu_milli
                self.whole_gpus += demand.gpu_count
        if demand.gpu_count != 1 or not self.whole_gpus:
            return feasible
        free = snapshot.free_share_milli
        cpu_per_gpu = max(self.whole_cpu_milli / self.whole_gpus, 1.0)
        fresh = (free == MILLI_PER_GPU).sum(axis=1)
        feedable = np.minimum(fresh, snapshot.cpu_free_milli // cpu_per_gpu).sum()
        if self.reserve > 0:
            limit = self.reserve * self.total_gpus
        else:
            limit = -self.reserve * self.whole_gpus / self.gpu_demand * free.sum() / MILLI_PER_GPU
        if feedable > limit:
            return feasible
        kept = feasible & ~opens_a_gpu(snapshot, share)
        if feasible.any() and not kept.any():
            self.refused += 1
        return kept


def main() -> None:
    parser = trace_parser(__doc__.splitlines()[0])
    parser.add_argument("--reserve", type=float, default=-1.0,
                        help="< 0: times the whole-GPU part of the free capacity; > 0: share of the cluster's GPUs")
    args = parser.parse_args()
    values = []
    for seed, run in seeded_runs(args):
        policy = KeepLastWholeGpus(run.placer, int(run.snapshot.gpu_count.sum()), args.reserve)
        values.append(unallocated_at_100(run, policy))
        print(f"{args.trace} seed {seed}: {values[-1]:.3f}% unallocated at 100%; {policy.refused} pods refused "
              f"although they fit", flush=True)
    print(f"{args.trace} reserve {args.reserve}: mean {np.mean(values):.3f}% (from {min(values):.3f} to "
          f"{max(values):.3f})")


if __name__ == "__main__":
    main()
