"""Consolidation: with no pod blocked, one move that lowers the cluster's stranded GPU memory, within the limits.

plan() (planner.py) only acts for a waiting pod; between such pods the holes it leaves, and the ones departures
leave, stay. Here the planner runs on its own (issue 18: "the planner runs continuously within its limits"):
every single-GPU pod that may move now (not resting: cool-down and per-pod cap, eligibility.resting; its owner
under its hourly cap) is tried on every GPU with room for it on a node the policy accepts, and the move that
lowers stranded memory (core/fragmentation.stranded_memory_of, against the cluster's typical workload) the most
per second of cost (cost.py) is returned -- if it lowers it by at least `min_gain_mib`. A move that empties a GPU
or a node, or fills a hole no typical pod fits, is what wins; the margin keeps moves that gain little from being
made at all (a move is never free).

Only two nodes change with a move, so each candidate is priced on those rows alone, as arrays: the source node
without the pod (once per pod), each target GPU's node with it (once per distinct request), and both together
when the pod moves to another GPU of its own node. No scratch snapshot is copied except to check the winner in
the executor's order (apply.py), so screening a hundred pods against a hundred GPUs costs a few milliseconds.

The hourly cap on all evictions is shared with plan(): `keep_evictions` of it are left for blocked pods.
Multi-GPU pods are not moved here (their targets need sets of GPUs; plan() moves them for a blocked pod).
Pure and deterministic like plan(): time is compared, never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpuplace.core.defrag.apply import apply_moves
from gpuplace.core.defrag.eligibility import HOUR_S, quotas, resting
from gpuplace.core.defrag.model import Limits, Move, PastMove, RunningPod
from gpuplace.core.defrag.occupancy import Occupancy
from gpuplace.core.fragmentation import stranded_memory_of
from gpuplace.core.framework.interface import Policy
from gpuplace.core.node_rules import PodRules
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import TypicalWorkload


@dataclass(frozen=True)
class Consolidation:
    """One move made for no beneficiary: it lowers the cluster's stranded GPU memory by `gain_mib`."""

    move: Move
    gain_mib: float
    """Stranded GPU memory before the move minus after it, summed over the cluster's nodes."""
    cost: float
    reasons: tuple[str, ...] = ()


def consolidate(snapshot: ClusterSnapshot, running: Sequence[RunningPod] | Occupancy, policy: Policy,
                workload: TypicalWorkload, limits: Limits, history: Sequence[PastMove], now_s: float, *,
                min_gain_mib: float, keep_evictions: int = 0) -> Consolidation | None:
    """The move lowering stranded memory most per second of cost, by at least `min_gain_mib`; None if none does
    or the limits leave no eviction (see the module docstring)."""
    left = quotas(limits, history, now_s)
    in_hour = sum(1 for m in history if 0 <= now_s - m.at_s < HOUR_S)
    if min(left.victims_left, limits.max_evictions_per_hour - keep_evictions - in_hour) <= 0:
        return None
    occupancy = running if isinstance(running, Occupancy) else Occupancy.of(snapshot, running)
    slots = _movable(occupancy, limits, history, now_s, left.owner_left, left.owner_cap)
    if not len(slots):
        return None
    best = _best(snapshot, occupancy, policy, workload, slots, min_gain_mib)
    if best is None:
        return None
    slot, node, gpu, gain = best
    pod = occupancy.in_slot(slot)
    type_id = snapshot.gpu_type_id[node]
    request = occupancy.request_id[slot]
    move = Move(pod.uid, pod.node_name, pod.gpu_indices, snapshot.node_names[node], (gpu,),
                int(occupancy.request_share_milli[request, type_id]),
                int(occupancy.request_memory_mib[request, type_id]), float(occupancy.cost_s[slot]))
    try:
        apply_moves(snapshot.copy(), (move,), {pod.uid: pod})
    except ValueError:
        return None
    reason = (f"move {pod.uid} {pod.node_name}{list(pod.gpu_indices)} -> {move.to_node}[{gpu}]: "
              f"{gain / 1024.0:.1f} GiB less stranded GPU memory")
    return Consolidation(move, gain, move.cost, (reason,))


