"""What a shared-GPU request is worth, in GPUs, when the mix it comes from is packed as well as it can be.

Shared one-GPU requests are items of a bin-packing problem whose bins are GPUs. For the mix that lands on one
GPU type -- sizes s_i (grid units) arriving at rates r_i -- the Gilmore-Gomory LP
    minimise  sum_p x_p                 GPUs opened, per unit of arrivals
    s.t.      sum_p a_ip x_p >= r_i     every request packed,  x >= 0,
ranges over packing patterns p (multisets of sizes that fit one GPU). Its dual
    maximise  sum_i r_i y_i   s.t.  sum_i a_ip y_i <= 1 for every pattern p,  y >= 0
prices each size: y_i is the part of a GPU one request of size i costs in an optimal packing. The most a hole
of h units can still collect is the unbounded knapsack K(h) = max{sum_i a_i y_i : sum_i a_i s_i <= h}; at the
optimum K(capacity) = 1 (no pattern is worth more than a GPU). Gilmore & Gomory, "A linear programming
approach to the cutting-stock problem", Operations Research 9(6), 1961.

Solved by cutting planes on the dual: start from the one-size patterns, solve, find the pattern the prices
overvalue most (the knapsack), add it while it is worth more than one GPU. The LP is tiny (one column per
size, a few dozen rows), so a dense tableau with Bland's rule keeps it exact and deterministic; each new row is
absorbed by dual simplex pivots from the previous optimum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplace.core.arrays import FloatArray, IntArray

TOLERANCE = 1e-9
MAX_PATTERNS = 2000
"""Rows the cutting-plane loop may add; a mix of a hundred sizes needs a few hundred."""


@dataclass(frozen=True, eq=False)
class PatternPrices:
    """Prices of one GPU type's mix. Sizes and holes are in grid units of `capacity_units` per GPU."""

    size_units: IntArray
    """The sizes priced, ascending, (n_sizes,)."""
    price_gpu: FloatArray
    """y_i, (n_sizes,)."""
    hole_value_gpu: FloatArray
    """K(h) for h = 0 .. capacity_units, (capacity_units + 1,)."""

    @property
    def capacity_units(self) -> int:
        return len(self.hole_value_gpu) - 1


def pattern_prices(size_units: IntArray, rate: FloatArray, capacity_units: int) -> PatternPrices:
    """Prices for sizes (grid units, distinct, in [1, capacity_units]) arriving at positive rates."""
    sizes = np.asarray(size_units, dtype=np.int64)
    rates = np.asarray(rate, dtype=np.float64)
    if sizes.ndim != 1 or sizes.shape != rates.shape or not len(sizes):
        raise ValueError("need one rate per size and at least one size")
    if capacity_units < 1 or (sizes < 1).any() or (sizes > capacity_units).any():
        raise ValueError(f"sizes must lie in [1, {capacity_units}]")
    if len(np.unique(sizes)) != len(sizes) or not (rates > 0).all() or not np.isfinite(rates).all():
        raise ValueError("sizes must be distinct and rates positive")
    order = np.argsort(sizes)
    return _pattern_prices(sizes[order], rates[order], int(capacity_units))


