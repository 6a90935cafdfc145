"""What the policy keeps per interned node state between decisions: its waste W and its `fitting` arrays.

Both depend on the state and the measure (node_waste.py), never on the pod being placed, so they are computed
once per state and reused by every request. W also depends on the shape weights and so is forgotten at every
rebuild; the `fitting` arrays depend only on which shapes are measured, so a rebuild that keeps the same shapes
(new weights from a drifted estimate or from moved pools) keeps them, and re-weighing a state is O(shapes).
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import FloatArray, IntArray
from gpuplace.core.policies.gpuplace.node_waste import NodeWaste
from gpuplace.core.policies.gpuplace.states import StateIndex
from gpuplace.core.workload import ShapeKey

_INITIAL_CAPACITY = 1024


class StateTerms:
    def __init__(self) -> None:
        self._keys: tuple[ShapeKey, ...] | None = None  # the shapes the fitting arrays were computed for
        self._waste = np.zeros(0)  # W per state id, NaN until computed
        self._known = np.zeros(0, dtype=bool)  # fitting arrays computed, per state id
        self._gpus = np.zeros((0, 0), dtype=np.int64)  # (capacity, n_shapes)
        self._share = np.zeros((0, 0), dtype=np.int64)  # (capacity, n_shapes)

    def forget(self, measure: NodeWaste | None) -> None:
        """Forget W; forget the fitting arrays too unless `measure` measures the same shapes."""
        self._waste[:] = np.nan
        if measure is None or measure.keys != self._keys:
            self._keys = None if measure is None else measure.keys
            self._known = np.zeros(0, dtype=bool)
            self._waste = np.zeros(0)

    def terms(self, states: StateIndex, ids: IntArray, measure: NodeWaste) -> tuple[FloatArray, IntArray, IntArray]:
        """W (n,) and the fitting arrays (n, n_shapes) x 2 of the states `ids`, computing the missing ones."""
        if self._keys != measure.keys:
            self.forget(measure)
        self._grow(states.n_states, measure.shapes.n_shapes)
        unknown = ~self._known[ids]
        if unknown.any():
            todo = np.unique(ids[unknown])
            self._gpus[todo], self._share[todo] = measure.fitting(states.free_share_milli[todo],
                                                                  states.gpu_type_id[todo])
            self._known[todo] = True
        missing = np.isnan(self._waste[ids])
        if missing.any():
            todo = np.unique(ids[missing])
            self._waste[todo] = measure.waste_from(
                self._gpus[todo], self._share[todo], states.free_share_milli[todo].sum(axis=1),
                states.cpu_free_milli[todo], states.memory_free_mib[todo], states.gpu_type_id[todo])
        return self._waste[ids], self._gpus[ids], self._share[ids]

    def _grow(self, n_states: int, n_shapes: int) -> None:
        if len(self._known) >= n_states and self._gpus.shape[1:] == (n_shapes,):
            return
        size = max(_INITIAL_CAPACITY, 2 * n_states)
        old = len(self._known) if self._gpus.shape[1:] == (n_shapes,) else 0
        waste, known = np.full(size, np.nan), np.zeros(size, dtype=bool)
        gpus, share = np.zeros((size, n_shapes), dtype=np.int64), np.zeros((size, n_shapes), dtype=np.int64)
        waste[: len(self._waste)] = self._waste[:size]
        if old:
            known[:old], gpus[:old], share[:old] = self._known[:old], self._gpus[:old], self._share[:old]
        self._waste, self._known, self._gpus, self._share = waste, known, gpus, share


__all__ = ["StateTerms"]
