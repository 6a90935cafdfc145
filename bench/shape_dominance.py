"""Why no policy that places every pod that fits can trade 810m pods for whole-GPU pods.

    python bench/shape_dominance.py --trace default

For each shared one-GPU shape of at least 700m, the share of the trace's one-GPU whole-GPU pods that ask at least
its CPU and memory. Where a whole-GPU pod fits (a free GPU, its CPU, its memory), such a shared pod fits too, so a
policy that refuses no pod that fits places the shared pod whenever the GPU it takes could still have gone to a
whole-GPU pod. The LP's 3.10 floor on `default` (lp_floor.py) drops ~240 of these pods while they fit; a policy
only gets near it by refusing them.
"""

from __future__ import annotations

from collections import Counter

from trace_runs import trace_parser

from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.traces import alibaba

MIN_SHARE_MILLI = 700


def main() -> None:
    args = trace_parser(__doc__.splitlines()[0]).parse_args()
    pods = alibaba.read_pods(args.trace_dir / f"openb_pod_list_{args.trace}.csv")
    whole = [p for p in pods if p.gpu.count == 1 and p.gpu.share_milli >= MILLI_PER_GPU]
    shapes = Counter((p.gpu.share_milli, p.cpu_milli, p.memory_mib, p.gpu.allowed_models) for p in pods
                     if p.gpu.count == 1 and MIN_SHARE_MILLI <= p.gpu.share_milli < MILLI_PER_GPU)
    print(f"{args.trace}: {len(whole)} one-GPU whole-GPU pods")
    for (share, cpu, memory, models), count in shapes.most_common():
        dominating = sum(p.cpu_milli >= cpu and p.memory_mib >= memory and _models_within(p.gpu.allowed_models, models)
                         for p in whole)
        print(f"  {count:5d} pods of {share}m, {cpu / 1000:g} CPU, {memory} MiB, models {list(models) or 'any'}: "
              f"{100 * dominating / len(whole):.1f}% of whole-GPU pods ask at least as much")


def _models_within(whole: tuple[str, ...], shared: tuple[str, ...]) -> bool:
    """Every GPU the whole-GPU pod may take, the shared pod may take too (an empty tuple: any model)."""
    return not shared or (bool(whole) and set(whole) <= set(shared))


if __name__ == "__main__":
    main()
