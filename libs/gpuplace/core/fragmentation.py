"""The fragmentation measure F_n(m) and the expected fragmentation F_n(M), vectorised over nodes.

Weng et al., "Beware of Fragmentation", USENIX ATC'23, §4 (DESIGN.md §6). For a node n and a task
shape m (CPU, per-GPU share d, GPU count k, allowed GPU models), F_n(m) is the free GPU share of n
that m could not use:
- m needs no GPU, or n's GPU model is not allowed for m, or m does not fit n (too little free CPU,
  or fewer than k GPUs with free share >= d): all free share of n;
- m fits: the free share of the GPUs whose free share is < d.
F_n(M) = sum_m p_m F_n(m).

Each shape's contribution falls in one of the reference simulator's categories (lack both, lack
GPU, satisfied, lack CPU, CPU-only satisfied, CPU-only lacking CPU, no access) and the sum is taken
category by category, in shape order, exactly as the reference does: FGD truncates a sigmoid of the
difference of two such sums to an integer, so a different float summation order changes decisions.
Host memory plays no part in the measure (it does not in the paper).
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import BoolArray, FloatArray, IntArray
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import TypicalWorkload

LACK_BOTH, LACK_GPU, SATISFIED, LACK_CPU, CPU_ONLY_SATISFIED, CPU_ONLY_LACK_CPU, NO_ACCESS = range(7)
_COUNTED = np.array([LACK_BOTH, LACK_GPU, LACK_CPU, CPU_ONLY_SATISFIED, CPU_ONLY_LACK_CPU, NO_ACCESS])
"""The categories summed into F_n(M), in the reference's order (SATISFIED is not fragmentation)."""

# Category of a shape on a node by case = 8 * cpu_only + 4 * allowed + 2 * fits_gpu + cpu_ok.
_CATEGORY = np.array(
    [NO_ACCESS, NO_ACCESS, NO_ACCESS, NO_ACCESS,  # GPU shape, model not allowed
     LACK_BOTH, LACK_GPU, LACK_CPU, LACK_GPU,  # GPU shape, allowed: (fits, cpu_ok) = 00, 01, 10, 11
     CPU_ONLY_LACK_CPU, CPU_ONLY_SATISFIED, CPU_ONLY_LACK_CPU, CPU_ONLY_SATISFIED,  # CPU-only shapes
     CPU_ONLY_LACK_CPU, CPU_ONLY_SATISFIED, CPU_ONLY_LACK_CPU, CPU_ONLY_SATISFIED]
)
_SATISFIED_CASE = 4 + 2 + 1  # a GPU shape, allowed, fitting GPUs and CPU: only its holes count


def fragmentation(snapshot: ClusterSnapshot, workload: TypicalWorkload) -> FloatArray:
    """F_n(M) in milli-GPU for every node of the snapshot, (n_nodes,)."""
    if workload.share_milli_by_type.shape[1] != len(snapshot.gpu_types):
        raise ValueError("workload was resolved against a different set of GPU types")
    return _expected_fragmentation(
        snapshot.free_share_milli, snapshot.cpu_free_milli, snapshot.gpu_type_id, workload
    )


def node_fragmentation(
    free_share_milli: IntArray, cpu_free_milli: IntArray, gpu_type_id: IntArray, workload: TypicalWorkload
) -> FloatArray:
    """F_n(M) for node states given as arrays: (n_states, max_gpus), (n_states,), (n_states,)."""
    free = np.asarray(free_share_milli, dtype=np.int64)
    cpu = np.asarray(cpu_free_milli, dtype=np.int64)
    types = np.asarray(gpu_type_id, dtype=np.int64)
    if free.ndim != 2 or cpu.shape != free.shape[:1] or types.shape != free.shape[:1]:
        raise ValueError("expected free (n, g), cpu (n,) and gpu_type_id (n,)")
    if (types < 0).any() or (types >= workload.share_milli_by_type.shape[1]).any():
        raise ValueError("gpu_type_id out of range for this workload")
    return _expected_fragmentation(free, cpu, types, workload)


def shape_fragmentation(
    free_share_milli: IntArray, cpu_free_milli: IntArray, gpu_type_id: IntArray, workload: TypicalWorkload
) -> tuple[IntArray, IntArray]:
    """F_n(m) and its category for every state and shape: two (n_states, n_shapes) arrays.

    Assumes validated arrays (see node_fragmentation()). For a satisfied shape the amount is the
    part counted as fragmentation (holes smaller than d), filed under LACK_GPU as the reference does.
    """
    case, unusable = _cases(free_share_milli, cpu_free_milli, gpu_type_id, workload)
    holes = np.where(unusable, free_share_milli[:, None, :], 0).sum(axis=2)  # F_n(m) when m fits
    total = free_share_milli.sum(axis=1)[:, None]  # all free share, (n_states, 1)
    category = _CATEGORY[case]
    amount = np.where(case == _SATISFIED_CASE, holes, total)
    return amount, category


