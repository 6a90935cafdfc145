"""Hole loss: how much of a GPU a shared request gives up for good by going into a hole of a given size.

With the pattern prices of the mix arriving on a GPU type (pattern_prices.py: y_s per request size, K(h) the most
a hole of h can still collect, K(GPU) = 1), putting a request of size s into a hole h leaves a hole h - s, and
    loss(h, s) = K(h) - y_s - K(h - s)  >= 0      (GPUs; reported in milli-GPU)
is what the GPU can no longer earn in an optimal packing. It is 0 exactly when "s into h" is a step of some optimal
packing: a 470 into a fresh GPU or into the 530 left by another 470 (470 + 470 is optimal for the trace's mix),
a 320 into the 350 left by a 650. It is positive for a 320 into that 530, which strands 210 that the mix can
hardly fill. FGD's measure looks one arrival ahead and calls both 530 and 210 holes; the prices look to the end.

Sizes are on a grid of GRID_MILLI (requests rounded up, holes down, so a loss never hides a misfit). A size the
mix has not shown is priced at what its own space is worth, K(s). Types with no shared requests have loss 0.

CPU is scarce too (issue 39): a hole left on a node whose CPU, after the pod, cannot feed any shared request that
fits the hole is no hole to keep -- nothing of the mix can ever go there -- so it is worth 0, not K(h - s), and the
placement loses all of it. Given the node's CPU left (`cpu_left_milli`), the loss counts K(h - s) only where that
CPU reaches the least CPU the mix's requests of at most h - s ask (`cpu_to_fill`, per type and hole size). Without
it, a pod that takes a node's last cores beside a 0.5-GPU hole looked like a step of an optimal packing, and on
CPU-heavy mixes those holes were what stayed free at the end.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import FloatArray, IntArray
from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.core.policies.gpuplace.pattern_prices import pattern_prices
from gpuplace.core.workload import TypicalWorkload

GRID_MILLI = 10
_CAPACITY_UNITS = MILLI_PER_GPU // GRID_MILLI


class HoleLoss:
    def __init__(self, shapes: TypicalWorkload, weight: FloatArray) -> None:
        """Price the shared one-GPU shapes allowed on each GPU type, each at its weight (node_waste.shape_weights)."""
        n_types = shapes.share_milli_by_type.shape[1]
        self.price_gpu = np.zeros((n_types, _CAPACITY_UNITS + 1))  # y by size in grid units, (n_types, units + 1)
        self.hole_value_gpu = np.zeros((n_types, _CAPACITY_UNITS + 1))  # K(h), (n_types, units + 1)
        self.cpu_to_fill = np.full((n_types, _CAPACITY_UNITS + 1), np.inf)  # least CPU of a request <= h, milli
        solved: dict[bytes, tuple[FloatArray, FloatArray]] = {}
        for t in range(n_types):
            sizes, rates = _mix(shapes, weight, t)
            if not len(sizes):
                continue
            self.cpu_to_fill[t] = _cpu_to_fill(shapes, weight, t)
            signature = sizes.tobytes() + rates.tobytes()
            if signature not in solved:
                prices = pattern_prices(sizes, rates, _CAPACITY_UNITS)
                by_size = prices.hole_value_gpu.copy()  # unseen sizes: worth their own space
                by_size[prices.size_units] = prices.price_gpu
                solved[signature] = (by_size, prices.hole_value_gpu)
            self.price_gpu[t], self.hole_value_gpu[t] = solved[signature]

    def loss_milli(self, gpu_type_id: IntArray, share_milli: IntArray, free_share_milli: IntArray,
                   cpu_left_milli: IntArray | None = None) -> FloatArray:
        """Loss of putting each row's request into each of its GPUs, (n, max_gpus); inf where it does not fit.

        `gpu_type_id` and `share_milli` are (n,); `free_share_milli` (n, max_gpus); `cpu_left_milli` (n,), the
        node's CPU after the pod: the hole left is worth nothing where it cannot feed a request that fits it
        (module docstring). Requests of a whole GPU or more lose nothing to a hole (they take free GPUs whole).
        """
        share = np.asarray(share_milli, dtype=np.int64)[:, None]  # (n, 1)
        free = np.asarray(free_share_milli, dtype=np.int64)
        types = np.asarray(gpu_type_id, dtype=np.int64)[:, None]
        fits = free >= share
        size = np.clip(-(-share // GRID_MILLI), 0, _CAPACITY_UNITS)
        hole = np.clip(free // GRID_MILLI, 0, _CAPACITY_UNITS)
        left = np.clip((free - share) // GRID_MILLI, 0, _CAPACITY_UNITS)
        kept = self.hole_value_gpu[types, left]
        if cpu_left_milli is not None:
            cpu_left = np.asarray(cpu_left_milli, dtype=np.float64)[:, None]  # (n, 1)
            kept = np.where(cpu_left >= self.cpu_to_fill[types, left], kept, 0.0)
        loss = self.hole_value_gpu[types, hole] - self.price_gpu[types, size] - kept
        loss = np.where(share >= MILLI_PER_GPU, 0.0, np.maximum(loss, 0.0) * MILLI_PER_GPU)
        return np.where(fits, loss, np.inf)


def _mix(shapes: TypicalWorkload, weight: FloatArray, type_id: int) -> tuple[IntArray, FloatArray]:
    """Sizes (grid units, ascending) and summed weights of the shared one-GPU shapes allowed on a type."""
    share = shapes.share_milli_by_type[:, type_id]
    shared = (shapes.gpu_count == 1) & shapes.allowed_by_type[:, type_id] & (share > 0) & (share < MILLI_PER_GPU)
    shared &= weight > 0
    units = -(-share[shared] // GRID_MILLI)
    sizes, inverse = np.unique(units, return_inverse=True)
    # float64 with weights; NumPy's stubs type bincount as integer whatever the weights
    rates = np.bincount(inverse, weights=weight[shared], minlength=len(sizes)).astype(np.float64, copy=False)
    return sizes.astype(np.int64), rates


def _cpu_to_fill(shapes: TypicalWorkload, weight: FloatArray, type_id: int) -> FloatArray:
    """Least CPU (milli) a shared one-GPU request of the mix on a type asks among those of at most h grid units, for
    h = 0 .. units, (units + 1,); inf below the smallest."""
    share = shapes.share_milli_by_type[:, type_id]
    shared = (shapes.gpu_count == 1) & shapes.allowed_by_type[:, type_id] & (share > 0) & (share < MILLI_PER_GPU)
    shared &= weight > 0
    least = np.full(_CAPACITY_UNITS + 1, np.inf)
    np.minimum.at(least, -(-share[shared] // GRID_MILLI), shapes.cpu_milli[shared].astype(np.float64))
    return np.minimum.accumulate(least)


__all__ = ["GRID_MILLI", "HoleLoss"]