def _movable(occupancy: Occupancy, limits: Limits, history: Sequence[PastMove], now_s: float,
             owner_left: dict[str, int], owner_cap: int) -> np.ndarray:
    """Slots of single-GPU pods that may move now: not resting, their owner under its hourly cap."""
    n = len(occupancy.pods)
    ok = (occupancy.node[:n] >= 0) & (occupancy.gpus[:n].sum(axis=1) == 1)  # (n_slots,)
    for uid in resting(limits, history, now_s):
        slot = occupancy.slot_of(uid)
        if slot is not None:
            ok[slot] = False
    for candidate in np.flatnonzero(ok).tolist():
        owner = occupancy.in_slot(candidate).owner
        if owner is not None and owner_left.get(owner, owner_cap) <= 0:
            ok[candidate] = False
    return np.flatnonzero(ok)


_Targets = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""One group of candidates (same request and rules): their indices into `slots`, and every target GPU that holds
one of them: its node, its GPU, and the share and memory the pod needs there."""


def _best(snapshot: ClusterSnapshot, occupancy: Occupancy, policy: Policy, workload: TypicalWorkload,
          slots: np.ndarray, min_gain_mib: float) -> tuple[int, int, int, float] | None:
    """(slot, target node, target GPU, gain) of the best move by gain per cost, or None under the margin."""
    before = stranded_memory_of(snapshot.free_share_milli, snapshot.cpu_free_milli, snapshot.gpu_type_id,
                                snapshot.free_memory_mib, workload)  # (n_nodes,)
    src_node, source_delta = _source_delta(snapshot, occupancy, workload, slots, before)
    found = _targets(snapshot, occupancy, policy, slots)
    if not found:
        return None
    target_delta = _target_delta(snapshot, occupancy, workload, slots, found, before)
    deltas = _pair_deltas(snapshot, occupancy, workload, slots, found, src_node, source_delta, target_delta, before)
    best: tuple[float, int, int, int, float] | None = None  # (score, slot, node, gpu, gain)
    for (idx, g_node, g_gpu, _, _), delta in zip(found, deltas, strict=True):
        gain = -delta
        score = np.where(gain >= min_gain_mib, gain / occupancy.cost_s[slots[idx]][:, None], -np.inf)
        a, b = (int(x) for x in np.unravel_index(int(np.argmax(score)), score.shape))
        if np.isfinite(score[a, b]) and (best is None or score[a, b] > best[0]):
            best = (float(score[a, b]), int(slots[idx[a]]), int(g_node[b]), int(g_gpu[b]), float(gain[a, b]))
    return None if best is None else best[1:]


def _source_delta(snapshot: ClusterSnapshot, occupancy: Occupancy, workload: TypicalWorkload, slots: np.ndarray,
                  before: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's node, and the change in its node's stranded memory with the pod gone, (n_slots,) each."""
    share, memory, cpu, types = (snapshot.free_share_milli, snapshot.free_memory_mib, snapshot.cpu_free_milli,
                                 snapshot.gpu_type_id)
    src_node = occupancy.node[slots]
    src_gpu = occupancy.gpus[slots].argmax(axis=1)
    # the source node without the pod, one state per candidate
    s_share, s_memory, s_cpu = share[src_node].copy(), memory[src_node].copy(), cpu[src_node].copy()
    rows = np.arange(len(slots))
    s_share[rows, src_gpu] += occupancy.share_milli[slots]
    s_memory[rows, src_gpu] += occupancy.memory_mib[slots]
    s_cpu += occupancy.cpu_milli[slots]
    return src_node, stranded_memory_of(s_share, s_cpu, types[src_node], s_memory, workload) - before[src_node]


def _targets(snapshot: ClusterSnapshot, occupancy: Occupancy, policy: Policy, slots: np.ndarray) -> list[_Targets]:
    """The candidates grouped by request and rules, each group with every GPU that holds one of them."""
    share, memory, cpu, types = (snapshot.free_share_milli, snapshot.free_memory_mib, snapshot.cpu_free_milli,
                                 snapshot.gpu_type_id)
    groups: dict[tuple[int, PodRules], list[int]] = {}
    for i, slot in enumerate(slots.tolist()):
        groups.setdefault((int(occupancy.request_id[slot]), occupancy.in_slot(slot).pod.rules), []).append(i)
    found: list[_Targets] = []
    for (request, rules), members in sorted(groups.items(), key=lambda item: item[1][0]):
        demand = replace(occupancy.requests[request], rules=rules)
        need_share = occupancy.request_share_milli[request, types]  # (n_nodes,)
        need_memory = occupancy.request_memory_mib[request, types]
        node_ok = (demand.allowed_by_type[types] & (cpu >= demand.cpu_milli)
                   & (snapshot.memory_free_mib >= demand.memory_mib) & policy.filter(snapshot, demand))
        room = (node_ok[:, None] & snapshot.gpu_exists & (share >= need_share[:, None])
                & (memory >= need_memory[:, None]))  # (n_nodes, max_gpus)
        t_node, t_gpu = np.nonzero(room)
        if len(t_node):
            found.append((np.asarray(members), t_node, t_gpu, need_share[t_node], need_memory[t_node]))
    return found


