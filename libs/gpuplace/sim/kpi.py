"""Reading the allocation curve the way the paper's analysis scripts do.

After every arrival the simulator records the requested GPU so far (failed pods included) and the
allocated GPU. The curve is read at integer percentages of cluster GPU capacity: the rows whose
arrived demand rounds to p% are averaged (allocation rounded to 0.01% first); if none does, the rows
within p +/- 1% are. The KPI is the unallocated GPU % at 100% arrived: 100 - that average.
Percentages are computed as the reference computes them: milli-GPU / total GPUs / 10.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpuplace.core.arrays import FloatArray, IntArray


def read_at(arrived_milli: IntArray, values_pct: FloatArray, total_gpus: int, arrived_pct: int) -> float:
    """Average of `values_pct` over the rows whose arrived demand rounds to `arrived_pct` (NaN if none)."""
    arrived = np.round(np.asarray(arrived_milli, dtype=np.float64) / total_gpus / 10, 0)
    rows = arrived == arrived_pct
    if not rows.any():
        rows = (arrived >= arrived_pct - 1) & (arrived <= arrived_pct + 1)
        if not rows.any():
            return float("nan")
    return float(np.round(np.mean(np.asarray(values_pct)[rows]), 2))


def allocated_pct(allocated_milli: IntArray, total_gpus: int) -> FloatArray:
    return np.round(np.asarray(allocated_milli, dtype=np.float64) / total_gpus / 10, 2)


def unallocated_pct_at(arrived_milli: IntArray, allocated_milli: IntArray, total_gpus: int,
                       arrived_pct: int = 100) -> float:
    """The paper's KPI: 100 - allocated GPU % when arrived demand is `arrived_pct`% of capacity."""
    return 100.0 - read_at(arrived_milli, allocated_pct(allocated_milli, total_gpus), total_gpus, arrived_pct)


def curve(arrived_milli: IntArray, values_pct: FloatArray, total_gpus: int,
          points: Iterable[int] = range(0, 131)) -> dict[int, float]:
    """`values_pct` read at each arrived percentage in `points` (points with no rows are left out)."""
    out = {}
    for p in points:
        value = read_at(arrived_milli, values_pct, total_gpus, p)
        if not np.isnan(value):
            out[p] = value
    return out


__all__ = ["allocated_pct", "curve", "read_at", "unallocated_pct_at"]
