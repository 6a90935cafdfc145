"""Whole-GPU reserve: near the end of a fill, a shared pod of more than half a GPU may not open a whole GPU that a
whole-GPU pod will need.

Why refusing at all: on the Alibaba `default` trace almost every whole-GPU pod asks at least the CPU and memory of
the 810m shared pods (bench/shape_dominance.py), so a policy that places every pod that fits strands ~3% of the
cluster in 190m holes beside lone 810m pods while whole-GPU pods fail at the end; the LP that may leave pods out
(bench/lp_floor.py) gets 3.10% against 3.83% by leaving ~240 of them out. Holding a pod back pays 0.19 GPU when a
whole-GPU pod takes the GPU instead and costs its own share when none comes, so it is done only when the whole GPUs
left are already short of what the arriving mix will ask.

When: with the mix seen so far -- the part `whole_part` of its GPU demand asked as whole GPUs, the CPU its pods
ask per GPU (CPU-only pods included, CPU_ONLY_EATS_CPU) and the CPU its whole-GPU pods ask per GPU -- the free
capacity the mix can still use is, per node,
min(free GPU share, free CPU / CPU per GPU of the mix) (`usable`), and the whole GPUs a whole-GPU pod could still
take are the fresh GPUs the node's CPU can feed (`feedable`). The rest, usable - feedable, is room in partly used
GPUs (and GPUs of CPU-starved nodes). The reserve holds once that room could take the shared part of what the mix
still brings, `scale` x (1 - whole_part) x usable: from then on a shared pod that opens a fresh GPU takes one that
a whole-GPU pod of the mix will want. The setting is that scale, not a trace constant: 1 is "the room suffices for
the shared pods to come". No cliff within 2x of it: on `default` (seeds 42-51, gpuplace with the prior as a floor,
3.84 without the reserve) scale 0.5 gives 3.58 and 2 gives 3.79, against 3.688 at 1 (bench/reserve_rule.py); below
0.5 it holds from mid-fill (0.35: 4.25). Put as a ratio of whole GPUs
(feedable against whole_part x usable, bench/reserve_experiment.py) the same rule had a cliff at 1.5: that ratio
sits near 1 / whole_part (1.37 on `default`) for most of the fill, so any threshold above it holds from the first
pod; the room is near 0 until the end, so the rule here can only hold late.

What is held back, and where: a one-GPU request asked as a share (not a memory slice; those are not priced by hole
loss either, policy.HOLE_LOSS_MEMORY) of more than half a GPU and less than a whole one -- a pod that cannot share
its GPU with a pod of its own size, so each opens a GPU of its own -- is kept off the nodes where it would open a
fresh GPU (no partly used GPU there has room) and whose CPU, after it, could still feed a whole-GPU pod's GPU.
A node with room in a used GPU, or whose CPU could not feed a whole-GPU pod anyway, stays open to it.

Never without whole-GPU pods: the mix is the pods seen (the estimate's observed part: the prior of hostable shapes
does not count), so on a fleet where no whole-GPU pod has come nothing is held back; nor when no whole GPU is left
that a whole-GPU pod could take (holding back would keep a GPU for nobody). And never for longer than whole-GPU pods
keep coming: the reserve lets go once the pods held back since the last whole-GPU pod arrived (`held_in_a_row`)
reach the whole GPUs left. A held-back pod is not counted in the mix (the estimate counts the pods it scores, as
it does not count pods that fit nowhere); so where only held-back pods keep coming (a live fleet retrying them
every cycle, no whole-GPU pod any more), the estimate would not move and, without that bound, the reserve would
hold them for good while whole GPUs stay idle. Counting them instead made the harness worse (`default` 3.713
against 3.688 at scale 1: the mix's shared part grows with each pod held and the reserve starts later).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplace.core.arrays import BoolArray
from gpuplace.core.demand import Demand
from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.core.policies.gpuplace.shape_estimate import ArrivingWorkload
from gpuplace.core.snapshot import ClusterSnapshot

CPU_ONLY_EATS_CPU = True
"""Whether the CPU per GPU the reserve reckons with counts the pods that ask no GPU (issue 39). They eat the CPU
that would feed the GPUs: counted, a node's usable capacity is what its CPU can feed of the whole mix, and the room
in partly used GPUs is no longer overstated where CPU runs out first. Measured to the 100% mark, seeds 42-45, with
hole loss's CPU rule (hole_loss.py): cpu250 7.54 -> 7.20 (7.44 with the hole rule alone), cpu200x125 14.97 -> 14.81,
default 3.67 -> 3.69, gpushare40 5.06 -> 5.06, multigpu40 2.56 -> 2.53; full figures in bench/results/cpu-scarce.md."""
PLUGIN = "WholeGpuReserve"
REASON = ("whole GPUs kept for whole-GPU pods: partly used GPUs have room for the shared pods still expected, "
          "and this pod would open a whole GPU",)


@dataclass(frozen=True)
class ReserveMix:
    """What the reserve needs of the mix seen: whole-GPU part of the GPU demand, CPU (milli) per GPU of the GPU pods
    and of the whole-GPU pods."""

    whole_part: float
    cpu_per_gpu: float
    cpu_per_whole_gpu: float


def reserve_mix(workload: ArrivingWorkload) -> ReserveMix | None:
    """The mix of the pods seen (observed probabilities, prior left out); None when no whole-GPU pod was seen, or no
    GPU pod that is not one (with whole-GPU pods alone seen, the shared part 0 would make any room enough)."""
    shapes = workload.shapes
    seen = workload.observed_probability
    gpu = (shapes.gpu_count > 0) & (seen > 0)
    share = np.minimum(shapes.share_milli_by_type.min(axis=1), MILLI_PER_GPU) if shapes.share_milli_by_type.size \
        else np.zeros(len(seen), dtype=np.int64)
    whole = gpu & (share >= MILLI_PER_GPU)
    if not whole.any() or whole.sum() == gpu.sum():
        return None
    demand = seen * shapes.gpu_count * np.maximum(share, 0) / MILLI_PER_GPU  # GPUs asked per pod, weighted
    whole_gpus = float((seen * shapes.gpu_count)[whole].sum())
    fed = (seen > 0) if CPU_ONLY_EATS_CPU else gpu  # the pods whose CPU the GPUs' CPU must also feed
    return ReserveMix(
        whole_part=float(demand[whole].sum() / demand[gpu].sum()),
        cpu_per_gpu=max(float((seen * shapes.cpu_milli)[fed].sum() / demand[gpu].sum()), 1.0),
        cpu_per_whole_gpu=max(float((seen * shapes.cpu_milli)[whole].sum() / whole_gpus), 1.0),
    )


def reserve_holds(snapshot: ClusterSnapshot, mix: ReserveMix, scale: float, held_in_a_row: int = 0) -> bool:
    """Whether the room outside feedable whole GPUs could take `scale` x the shared part of what the mix still
    brings (module docstring), with more feedable whole GPUs left than pods held back since the last whole-GPU
    pod (`held_in_a_row`)."""
    free = snapshot.free_share_milli  # (n_nodes, max_gpus)
    cpu = snapshot.cpu_free_milli.astype(np.float64)  # (n_nodes,)
    fresh = (free == MILLI_PER_GPU).sum(axis=1)
    feedable = float(np.minimum(fresh, np.floor(cpu / mix.cpu_per_whole_gpu)).sum())
    usable = float(np.minimum(free.sum(axis=1) / MILLI_PER_GPU, cpu / mix.cpu_per_gpu).sum())
    return feedable > held_in_a_row and usable - feedable >= scale * (1.0 - mix.whole_part) * usable


def held_back(snapshot: ClusterSnapshot, demand: Demand, mix: ReserveMix, scale: float, held_in_a_row: int = 0
              ) -> BoolArray | None:
    """Nodes the reserve keeps `demand` off, (n_nodes,); None when it keeps it off none (not a pod it holds back,
    or the reserve does not hold: reserve_holds)."""
    if not reservable(demand) or scale <= 0:
        return None
    share = demand.share_milli_by_type[snapshot.gpu_type_id]  # (n_nodes,)
    big = (2 * share > MILLI_PER_GPU) & (share < MILLI_PER_GPU)
    if not big.any() or not reserve_holds(snapshot, mix, scale, held_in_a_row):
        return None
    free = snapshot.free_share_milli
    into_used = ((free >= share[:, None]) & (free < MILLI_PER_GPU)).any(axis=1)  # best fit takes a used GPU
    feeds_whole = snapshot.cpu_free_milli - demand.cpu_milli >= mix.cpu_per_whole_gpu
    opens_fresh = (free == MILLI_PER_GPU).any(axis=1) & ~into_used
    held: BoolArray = big & opens_fresh & feeds_whole
    return held if held.any() else None


def takes_whole_gpus(demand: Demand) -> bool:
    """A request of whole GPUs (no memory slice): the pods the reserve keeps GPUs for."""
    _, _, count, share, memory, _ = demand.request_key
    return count > 0 and memory is None and (share is None or share >= MILLI_PER_GPU)


def reservable(demand: Demand) -> bool:
    """A one-GPU request asked as a share (not a memory slice, not whole GPUs): the kind the reserve may hold."""
    _, _, count, share, memory, _ = demand.request_key
    return count == 1 and memory is None and share is not None and share < MILLI_PER_GPU


__all__ = ["CPU_ONLY_EATS_CPU", "PLUGIN", "REASON", "ReserveMix", "held_back", "reservable", "reserve_holds",
           "reserve_mix", "takes_whole_gpus"]
