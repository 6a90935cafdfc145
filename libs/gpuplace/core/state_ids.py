"""Interned node-state ids that follow a snapshot: the bookkeeping every per-state cache shares.

FGD's NodeStates (node_states.py) and the house policy's StateIndex (policies/gpuplace/states.py) give the
nodes that look alike to their measure one id, so that whatever is keyed by state is computed once. They
differ only in what makes a state (the key `_intern` builds) and the per-state arrays they fill; the rest is
here, written once:
- the id of every node of the snapshot, followed incrementally: rows whose `version` moved since the last
  look are re-keyed; another snapshot (another uid, or another node count) is re-keyed in full;
- the key -> id map, ids handed out in order of first sight (they depend on the state alone);
- the per-state arrays named in PER_STATE, grown (doubling) as states are added.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from gpuplace.core.arrays import IntArray
from gpuplace.core.snapshot import ClusterSnapshot

INITIAL_CAPACITY = 1024
"""Rows of the per-state arrays before the first growth (a trace's 1,213 nodes sit in far fewer states)."""


FULL_REKEY_ROWS = 32
"""Changed rows past which `ids` re-keys the whole snapshot in one sort (`_intern_all`) instead of row by row
(a Python call each): a latency view can change many rows at once (policies/latency_aware.py)."""


class StateIds(ABC):
    PER_STATE: ClassVar[dict[str, float]] = {}
    """The subclass's per-state arrays (attribute name -> value of rows not yet filled), first axis by id."""

    def __init__(self, max_gpus: int) -> None:
        self.max_gpus = max_gpus
        self._ids: dict[tuple[object, ...], int] = {}
        self._snapshot_uid: int | None = None
        self._versions = np.zeros(0, dtype=np.int64)
        self._node_ids = np.zeros(0, dtype=np.int64)

    @property
    def n_states(self) -> int:
        return len(self._ids)

    def ids(self, snapshot: ClusterSnapshot) -> IntArray:
        """State id of every node of `snapshot`, (n_nodes,). Do not modify the returned array."""
        if snapshot.max_gpus != self.max_gpus:
            raise ValueError(f"snapshot GPU width {snapshot.max_gpus} differs from this cache's {self.max_gpus}")
        followed = snapshot.uid == self._snapshot_uid and len(self._node_ids) == snapshot.n_nodes
        changed = np.flatnonzero(snapshot.version != self._versions) if followed else None
        if changed is None or len(changed) > FULL_REKEY_ROWS:
            self._snapshot_uid = snapshot.uid
            self._node_ids = self._intern_all(snapshot)
            self._versions = snapshot.version.copy()
            return self._node_ids
        for node in changed:
            self._node_ids[node] = self._intern(snapshot, int(node))
            self._versions[node] = snapshot.version[node]
        return self._node_ids

    def _intern_all(self, snapshot: ClusterSnapshot) -> IntArray:
        """Every node's id, interning each distinct state once: rows with equal `_keys` share a state, so only
        the first node of each is interned (in node order, so ids are handed out exactly as one by one). A
        snapshot seen for the first time, or one whose rows mostly changed, costs one sort, not a Python call
        per node."""
        keys = self._keys(snapshot)
        if keys is None:
            return np.array([self._intern(snapshot, n) for n in range(snapshot.n_nodes)], dtype=np.int64)
        if len(keys) == 0:
            return np.zeros(0, dtype=np.int64)
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        states = np.empty(len(first), dtype=np.int64)
        for group in np.argsort(first, kind="stable"):
            states[group] = self._intern(snapshot, int(first[group]))
        ids: IntArray = states[inverse.reshape(-1)]
        return ids

    def _keys(self, snapshot: ClusterSnapshot) -> IntArray | None:
        """Per node, the integers that make its state (n_nodes, k): equal rows, equal states; None: no such
        matrix, intern node by node."""
        return None

    @abstractmethod
    def _intern(self, snapshot: ClusterSnapshot, node: int) -> int:
        """Id of the state node `node` of `snapshot` is in (via `_state`, filling the rows of a new one)."""

    def _state(self, key: tuple[object, ...]) -> tuple[int, bool]:
        """Id of the state `key`, and whether it is new: the caller then fills its rows of the arrays."""
        state = self._ids.get(key)
        if state is not None:
            return state, False
        state = len(self._ids)
        self._grow(state + 1)
        self._ids[key] = state
        return state, True

    def _grow(self, size: int) -> None:
        capacity = min(len(getattr(self, name)) for name in self.PER_STATE)
        if size <= capacity:
            return
        new = max(size, 2 * capacity)
        for name, fill in self.PER_STATE.items():
            old = getattr(self, name)
            grown = np.full((new, *old.shape[1:]), fill, dtype=old.dtype)
            grown[: len(old)] = old
            setattr(self, name, grown)


__all__ = ["FULL_REKEY_ROWS", "INITIAL_CAPACITY", "StateIds"]
