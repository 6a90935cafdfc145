"""Interned node states: nodes that look alike to the policy share one id, so their scores are computed once.

What the policy measures on a node depends only on its GPU type, free CPU, free host memory and the multiset of
its GPUs' free shares. Most nodes of a cluster sit in far fewer such states than there are nodes, and a placement
changes one node's state; so each state is interned once and everything keyed by it (its waste, a request's best
option on it) is cached by id. Ids depend on the state alone, never on the workload, so a refreshed workload only
clears the values, not the ids. Host memory is part of the state because it is part of the measure (unlike FGD's
node_states.py, which this mirrors).

The per-node id array follows the snapshot incrementally: rows whose `version` moved since the last look are
re-keyed; another snapshot (another uid) is re-keyed in full.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.snapshot import ClusterSnapshot

_INITIAL_CAPACITY = 1024


class StateIndex:
    def __init__(self, max_gpus: int) -> None:
        self.max_gpus = max_gpus
        self._ids: dict[tuple, int] = {}
        self.free_share_milli = np.zeros((_INITIAL_CAPACITY, max_gpus), dtype=np.int64)  # high to low
        self.cpu_free_milli = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)  # (capacity,)
        self.memory_free_mib = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)  # (capacity,)
        self.gpu_type_id = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)  # (capacity,)
        self._snapshot_uid: int | None = None
        self._versions = np.zeros(0, dtype=np.int64)
        self._node_ids = np.zeros(0, dtype=np.int64)

    @property
    def n_states(self) -> int:
        return len(self._ids)

    def ids(self, snapshot: ClusterSnapshot) -> np.ndarray:
        """State id of every node of `snapshot`, (n_nodes,). Do not modify the returned array."""
        if snapshot.max_gpus != self.max_gpus:
            raise ValueError("snapshot GPU width differs from this index's")
        if snapshot.uid != self._snapshot_uid or len(self._node_ids) != snapshot.n_nodes:
            self._snapshot_uid = snapshot.uid
            self._node_ids = np.array([self._intern(snapshot, n) for n in range(snapshot.n_nodes)], dtype=np.int64)
            self._versions = snapshot.version.copy()
            return self._node_ids
        for node in np.flatnonzero(snapshot.version != self._versions):
            self._node_ids[node] = self._intern(snapshot, int(node))
            self._versions[node] = snapshot.version[node]
        return self._node_ids

    def _intern(self, snapshot: ClusterSnapshot, node: int) -> int:
        shares = np.sort(snapshot.free_share_milli[node])[::-1]
        cpu, memory = int(snapshot.cpu_free_milli[node]), int(snapshot.memory_free_mib[node])
        type_id = int(snapshot.gpu_type_id[node])
        key = (type_id, cpu, memory, *shares.tolist())
        state = self._ids.get(key)
        if state is None:
            state = len(self._ids)
            self._grow(state + 1)
            self._ids[key] = state
            self.free_share_milli[state] = shares
            self.cpu_free_milli[state] = cpu
            self.memory_free_mib[state] = memory
            self.gpu_type_id[state] = type_id
        return state

    def _grow(self, size: int) -> None:
        capacity = len(self.cpu_free_milli)
        if size <= capacity:
            return
        new = max(size, 2 * capacity)
        for name in ("free_share_milli", "cpu_free_milli", "memory_free_mib", "gpu_type_id"):
            old = getattr(self, name)
            grown = np.zeros((new, *old.shape[1:]), dtype=old.dtype)
            grown[: len(old)] = old
            setattr(self, name, grown)


__all__ = ["StateIndex"]
