"""Interned node states: nodes that look alike to the fragmentation measure share one state id.

F_n(M) depends only on a node's GPU type, free CPU and the multiset of its GPUs' free shares. Over a
trace most nodes sit in a handful of such states (1,213 nodes, 15 kinds, mostly idle at first), and
a placement changes one node's state. So each distinct state is interned once, its F_n(M) computed
once, and anything else keyed by state (FGD's score for a request) is cached by state id too.

The per-node id array follows the snapshot incrementally (state_ids.py, shared with the house policy).
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import FloatArray, IntArray
from gpuplace.core.fragmentation import node_fragmentation
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.state_ids import INITIAL_CAPACITY, StateIds
from gpuplace.core.workload import TypicalWorkload


class NodeStates(StateIds):
    PER_STATE = {"free_share_milli": 0, "cpu_free_milli": 0, "gpu_type_id": 0, "_fragmentation": np.nan}

    def __init__(self, workload: TypicalWorkload, max_gpus: int) -> None:
        super().__init__(max_gpus)
        self.workload = workload
        self.free_share_milli = np.zeros((INITIAL_CAPACITY, max_gpus), dtype=np.int64)  # sorted, (capacity, max_gpus)
        self.cpu_free_milli = np.zeros(INITIAL_CAPACITY, dtype=np.int64)  # (capacity,)
        self.gpu_type_id = np.zeros(INITIAL_CAPACITY, dtype=np.int64)  # (capacity,)
        self._fragmentation = np.full(INITIAL_CAPACITY, np.nan)  # F_n(M) per state, NaN until computed

    def intern(self, gpu_type_id: int, cpu_free_milli: int, free_share_milli: IntArray) -> int:
        """Id of the state (type, free CPU, free shares in any order), adding it if new."""
        ordered = np.sort(np.asarray(free_share_milli, dtype=np.int64))[::-1]
        padded = np.zeros(self.max_gpus, dtype=np.int64)
        padded[: len(ordered)] = ordered
        state, new = self._state((int(gpu_type_id), int(cpu_free_milli), *padded.tolist()))
        if new:
            self.free_share_milli[state] = padded
            self.cpu_free_milli[state] = cpu_free_milli
            self.gpu_type_id[state] = gpu_type_id
        return state

    def fragmentation(self, state_ids: IntArray) -> FloatArray:
        """F_n(M) of the given states, computing the ones not seen before."""
        values = self._fragmentation[state_ids]
        missing = np.isnan(values)
        if missing.any():
            todo = np.unique(state_ids[missing])
            self._fragmentation[todo] = node_fragmentation(
                self.free_share_milli[todo], self.cpu_free_milli[todo], self.gpu_type_id[todo], self.workload
            )
            values = self._fragmentation[state_ids]
        return values

    def _keys(self, snapshot: ClusterSnapshot) -> IntArray:
        shares = -np.sort(-snapshot.free_share_milli, axis=1)
        return np.column_stack([snapshot.gpu_type_id, snapshot.cpu_free_milli, shares]).astype(np.int64)

    def _intern(self, snapshot: ClusterSnapshot, node: int) -> int:
        return self.intern(
            int(snapshot.gpu_type_id[node]), int(snapshot.cpu_free_milli[node]), snapshot.free_share_milli[node]
        )


__all__ = ["NodeStates"]
