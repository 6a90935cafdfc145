"""Interned node states: nodes that look alike to the fragmentation measure share one state id.

F_n(M) depends only on a node's GPU type, free CPU and the multiset of its GPUs' free shares. Over a
trace most nodes sit in a handful of such states (1,213 nodes, 15 kinds, mostly idle at first), and
a placement changes one node's state. So each distinct state is interned once, its F_n(M) computed
once, and anything else keyed by state (FGD's score for a request) is cached by state id too.

The per-node id array follows the snapshot incrementally: rows whose `version` moved since the last
look are re-keyed; a different snapshot (another uid) is re-keyed in full.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.fragmentation import node_fragmentation
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import TypicalWorkload


class NodeStates:
    def __init__(self, workload: TypicalWorkload, max_gpus: int) -> None:
        self.workload = workload
        self.max_gpus = max_gpus
        self._ids: dict[tuple, int] = {}
        self.free_share_milli = np.zeros((1024, max_gpus), dtype=np.int64)  # sorted, (capacity, max_gpus)
        self.cpu_free_milli = np.zeros(1024, dtype=np.int64)  # (capacity,)
        self.gpu_type_id = np.zeros(1024, dtype=np.int64)  # (capacity,)
        self._fragmentation = np.full(1024, np.nan)  # F_n(M) per state, NaN until computed
        self._snapshot_uid: int | None = None
        self._versions = np.zeros(0, dtype=np.int64)
        self._node_ids = np.zeros(0, dtype=np.int64)

    @property
    def n_states(self) -> int:
        return len(self._ids)

    def ids(self, snapshot: ClusterSnapshot) -> np.ndarray:
        """State id of every node of `snapshot`, (n_nodes,). Do not modify the returned array."""
        if snapshot.max_gpus != self.max_gpus:
            raise ValueError("snapshot GPU width differs from this cache's")
        if snapshot.uid != self._snapshot_uid or len(self._node_ids) != snapshot.n_nodes:
            self._snapshot_uid = snapshot.uid
            self._node_ids = np.array([self._intern(snapshot, n) for n in range(snapshot.n_nodes)], dtype=np.int64)
            self._versions = snapshot.version.copy()
            return self._node_ids
        for node in np.flatnonzero(snapshot.version != self._versions):
            self._node_ids[node] = self._intern(snapshot, int(node))
            self._versions[node] = snapshot.version[node]
        return self._node_ids

    def intern(self, gpu_type_id: int, cpu_free_milli: int, free_share_milli: np.ndarray) -> int:
        """Id of the state (type, free CPU, free shares in any order), adding it if new."""
        ordered = np.sort(np.asarray(free_share_milli, dtype=np.int64))[::-1]
        padded = np.zeros(self.max_gpus, dtype=np.int64)
        padded[: len(ordered)] = ordered
        key = (int(gpu_type_id), int(cpu_free_milli), *padded.tolist())
        state = self._ids.get(key)
        if state is None:
            state = len(self._ids)
            self._grow(state + 1)
            self._ids[key] = state
            self.free_share_milli[state] = padded
            self.cpu_free_milli[state] = cpu_free_milli
            self.gpu_type_id[state] = gpu_type_id
        return state

    def fragmentation(self, state_ids: np.ndarray) -> np.ndarray:
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

    def _intern(self, snapshot: ClusterSnapshot, node: int) -> int:
        return self.intern(
            int(snapshot.gpu_type_id[node]), int(snapshot.cpu_free_milli[node]), snapshot.free_share_milli[node]
        )

    def _grow(self, size: int) -> None:
        capacity = len(self.cpu_free_milli)
        if size <= capacity:
            return
        new = max(size, 2 * capacity)
        self.free_share_milli = _resized(self.free_share_milli, new, 0)
        self.cpu_free_milli = _resized(self.cpu_free_milli, new, 0)
        self.gpu_type_id = _resized(self.gpu_type_id, new, 0)
        self._fragmentation = _resized(self._fragmentation, new, np.nan)


def _resized(array: np.ndarray, size: int, fill: float) -> np.ndarray:
    out = np.full((size, *array.shape[1:]), fill, dtype=array.dtype)
    out[: len(array)] = array
    return out
