"""Where moving pods could make room: per node, the cheapest set of movable pods to clear.

Every node is screened at once: the pod could ever go there, and its free resources plus what the
movable pods hold there would take it. The `max_nodes` most promising survivors -- fewest GPUs
short, then the least share missing, then node order -- are searched one by one:
- per GPU, the cheapest subset of the pods on it whose leaving gives the GPU the share and memory
  the pod needs (subsets of up to `victims_left` pods, by (cost, displaced share, uids));
- one GPU per option for a one-GPU pod (each clearable GPU of the node is an option), else the `k`
  GPUs cheapest to clear, their pods united (a pod on two of them moves once);
- then CPU and host memory: if still short, the cheapest further pods of the node, one at a time,
  those holding no GPU first (a CPU-only pod is the easiest to place elsewhere).
An option is a candidate only: whether its pods find new places is targets.py's question.
Options sort by (cost, displaced share, node order, GPU indices): the cheapest first, ties to the
first node, and among equal costs the one that displaces least. Pods tie by uid, never by slot, so
the answer does not depend on the order the running pods were given in.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import NamedTuple

import numpy as np

from gpuplace.core.arrays import BoolArray, IntArray
from gpuplace.core.defrag.blockers import could_ever_fit
from gpuplace.core.defrag.eligibility import Quotas
from gpuplace.core.defrag.occupancy import Occupancy
from gpuplace.core.demand import Demand
from gpuplace.core.snapshot import ClusterSnapshot

MAX_NODES = 32
"""Nodes searched in full per plan: the search stays fast on a thousand-node cluster."""
MAX_PODS_PER_GPU = 10
"""Pods of one GPU tried in subsets (the largest first): bounds the subset enumeration."""


@dataclass(frozen=True)
class Option:
    node: int
    gpu_indices: tuple[int, ...]
    movers: tuple[int, ...]
    """Occupancy slots of the pods to move."""
    cost_s: float
    moved_milli: int

    @property
    def key(self) -> tuple[float, int, int, tuple[int, ...]]:
        return (self.cost_s, self.moved_milli, self.node, self.gpu_indices)


_CoverKey = tuple[float, int, tuple[str, ...]]
"""How a set of pods to move ranks: (restart cost, displaced share, uids), cheapest first."""


@dataclass(frozen=True, eq=False)
class _Movable:
    """The pods that may move (occupancy slots) and what they hold per node and GPU."""

    occupancy: Occupancy
    slots: IntArray  # (n_movable,)
    held_share_milli: IntArray  # (n_nodes, max_gpus)
    held_memory_mib: IntArray  # GPU memory, (n_nodes, max_gpus)
    held_cpu_milli: IntArray  # (n_nodes,)
    held_host_memory_mib: IntArray  # (n_nodes,)


def options(snapshot: ClusterSnapshot, demand: Demand, occupancy: Occupancy, movable: BoolArray, quotas: Quotas,
            max_nodes: int = MAX_NODES) -> list[Option]:
    """Candidate clearings, cheapest first; `movable` flags the occupancy slots that may move."""
    if quotas.victims_left <= 0:
        return []
    held = _held(snapshot, occupancy, np.flatnonzero(movable))
    found: list[Option] = []
    for node in _promising_nodes(snapshot, demand, held, max_nodes):
        found.extend(_node_options(snapshot, demand, held, quotas, int(node)))
    return sorted(found, key=lambda o: o.key)


def _held(snapshot: ClusterSnapshot, occupancy: Occupancy, slots: IntArray) -> _Movable:
    n_nodes, max_gpus = snapshot.gpu_exists.shape
    rows = occupancy.node[slots]
    share = np.zeros((n_nodes, max_gpus), dtype=np.int64)
    memory = np.zeros((n_nodes, max_gpus), dtype=np.int64)
    gpus = occupancy.gpus[slots]  # (n_movable, max_gpus)
    np.add.at(share, rows, gpus * occupancy.share_milli[slots, None])
    np.add.at(memory, rows, gpus * occupancy.memory_mib[slots, None])
    cpu = np.bincount(rows, weights=occupancy.cpu_milli[slots], minlength=n_nodes).astype(np.int64)
    host = np.bincount(rows, weights=occupancy.host_memory_mib[slots], minlength=n_nodes).astype(np.int64)
    return _Movable(occupancy, slots, share, memory, cpu, host)


def _promising_nodes(snapshot: ClusterSnapshot, demand: Demand, held: _Movable, max_nodes: int) -> IntArray:
    """Rows that moving pods could open for the pod, most promising first, (<= max_nodes,)."""
    ok = could_ever_fit(snapshot, demand)  # (n_nodes,)
    ok &= snapshot.cpu_free_milli + held.held_cpu_milli >= demand.cpu_milli
    ok &= snapshot.memory_free_mib + held.held_host_memory_mib >= demand.memory_mib
    k = demand.gpu_count if demand.needs_gpu else 0
    short = np.zeros(snapshot.n_nodes)
    missing = np.maximum(demand.cpu_milli - snapshot.cpu_free_milli, 0).astype(np.float64)
    if k:
        share = demand.share_on(snapshot)[:, None]  # (n_nodes, 1)
        memory = demand.gpu_memory_on(snapshot)[:, None]
        free, free_memory = snapshot.free_share_milli, snapshot.free_memory_mib
        reclaimable = (snapshot.gpu_exists & (free + held.held_share_milli >= share)
                       & (free_memory + held.held_memory_mib >= memory))  # (n_nodes, max_gpus)
        ok &= reclaimable.sum(axis=1) >= k
        fits = snapshot.gpu_exists & (free >= share) & (free_memory >= memory)
        short = np.maximum(k - fits.sum(axis=1), 0).astype(np.float64)  # GPUs to clear, (n_nodes,)
        gap = np.where(reclaimable, np.maximum(share - free, 0), np.inf)  # share missing per GPU
        missing = np.sort(gap, axis=1)[:, :k].sum(axis=1)
    rows = np.flatnonzero(ok)
    order = np.lexsort((rows, missing[rows], short[rows]))  # last key first: short, missing, row
    return rows[order][:max_nodes]


class _Pod(NamedTuple):
    """One movable pod of the node being searched, as plain numbers (the search is small and scalar)."""

    slot: int
    uid: str
    share_milli: int
    memory_mib: int
    cpu_milli: int
    host_memory_mib: int
    cost_s: float
    moved_milli: int
    gpus: frozenset[int]
    owner: str | None


def _node_options(snapshot: ClusterSnapshot, demand: Demand, held: _Movable, quotas: Quotas,
                  node: int) -> list[Option]:
    here = _pods_on(held, node)
    k = demand.gpu_count if demand.needs_gpu else 0
    per_gpu = _per_gpu_clearings(snapshot, demand, quotas, node, here) if k else []
    if len(per_gpu) < k:
        return []
    choices: list[tuple[tuple[int, ...], tuple[_Pod, ...]]]
    if k == 1:
        choices = [((g,), pods) for _, g, pods in per_gpu]
    elif k:
        chosen = per_gpu[:k]
        united = {p.slot: p for *_, pods in chosen for p in pods}
        choices = [(tuple(sorted(g for _, g, _ in chosen)), tuple(united.values()))]
    else:
        choices = [((), ())]
    out = []
    for gpus, pods in choices:
        movers = _top_up_host(snapshot, demand, node, here, pods)
        if movers is None or len(movers) > quotas.victims_left or not quotas.owner_allows([p.owner for p in movers]):
            continue
        out.append(Option(node, gpus, tuple(p.slot for p in movers), sum(p.cost_s for p in movers),
                          sum(p.moved_milli for p in movers)))
    return out


def _pods_on(held: _Movable, node: int) -> list[_Pod]:
    occupancy = held.occupancy
    slots = held.slots[occupancy.node[held.slots] == node]
    moved = occupancy.moved_milli(slots)
    return [
        _Pod(int(s), occupancy.pods[s].uid, int(occupancy.share_milli[s]), int(occupancy.memory_mib[s]),
             int(occupancy.cpu_milli[s]), int(occupancy.host_memory_mib[s]), float(occupancy.cost_s[s]), int(m),
             frozenset(np.flatnonzero(occupancy.gpus[s]).tolist()), occupancy.pods[s].owner)
        for s, m in zip(slots, moved, strict=True)
    ]


def _per_gpu_clearings(snapshot: ClusterSnapshot, demand: Demand, quotas: Quotas, node: int,
                       here: list[_Pod]) -> list[tuple[tuple[float, int, tuple[str, ...], int], int, tuple[_Pod, ...]]]:
    """(sort key, GPU, pods to move) for each GPU of `node` that can be cleared, cheapest first."""
    type_id = snapshot.gpu_type_id[node]
    share = int(demand.share_milli_by_type[type_id])
    memory = int(demand.gpu_memory_mib_by_type[type_id])
    out = []
    for g in np.flatnonzero(snapshot.gpu_exists[node]).tolist():
        need_share = share - int(snapshot.free_share_milli[node, g])
        need_memory = memory - int(snapshot.free_memory_mib[node, g])
        found = _cheapest_cover([p for p in here if g in p.gpus], need_share, need_memory, quotas.victims_left)
        if found is not None:
            key, pods = found
            out.append(((*key, g), g, pods))
    return sorted(out, key=lambda item: item[0])


def _cheapest_cover(on_gpu: list[_Pod], need_share: int, need_memory: int,
                    max_size: int) -> tuple[_CoverKey, tuple[_Pod, ...]] | None:
    """The cheapest subset of `on_gpu` freeing `need_share` and `need_memory` on one GPU, by
    (cost, displaced share, uids); () when nothing is needed, None when no subset does it."""
    if need_share <= 0 and need_memory <= 0:
        return (0.0, 0, ()), ()
    pods = sorted(on_gpu, key=lambda p: (-p.share_milli, p.cost_s, p.uid))[:MAX_PODS_PER_GPU]
    if sum(p.share_milli for p in pods) < need_share or sum(p.memory_mib for p in pods) < need_memory:
        return None
    cheapest = min(p.cost_s for p in pods)
    best: tuple[_CoverKey, tuple[_Pod, ...]] | None = None
    for size in range(1, min(max_size, len(pods)) + 1):
        if best is not None and size * cheapest > best[0][0]:
            break
        for combo in combinations(pods, size):
            if sum(p.share_milli for p in combo) < need_share or sum(p.memory_mib for p in combo) < need_memory:
                continue
            key = (sum(p.cost_s for p in combo), sum(p.moved_milli for p in combo), tuple(sorted(p.uid for p in combo)))
            if best is None or key < best[0]:
                best = (key, combo)
    return best


def _top_up_host(snapshot: ClusterSnapshot, demand: Demand, node: int, here: list[_Pod],
                 pods: tuple[_Pod, ...]) -> tuple[_Pod, ...] | None:
    """`pods` plus the cheapest further pods of the node until CPU and host memory suffice (None: never)."""
    chosen = list(pods)
    cpu = int(snapshot.cpu_free_milli[node]) + sum(p.cpu_milli for p in chosen)
    host = int(snapshot.memory_free_mib[node]) + sum(p.host_memory_mib for p in chosen)
    if cpu < demand.cpu_milli or host < demand.memory_mib:
        taken = {p.slot for p in chosen}
        rest = sorted((p for p in here if p.slot not in taken), key=lambda p: (p.cost_s, p.moved_milli, -p.cpu_milli,
                                                                               p.uid))
        for p in rest:
            if cpu >= demand.cpu_milli and host >= demand.memory_mib:
                break
            chosen.append(p)
            cpu += p.cpu_milli
            host += p.host_memory_mib
    if cpu < demand.cpu_milli or host < demand.memory_mib:
        return None
    return tuple(sorted(chosen, key=lambda p: p.uid))


__all__ = ["MAX_NODES", "MAX_PODS_PER_GPU", "Option", "options"]
