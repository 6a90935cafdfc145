"""FGD, Fragmentation Gradient Descent (Weng et al., ATC'23, §5): place a task where the expected
fragmentation F_n(M) grows least.

For a shared one-GPU task every usable GPU is tried and the best one kept; a whole-GPU task takes
the first free GPUs in index order; a CPU-only task changes only free CPU. The score of a node is
    floor(100 * sigmoid(-delta / 1000)),  delta = F_n(M) after - F_n(M) before, in milli-GPU,
an integer: nodes whose deltas differ by less than a few milli-GPU tie, and ties go to the first node
in the cluster's order. That quantisation is part of the policy -- the published results depend on it
(DESIGN.md §6) -- and so is the float order of F_n(M) (see fragmentation.py).

Speed: a node's score depends only on its state (GPU type, free CPU, free shares) and the request,
so scores are cached per (request, interned state) and only states never scored for this request
are computed, all at once on NumPy arrays.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import FloatArray, IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.fragmentation import node_fragmentation
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.gpu_usable import usable_gpus
from gpuplace.core.node_states import NodeStates
from gpuplace.core.policies.default_steps import DefaultSteps
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import TypicalWorkload

NAME = "fgd"
_FgdKey = tuple[int, int, bytes]
"""What FGD's score depends on in a request (see _request_key)."""

MAX_SCORE = 100
DELTA_SCALE_MILLI = 1000.0


def fgd_score(before_milli: FloatArray, after_milli: FloatArray) -> IntArray:
    """floor(100 * sigmoid((before - after) / 1000)), the reference's float operations in order."""
    x = (np.asarray(before_milli, dtype=np.float64) - after_milli) / DELTA_SCALE_MILLI
    return np.floor((1.0 / (1.0 + np.exp(-x))) * float(MAX_SCORE)).astype(np.int64)


