"""The NumPy array types the core passes around, named by their elements.

The core keeps per-node and per-GPU state in NumPy arrays of three dtypes: int64 for milli-GPU, MiB,
counts and ids, float64 for scores and latencies, bool for masks. mypy --strict wants every ndarray's
element type; these names keep signatures short and say which of the three a value is. Shapes stay
in comments next to the values, as before: NumPy's typing does not check them.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import numpy.typing as npt

IntArray: TypeAlias = npt.NDArray[np.int64]
FloatArray: TypeAlias = npt.NDArray[np.float64]
BoolArray: TypeAlias = npt.NDArray[np.bool_]
ScoreArray: TypeAlias = npt.NDArray[np.int64 | np.float64]
"""A policy's scores, one per candidate: integers (FGD, the baselines) or reals (the house policy)."""

__all__ = ["BoolArray", "FloatArray", "IntArray", "ScoreArray"]