def _pattern_prices(sizes: IntArray, rates: FloatArray, capacity: int) -> PatternPrices:
    """Assumes validated, ascending sizes (see pattern_prices())."""
    lp = _DualTableau(rates, np.diag((capacity // sizes).astype(np.float64)))
    for _ in range(MAX_PATTERNS):
        prices = lp.solution()
        value, last = _knapsack(sizes, prices, capacity)
        if value[capacity] <= 1.0 + TOLERANCE:
            break
        lp.add_row(_pattern(last, sizes, capacity))
    else:
        raise RuntimeError(f"pattern prices did not converge in {MAX_PATTERNS} patterns")
    return PatternPrices(sizes, prices, np.minimum(value, 1.0))


def _knapsack(sizes: IntArray, prices: FloatArray, capacity: int) -> tuple[FloatArray, IntArray]:
    """K(h) for h = 0..capacity and, per h, the last size taken (-1: none), by the unbounded-knapsack recursion."""
    value = np.zeros(capacity + 1)  # K(h), (capacity + 1,)
    last = np.full(capacity + 1, -1, dtype=np.int64)
    for h in range(1, capacity + 1):
        value[h], last[h] = value[h - 1], -1
        fits = np.flatnonzero(sizes <= h)
        if len(fits):
            gains = value[h - sizes[fits]] + prices[fits]
            best = int(np.argmax(gains))
            if gains[best] > value[h] + TOLERANCE:
                value[h], last[h] = gains[best], fits[best]
    return value, last


def _pattern(last: IntArray, sizes: IntArray, capacity: int) -> FloatArray:
    """The multiset the knapsack took for the full capacity, as counts per size."""
    counts = np.zeros(len(sizes))
    h = capacity
    while h > 0:
        if last[h] < 0:
            h -= 1
            continue
        counts[last[h]] += 1
        h -= sizes[last[h]]
    return counts


class _DualTableau:
    """max rates.y s.t. rows.y <= 1, y >= 0, as a dense simplex tableau [rows | slacks | rhs].

    The origin is feasible, so the first solve is plain primal simplex; `add_row` keeps the basis optimal for
    the old rows and restores feasibility of the new one by dual simplex. Bland's rule on both sides: the LP is
    degenerate (many patterns tie at one GPU) and must not cycle.
    """

    def __init__(self, rates: FloatArray, rows: FloatArray) -> None:
        self.n = len(rates)
        m = len(rows)
        self.table = np.hstack([rows, np.eye(m), np.ones((m, 1))])  # (m, n + m + 1)
        self.cost = np.concatenate([-rates, np.zeros(m + 1)])  # reduced costs; optimal when all >= 0
        self.basis = list(range(self.n, self.n + m))
        self._primal()

    def solution(self) -> FloatArray:
        y = np.zeros(self.n)
        for row, var in enumerate(self.basis):
            if var < self.n:
                y[var] = self.table[row, -1]
        return np.maximum(y, 0.0)

    def add_row(self, pattern: FloatArray) -> None:
        m = len(self.basis)
        self.table = np.insert(self.table, self.n + m, 0.0, axis=1)
        self.cost = np.insert(self.cost, self.n + m, 0.0)
        row = np.zeros(self.table.shape[1])
        row[: self.n] = pattern
        row[self.n + m] = 1.0
        row[-1] = 1.0
        for r, var in enumerate(self.basis):
            if var < self.n and row[var] != 0.0:
                row -= row[var] * self.table[r]
        self.table = np.vstack([self.table, row])
        self.basis.append(self.n + m)
        self._dual()

    def _primal(self) -> None:
        for _ in range(100 * self.table.shape[1]):
            entering = np.flatnonzero(self.cost[:-1] < -TOLERANCE)
            if not len(entering):
                return
            col = int(entering[0])
            column = self.table[:, col]
            rows = np.flatnonzero(column > TOLERANCE)
            if not len(rows):
                raise RuntimeError("pattern-price LP is unbounded (a size with no pattern)")
            ratios = self.table[rows, -1] / column[rows]
            ties = rows[ratios <= ratios.min() + TOLERANCE]
            self._pivot(int(min(ties, key=lambda r: self.basis[r])), col)
        raise RuntimeError("primal simplex did not terminate")

    def _dual(self) -> None:
        for _ in range(100 * self.table.shape[1]):
            infeasible = np.flatnonzero(self.table[:, -1] < -TOLERANCE)
            if not len(infeasible):
                return
            row = int(min(infeasible, key=lambda r: self.basis[r]))
            cols = np.flatnonzero(self.table[row, :-1] < -TOLERANCE)
            if not len(cols):
                raise RuntimeError("pattern-price LP became infeasible")
            ratios = self.cost[cols] / -self.table[row, cols]
            self._pivot(row, int(cols[ratios <= ratios.min() + TOLERANCE][0]))
        raise RuntimeError("dual simplex did not terminate")

    def _pivot(self, row: int, col: int) -> None:
        self.table[row] /= self.table[row, col]
        others = self.table[:, col].copy()
        others[row] = 0.0
        self.table -= np.outer(others, self.table[row])
        self.cost -= self.cost[col] * self.table[row]
        self.basis[row] = col


__all__ = ["MAX_PATTERNS", "PatternPrices", "TOLERANCE", "pattern_prices"]