class Fgd(DefaultSteps):
    name = NAME

    def __init__(self, context: PolicyContext) -> None:
        if context.workload is None:
            raise ValueError("FGD needs the typical workload (PolicyContext.workload)")
        self.workload: TypicalWorkload = context.workload
        self._states: NodeStates | None = None
        self._cache: dict[_FgdKey, IntArray] = {}  # request -> score per state id (-1: not yet)
        self._best_holes: dict[_FgdKey, dict[int, set[int]]] = {}  # request -> state -> best GPUs' free share

    def node_states(self, snapshot: ClusterSnapshot) -> NodeStates:
        if self._states is None or self._states.max_gpus != snapshot.max_gpus:
            self._states = NodeStates(self.workload, snapshot.max_gpus)
            self._cache.clear()
            self._best_holes.clear()
        return self._states

    def score(self, snapshot: ClusterSnapshot, demand: Demand, candidates: IntArray) -> IntArray:
        states = self.node_states(snapshot)
        ids = states.ids(snapshot)[candidates]  # (n_candidates,)
        table = self._table(_request_key(demand), states.n_states)
        scores = table[ids]
        missing = scores < 0
        if missing.any():
            todo = np.unique(ids[missing])
            table[todo] = self._score_states(states, demand, todo)
            scores = table[ids]
        return scores

    def choose_gpus(self, snapshot: ClusterSnapshot, demand: Demand, node: int) -> tuple[int, ...]:
        share = int(demand.share_milli_by_type[snapshot.gpu_type_id[node]])
        usable = np.flatnonzero(usable_gpus(snapshot, demand, slice(node, node + 1))[0])
        if len(usable) < demand.gpu_count:
            raise ValueError(f"node {snapshot.node_names[node]} cannot take {demand.gpu_count} GPU(s)")
        if demand.gpu_count == 0:
            return ()
        if demand.gpu_count > 1:
            return _exclusive_choice(snapshot.free_share_milli[node, usable], usable, demand.gpu_count)
        free = snapshot.free_share_milli[node]
        states = self.node_states(snapshot)
        state = int(states.ids(snapshot)[node])
        best_holes = self._best_holes.get(_request_key(demand), {}).get(state, ())
        for gpu in usable:  # scored already: the first usable GPU whose free share scored best
            if int(free[gpu]) in best_holes:
                return (int(gpu),)
        after = np.repeat(free[None, :], len(usable), axis=0)  # one row per GPU tried, (n_usable, max_gpus)
        after[np.arange(len(usable)), usable] -= share
        cpu_after = np.full(len(usable), snapshot.cpu_free_milli[node] - demand.cpu_milli)
        type_id = np.full(len(usable), snapshot.gpu_type_id[node])
        before = states.fragmentation(np.array([state]))
        scores = fgd_score(before, node_fragmentation(after, cpu_after, type_id, self.workload))
        return (int(usable[int(np.argmax(scores))]),)  # first GPU with the best score

    def _table(self, key: _FgdKey, n_states: int) -> IntArray:
        table = self._cache.get(key)
        if table is None or len(table) < n_states:
            grown = np.full(max(1024, 2 * n_states), -1, dtype=np.int64)
            if table is not None:
                grown[: len(table)] = table
            self._cache[key] = table = grown
        return table

    def _score_states(self, states: NodeStates, demand: Demand, todo: IntArray) -> IntArray:
        """Best score on each state in `todo` (state ids), trying every distinct GPU option."""
        free = states.free_share_milli[todo]  # sorted high to low, (n_todo, max_gpus)
        types = states.gpu_type_id[todo]
        share = demand.share_milli_by_type[types]  # (n_todo,)
        if demand.gpu_count == 1:  # a whole GPU too: its options are the fully free GPUs, all equal
            distinct = np.ones_like(free, dtype=bool)
            distinct[:, 1:] = free[:, 1:] != free[:, :-1]  # equal holes give equal scores
            row, col = np.nonzero((free >= share[:, None]) & distinct)
            after = free[row].copy()
            after[np.arange(len(row)), col] -= share[row]
        else:
            row = np.arange(len(todo))
            after = _after_exclusive(free, share, demand.gpu_count)
        cpu_after = states.cpu_free_milli[todo][row] - demand.cpu_milli
        before = states.fragmentation(todo)[row]
        option_scores = fgd_score(before, node_fragmentation(after, cpu_after, types[row], self.workload))
        best = np.full(len(todo), -1, dtype=np.int64)
        np.maximum.at(best, row, option_scores)
        if demand.gpu_count == 1:
            holes = self._best_holes.setdefault(_request_key(demand), {})
            for option in np.flatnonzero(option_scores == best[row]):
                holes.setdefault(int(todo[row[option]]), set()).add(int(free[row[option], col[option]]))
        return best


def _request_key(demand: Demand) -> _FgdKey:
    """What FGD's score depends on in a request: CPU, GPU count and per-type share (not host memory)."""
    return (demand.cpu_milli, demand.gpu_count, demand.share_milli_by_type.tobytes())


def _after_exclusive(free_sorted: IntArray, share: IntArray, count: int) -> IntArray:
    """States after taking `count` GPUs the reference's way: the GPUs with the least free share
    that still fit (for a whole GPU: fully free ones). Rows are sorted high to low."""
    after = free_sorted.copy()
    if count == 0:
        return after
    fits = free_sorted >= share[:, None]  # (n, max_gpus); fitting GPUs form a prefix of each row
    last = fits.sum(axis=1)  # one past the last fitting column
    for j in range(count):
        col = last - 1 - j
        after[np.arange(len(after)), col] -= share
    return after


def _exclusive_choice(free: IntArray, usable: IntArray, count: int) -> tuple[int, ...]:
    """GPU indices for a multi-GPU or whole-GPU task: the least free usable GPUs, index order on ties."""
    order = np.argsort(free, kind="stable")
    return tuple(sorted(int(i) for i in usable[order[:count]]))


__all__ = ["DELTA_SCALE_MILLI", "Fgd", "MAX_SCORE", "NAME", "fgd_score"]