def stranded_gpu_memory(snapshot: ClusterSnapshot, workload: TypicalWorkload) -> FloatArray:
    """The free GPU memory (MiB) of every node that the typical workload could not use, (n_nodes,): F_n(M)'s
    rule applied to memory instead of share. For a shape that fits the node, the free memory of the GPUs whose
    free share is below its need; for one that does not fit, is not allowed there or needs no GPU, all the
    node's free GPU memory; weighted by p_m. Memory is what an operator sees idle on a GPU, and a hole's share
    and memory differ when pods ask for memory on one GPU model and share on another."""
    if workload.share_milli_by_type.shape[1] != len(snapshot.gpu_types):
        raise ValueError("workload was resolved against a different set of GPU types")
    return stranded_memory_of(snapshot.free_share_milli, snapshot.cpu_free_milli, snapshot.gpu_type_id,
                              snapshot.free_memory_mib, workload)


def stranded_memory_of(free_share_milli: IntArray, cpu_free_milli: IntArray, gpu_type_id: IntArray,
                       free_memory_mib: IntArray, workload: TypicalWorkload) -> FloatArray:
    """stranded_gpu_memory() for node states given as arrays -- (n_states, max_gpus) free share and memory,
    (n_states,) free CPU and GPU type -- so a planner can price hypothetical states (a pod moved) without copying
    a snapshot. Assumes arrays consistent with the workload's GPU types; padded GPUs have zero free."""
    case, unusable = _cases(free_share_milli, cpu_free_milli, gpu_type_id, workload)
    memory = free_memory_mib
    holes = np.where(unusable, memory[:, None, :], 0).sum(axis=2)  # (n_nodes, n_shapes)
    total = memory.sum(axis=1)[:, None]  # (n_nodes, 1)
    amount = np.where(case == _SATISFIED_CASE, holes, total).astype(np.float64)
    stranded: FloatArray = amount @ workload.probability
    return stranded


def _cases(
    free_share_milli: IntArray, cpu_free_milli: IntArray, gpu_type_id: IntArray, workload: TypicalWorkload
) -> tuple[IntArray, BoolArray]:
    """Each shape's case on each state (an index into _CATEGORY), (n_states, n_shapes), and which GPUs have
    less free share than the shape needs on one GPU, (n_states, n_shapes, max_gpus)."""
    d = workload.share_milli_by_type[:, gpu_type_id].T  # per-GPU need, (n_states, n_shapes)
    free = free_share_milli[:, None, :]  # (n_states, 1, max_gpus)
    unusable: BoolArray = free < d[:, :, None]
    fits_gpu = (~unusable).sum(axis=2) >= workload.gpu_count[None, :]  # (n_states, n_shapes)
    cpu_ok = cpu_free_milli[:, None] >= workload.cpu_milli[None, :]  # (n_states, n_shapes)
    allowed = workload.allowed_by_type[:, gpu_type_id].T  # (n_states, n_shapes)
    cpu_only = (workload.gpu_count == 0)[None, :]
    case: IntArray = 8 * cpu_only + 4 * allowed + 2 * fits_gpu + cpu_ok  # see _CATEGORY
    return case, unusable


def _expected_fragmentation(
    free_share_milli: IntArray, cpu_free_milli: IntArray, gpu_type_id: IntArray, workload: TypicalWorkload
) -> FloatArray:
    """Assumes validated arrays. Weng et al., ATC'23, §4: F_n(M) = sum_m p_m F_n(m)."""
    amount, category = shape_fragmentation(free_share_milli, cpu_free_milli, gpu_type_id, workload)
    terms = workload.probability[None, :] * amount.astype(np.float64)  # (n_states, n_shapes)
    in_category = category[None, :, :] == _COUNTED[:, None, None]  # (n_categories, n_states, n_shapes)
    # cumsum is sequential, like the reference's loops (shapes within a category, then categories);
    # adding 0.0 for the shapes of other categories changes nothing.
    per_category = np.cumsum(np.where(in_category, terms[None, :, :], 0.0), axis=2)[:, :, -1]
    total: FloatArray = np.cumsum(per_category, axis=0)[-1]
    return total


__all__ = [
    "CPU_ONLY_LACK_CPU", "CPU_ONLY_SATISFIED", "LACK_BOTH", "LACK_CPU", "LACK_GPU", "NO_ACCESS", "SATISFIED",
    "fragmentation", "node_fragmentation", "shape_fragmentation", "stranded_gpu_memory", "stranded_memory_of",
]
