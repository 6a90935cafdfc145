"""Interned node states: nodes that look alike to the policy share one id, so their scores are computed once.

What the policy measures on a node depends only on its GPU type, free CPU, free host memory and the multiset of
its GPUs' free shares. Most nodes of a cluster sit in far fewer such states than there are nodes, and a placement
changes one node's state; so each state is interned once and everything keyed by it (its waste, a request's best
option on it) is cached by id. Ids depend on the state alone, never on the workload, so a refreshed workload only
clears the values, not the ids. Host memory is part of the state because it is part of the measure (unlike FGD's
node_states.py, which this mirrors).

The per-node id array follows the snapshot incrementally (core/state_ids.py, shared with FGD's node_states.py).
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import IntArray
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.state_ids import INITIAL_CAPACITY, StateIds


class StateIndex(StateIds):
    PER_STATE = {"free_share_milli": 0, "cpu_free_milli": 0, "memory_free_mib": 0, "gpu_type_id": 0}

    def __init__(self, max_gpus: int) -> None:
        super().__init__(max_gpus)
        self.free_share_milli = np.zeros((INITIAL_CAPACITY, max_gpus), dtype=np.int64)  # high to low
        self.cpu_free_milli = np.zeros(INITIAL_CAPACITY, dtype=np.int64)  # (capacity,)
        self.memory_free_mib = np.zeros(INITIAL_CAPACITY, dtype=np.int64)  # (capacity,)
        self.gpu_type_id = np.zeros(INITIAL_CAPACITY, dtype=np.int64)  # (capacity,)

    def _keys(self, snapshot: ClusterSnapshot) -> IntArray:
        shares = -np.sort(-snapshot.free_share_milli, axis=1)
        return np.column_stack([snapshot.gpu_type_id, snapshot.cpu_free_milli, snapshot.memory_free_mib,
                                shares]).astype(np.int64)

    def _intern(self, snapshot: ClusterSnapshot, node: int) -> int:
        shares = np.sort(snapshot.free_share_milli[node])[::-1]
        cpu, memory = int(snapshot.cpu_free_milli[node]), int(snapshot.memory_free_mib[node])
        type_id = int(snapshot.gpu_type_id[node])
        state, new = self._state((type_id, cpu, memory, *shares.tolist()))
        if new:
            self.free_share_milli[state] = shares
            self.cpu_free_milli[state] = cpu
            self.memory_free_mib[state] = memory
            self.gpu_type_id[state] = type_id
        return state


__all__ = ["StateIndex"]
