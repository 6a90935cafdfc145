"""Node waste W_n: the free GPU share of node n that the arriving workload could not use, in milli-GPU.

    W_n = sum_m w_m F_n(m) + stranded_n

- F_n(m) is FGD's per-shape fragmentation (core/fragmentation.py, Weng et al., ATC'23, §4): the free share of n
  that shape m could not use (all of it if m does not fit n at all, else the holes smaller than m's share).
- w_m = p_m * (GPUs on the nodes the most placeable GPU shape can use now / GPUs on the nodes m can use now).
  FGD weighs shapes by frequency alone, so a shape few nodes can take (one GPU model; 8 GPUs and 120 cores,
  which 39 of 1,213 nodes have; 8 GPUs at all, once most nodes hold a pod) counts as little there as a shape
  any node takes, and other pods use those nodes up first. Scaled by the reach of its pool, a shape weighs its
  demand per GPU it can still use, and the weight rises as its pool shrinks; the most placeable shape keeps
  w_m = p_m, FGD's weight. The pools are taken from the cluster when the measure is built; the policy
  rebuilds it when they have moved (policy.py).
- stranded_n = max(0, free share - min(free CPU / c_t, free memory / r_t)), with c_t and r_t the CPU (milli) and
  host memory (MiB) the GPU shapes allowed on n's GPU type ask per milli-GPU. FGD sees CPU only as "fits or not",
  but on the trace's nodes CPU runs out before GPU (12 cores per GPU on the commonest node, 14 asked per GPU on
  average): a node whose GPUs outlast its CPU and memory strands them. Counting that share as waste sends
  CPU-heavy pods to CPU-rich nodes and CPU-light ones to GPU-dense nodes.

Everything here is per build: the policy makes a new NodeWaste when the shape estimate or the pools drift.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import BoolArray, FloatArray, IntArray
from gpuplace.core.demand import UNRESOLVABLE
from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.core.policies.gpuplace.shape_estimate import ArrivingWorkload
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import TypicalWorkload

MIN_WEIGHT_SHARE = 1e-3
"""Shapes below this share of the total weight are left out of W: each would move it by less than 0.1%, and
every shape costs the same to evaluate (a third of the trace's shapes, 1% of its weight)."""


class NodeWaste:
    def __init__(self, workload: ArrivingWorkload, snapshot: ClusterSnapshot) -> None:
        self.workload = workload
        self.shape_weight = shape_weights(workload, snapshot)  # w_m of every shape, (n_shapes,)
        kept = self.shape_weight >= MIN_WEIGHT_SHARE * self.shape_weight.sum()
        self.shapes = _subset(workload.shapes, kept)  # the shapes W sums over
        self.weight = self.shape_weight[kept]  # (n_kept,)
        self.keys = self.shapes.keys  # what the `fitting` arrays depend on (with the GPU types)
        # per-GPU need of each kept shape on each type; UNRESOLVABLE where m cannot use the type or asks no GPU,
        # so that no GPU ever "fits" it there and F_n(m) is all the free share (FGD's no-access and CPU-only cases)
        uses = self.shapes.allowed_by_type & (self.shapes.gpu_count[:, None] > 0)
        self.need_by_type = np.where(uses, self.shapes.share_milli_by_type, UNRESOLVABLE).T  # (n_types, n_kept)
        self.cpu_milli_per_gpu_milli, self.memory_mib_per_gpu_milli = _stranding_ratios(
            workload, len(snapshot.gpu_types))  # (n_types,) each

    def waste_milli(self, free_share_milli: IntArray, cpu_free_milli: IntArray, memory_free_mib: IntArray,
                    gpu_type_id: IntArray) -> FloatArray:
        """W for node states given as arrays (n, max_gpus), (n,), (n,), (n,) -> (n,)."""
        fitting_gpus, fitting_share = self.fitting(free_share_milli, gpu_type_id)
        return self.waste_from(fitting_gpus, fitting_share, free_share_milli.sum(axis=1), cpu_free_milli,
                               memory_free_mib, gpu_type_id)

    def fitting(self, free_share_milli: IntArray, gpu_type_id: IntArray) -> tuple[IntArray, IntArray]:
        """Per state and shape, the GPUs with the shape's share free and their free share: (n, n_shapes) each.

        All W needs of a state's GPUs; a placement changes them by a few terms (waste_after), so a state's are
        computed once and an option costs O(shapes), not O(shapes x GPUs).
        """
        need = self.need_by_type[gpu_type_id][:, :, None]  # (n, n_shapes, 1)
        free = free_share_milli[:, None, :]  # (n, 1, max_gpus)
        big_enough = free >= need  # (n, n_shapes, max_gpus)
        return big_enough.sum(axis=2), np.where(big_enough, free, 0).sum(axis=2)

    def waste_after(self, fitting_gpus: IntArray, fitting_share: IntArray, total_share_milli: IntArray,
                    cpu_free_milli: IntArray, memory_free_mib: IntArray, gpu_type_id: IntArray,
                    taken_before: IntArray, taken_after: IntArray) -> FloatArray:
        """W after a placement: the states' `fitting` arrays and total free share as they were, their CPU and
        memory as they will be, and the GPUs whose free share goes from taken_before[:, j] to taken_after[:, j],
        (n, k) each -> (n,)."""
        need = self.need_by_type[gpu_type_id]  # (n, n_shapes)
        gpus, share, total = fitting_gpus.copy(), fitting_share.copy(), total_share_milli.copy()
        for j in range(taken_before.shape[1]):
            before, after = taken_before[:, j : j + 1], taken_after[:, j : j + 1]  # (n, 1)
            was, now = before >= need, after >= need
            gpus += now.astype(np.int64) - was
            share += np.where(now, after, 0) - np.where(was, before, 0)
            total += (after - before)[:, 0]
        return self.waste_from(gpus, share, total, cpu_free_milli, memory_free_mib, gpu_type_id)

    def waste_from(self, fitting_gpus: IntArray, fitting_share: IntArray, total_share_milli: IntArray,
                   cpu_free_milli: IntArray, memory_free_mib: IntArray, gpu_type_id: IntArray) -> FloatArray:
        """W from a state's fitting arrays (n, n_shapes), total free share, CPU, memory and type (n,) -> (n,).

        F_n(m) (Weng et al., ATC'23, §4.2): all free share where m cannot use the node (no GPU asked, model not
        allowed, too little CPU, fewer than k GPUs with its share free), else the free share of the GPUs too
        small for m -- the amounts of core/fragmentation.shape_fragmentation, without the categories only FGD's
        float order needs.
        """
        shapes = self.shapes
        # sum_m w_m F_n(m) = total x sum_m w_m - sum_m w_m [m usable] (share of the GPUs big enough for m);
        # no-access and CPU-only shapes never have a GPU big enough (need_by_type), so they add w_m x total
        usable = (fitting_gpus >= shapes.gpu_count[None, :]) & (cpu_free_milli[:, None] >= shapes.cpu_milli[None, :])
        used_share = (np.where(usable, fitting_share, 0) * self.weight[None, :]).sum(axis=1)  # (n,)
        fragmented = total_share_milli * self.weight.sum() - used_share
        with np.errstate(divide="ignore", invalid="ignore"):
            fed_by_cpu = cpu_free_milli / self.cpu_milli_per_gpu_milli[gpu_type_id]
            fed_by_memory = memory_free_mib / self.memory_mib_per_gpu_milli[gpu_type_id]
        fed = np.nan_to_num(np.minimum(fed_by_cpu, fed_by_memory), nan=np.inf)  # share the node can still feed
        stranded = np.maximum(0.0, total_share_milli - np.maximum(fed, 0.0))
        waste: FloatArray = fragmented + stranded
        return waste


def shape_weights(workload: ArrivingWorkload, snapshot: ClusterSnapshot) -> FloatArray:
    """w_m = p_m x (GPUs the most placeable GPU shape can use now / GPUs on the nodes m fits now), (n_shapes,).

    A node counts for m if m fits it now (model, CPU, memory, k GPUs with its share free); a shape that fits
    nowhere now weighs as if one node of the largest size could take it; one that no node could take even
    empty weighs 0. Shapes that ask no GPU keep p_m.
    """
    shapes = workload.shapes
    need = shapes.share_milli_by_type[:, snapshot.gpu_type_id]  # (n_shapes, n_nodes)
    fitting = (snapshot.free_share_milli[None, :, :] >= need[:, :, None]).sum(axis=2)  # (n_shapes, n_nodes)
    allowed = shapes.allowed_by_type[:, snapshot.gpu_type_id]
    ever = (allowed & (snapshot.cpu_capacity_milli[None, :] >= shapes.cpu_milli[:, None])
            & (snapshot.memory_capacity_mib[None, :] >= workload.memory_mib[:, None])
            & (snapshot.gpu_count[None, :] >= shapes.gpu_count[:, None]))  # could host m when empty
    now = (allowed & (fitting >= shapes.gpu_count[:, None])
           & (snapshot.cpu_free_milli[None, :] >= shapes.cpu_milli[:, None])
           & (snapshot.memory_free_mib[None, :] >= workload.memory_mib[:, None]))  # hosts m now
    gpu_shapes = shapes.gpu_count > 0
    pool_gpus = np.maximum((now * snapshot.gpu_count[None, :]).sum(axis=1), max(snapshot.max_gpus, 1)).astype(float)
    widest = pool_gpus[gpu_shapes].max(initial=1.0)
    reach = np.where(gpu_shapes, widest / pool_gpus, 1.0)
    return np.where(ever.any(axis=1) | ~gpu_shapes, shapes.probability * reach, 0.0)


def pool_drift(old_weight: FloatArray, new_weight: FloatArray) -> float:
    """Total-variation distance between two weightings of the same shapes, each normalised to sum 1."""
    old, new = old_weight / max(old_weight.sum(), 1e-300), new_weight / max(new_weight.sum(), 1e-300)
    return 0.5 * float(np.abs(old - new).sum())


def _subset(shapes: TypicalWorkload, kept: BoolArray) -> TypicalWorkload:
    return TypicalWorkload(
        cpu_milli=shapes.cpu_milli[kept], gpu_count=shapes.gpu_count[kept],
        share_milli_by_type=shapes.share_milli_by_type[kept], allowed_by_type=shapes.allowed_by_type[kept],
        probability=shapes.probability[kept], keys=tuple(k for k, keep in zip(shapes.keys, kept, strict=True) if keep),
    )


def _stranding_ratios(workload: ArrivingWorkload, n_types: int) -> tuple[FloatArray, FloatArray]:
    """CPU milli and host memory MiB asked per milli-GPU by the GPU shapes allowed on each type, (n_types,) each."""
    shapes = workload.shapes
    share = shapes.share_milli_by_type  # (n_shapes, n_types)
    usable = shapes.allowed_by_type & (shapes.gpu_count[:, None] > 0) & (share < UNRESOLVABLE)
    # the prior's shapes (shape_estimate.set_prior) ask no CPU or memory: only pods seen say what a GPU is fed with
    p = np.where(usable, workload.observed_probability[:, None], 0.0)  # (n_shapes, n_types)
    gpu_milli = (p * shapes.gpu_count[:, None] * np.minimum(share, MILLI_PER_GPU)).sum(axis=0)  # (n_types,)
    with np.errstate(divide="ignore", invalid="ignore"):
        cpu = (p * shapes.cpu_milli[:, None]).sum(axis=0) / gpu_milli
        memory = (p * workload.memory_mib[:, None]).sum(axis=0) / gpu_milli
    # no GPU shape for a type: nothing can strand its GPUs by CPU or memory (ratio 0 feeds everything)
    return np.nan_to_num(cpu, nan=0.0, posinf=0.0), np.nan_to_num(memory, nan=0.0, posinf=0.0)


__all__ = ["MIN_WEIGHT_SHARE", "NodeWaste", "pool_drift", "shape_weights"]
