"""Reading the allocation curve the way the paper's analysis scripts do.

After every arrival the simulator records the requested GPU so far (failed pods included) and the
allocated GPU. The curve is read at integer percentages of cluster GPU capacity: the rows whose
arrived demand rounds to p% are averaged (allocation rounded to 0.01% first); if none does, the rows
within p +/- 1% are. Percentages are computed as the reference computes them: milli-GPU / total GPUs / 10.

The KPI is the unallocated GPU % at 100% arrived: 100 - that reading (`read`). Where no row is within 99..101%
-- on a 96-GPU fleet one 4-GPU pod moves the arrived demand by more than 4% -- the average has nothing to read and
was NaN; there the curve is read at exactly the mark, interpolated between the arrivals on either side of it, as
one reads the paper's plotted curves (issue 39). On the 1,213-node traces every run has rows near the mark, so
their figures are the paper's reading unchanged. A run whose arrivals never come near the mark has no KPI: None,
which callers report apart instead of letting a NaN into a mean.
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


def at(arrived_milli: IntArray, values_pct: FloatArray, total_gpus: int, arrived_pct: float) -> float | None:
    """`values_pct` at exactly `arrived_pct`% arrived, interpolated between the rows on either side of it.

    Rows are the curve's points in arrival order (arrived demand never decreases). None when the arrivals never
    reach `arrived_pct`; a row exactly on the mark is read as it is.
    """
    arrived = np.asarray(arrived_milli, dtype=np.float64) / total_gpus / 10  # (n_rows,)
    values = np.asarray(values_pct, dtype=np.float64)
    after = int(np.searchsorted(arrived, arrived_pct, side="left"))  # first row at or past the mark
    if after == len(arrived):
        return None
    if arrived[after] == arrived_pct:
        return float(np.round(values[after], 2))
    if after == 0:  # the curve starts past the mark: nothing to interpolate from
        return None
    before = after - 1
    weight = (arrived_pct - arrived[before]) / (arrived[after] - arrived[before])
    return float(np.round(values[before] + weight * (values[after] - values[before]), 2))


def read(arrived_milli: IntArray, values_pct: FloatArray, total_gpus: int, arrived_pct: int) -> float | None:
    """The paper's reading (`read_at`) where it has rows, else the curve interpolated at the mark (`at`), else None."""
    value = read_at(arrived_milli, values_pct, total_gpus, arrived_pct)
    return at(arrived_milli, values_pct, total_gpus, arrived_pct) if np.isnan(value) else value


def allocated_pct(allocated_milli: IntArray, total_gpus: int) -> FloatArray:
    return np.round(np.asarray(allocated_milli, dtype=np.float64) / total_gpus / 10, 2)


def unallocated_pct_at(arrived_milli: IntArray, allocated_milli: IntArray, total_gpus: int,
                       arrived_pct: int = 100) -> float | None:
    """The paper's KPI: 100 - allocated GPU % when arrived demand is `arrived_pct`% of capacity (`read`)."""
    allocated = read(arrived_milli, allocated_pct(allocated_milli, total_gpus), total_gpus, arrived_pct)
    return None if allocated is None else round(100.0 - allocated, 2)


def curve(arrived_milli: IntArray, values_pct: FloatArray, total_gpus: int,
          points: Iterable[int] = range(0, 131)) -> dict[int, float]:
    """`values_pct` read at each arrived percentage in `points` (points with no rows are left out)."""
    out = {}
    for p in points:
        value = read_at(arrived_milli, values_pct, total_gpus, p)
        if not np.isnan(value):
            out[p] = value
    return out


__all__ = ["allocated_pct", "at", "curve", "read", "read_at", "unallocated_pct_at"]