def _target_delta(snapshot: ClusterSnapshot, occupancy: Occupancy, workload: TypicalWorkload, slots: np.ndarray,
                  found: list[_Targets], before: np.ndarray) -> np.ndarray:
    """The change in each target GPU's node's stranded memory with its group's pod added, every group in one batch
    (the groups' targets one after the other)."""
    share, memory, cpu, types = (snapshot.free_share_milli, snapshot.free_memory_mib, snapshot.cpu_free_milli,
                                 snapshot.gpu_type_id)
    t_node = np.concatenate([f[1] for f in found])
    t_gpu = np.concatenate([f[2] for f in found])
    t_share, t_memory = share[t_node].copy(), memory[t_node].copy()
    k = np.arange(len(t_node))
    t_share[k, t_gpu] -= np.concatenate([f[3] for f in found])
    t_memory[k, t_gpu] -= np.concatenate([f[4] for f in found])
    t_cpu = cpu[t_node] - np.concatenate([np.full(len(f[1]), occupancy.cpu_milli[slots[f[0][0]]]) for f in found])
    delta: np.ndarray = stranded_memory_of(t_share, t_cpu, types[t_node], t_memory, workload) - before[t_node]
    return delta


def _pair_deltas(snapshot: ClusterSnapshot, occupancy: Occupancy, workload: TypicalWorkload, slots: np.ndarray,
                 found: list[_Targets], src_node: np.ndarray, source_delta: np.ndarray, target_delta: np.ndarray,
                 before: np.ndarray) -> list[np.ndarray]:
    """Per group, the change in stranded memory of each (candidate, target) move, (members, targets); moves within
    a node priced apart, in one batch."""
    deltas = []
    same_pairs: list[tuple[int, np.ndarray, np.ndarray]] = []
    offset = 0
    for g, (idx, g_node, _, _, _) in enumerate(found):
        delta = source_delta[idx][:, None] + target_delta[None, offset:offset + len(g_node)]
        same = src_node[idx][:, None] == g_node[None, :]
        if same.any():
            pair_rows, pair_cols = np.nonzero(same)
            same_pairs.append((g, pair_rows, pair_cols))
        deltas.append(delta)
        offset += len(g_node)
    if same_pairs:
        movers = np.concatenate([slots[found[g][0][rows_]] for g, rows_, _ in same_pairs])
        gpus = np.concatenate([found[g][2][cols] for g, _, cols in same_pairs])
        need_s = np.concatenate([found[g][3][cols] for g, _, cols in same_pairs])
        need_m = np.concatenate([found[g][4][cols] for g, _, cols in same_pairs])
        within = _same_node_delta(snapshot, occupancy, workload, movers, gpus, need_s, need_m, before)
        offset = 0
        for g, rows_, cols in same_pairs:
            deltas[g][rows_, cols] = within[offset:offset + len(rows_)]
            offset += len(rows_)
    return deltas


def _same_node_delta(snapshot: ClusterSnapshot, occupancy: Occupancy, workload: TypicalWorkload, slot: np.ndarray,
                     gpu: np.ndarray, need_share: np.ndarray, need_memory: np.ndarray,
                     before: np.ndarray) -> np.ndarray:
    """Change in stranded memory for each pod `slot[k]` moved to GPU `gpu[k]` of its own node, (n,); +inf for its
    own GPU (no move)."""
    node = occupancy.node[slot]
    own = occupancy.gpus[slot].argmax(axis=1)
    rows = np.arange(len(slot))
    share = snapshot.free_share_milli[node].copy()
    memory = snapshot.free_memory_mib[node].copy()
    share[rows, own] += occupancy.share_milli[slot]
    memory[rows, own] += occupancy.memory_mib[slot]
    share[rows, gpu] -= need_share
    memory[rows, gpu] -= need_memory
    after = stranded_memory_of(share, snapshot.cpu_free_milli[node], snapshot.gpu_type_id[node], memory, workload)
    delta: np.ndarray = np.where(own == gpu, np.inf, after - before[node])
    return delta


__all__ = ["Consolidation", "consolidate"]
