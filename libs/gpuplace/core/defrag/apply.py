"""A plan carried out on a snapshot in the executor's order: reserve, evict, bind.

1. wave by wave (Move.wave, ascending): charge the wave's targets (its pods still run at their old
   places), then refund its pods at their old places (the evictions);
2. charge the beneficiary on its node and GPUs.
Each step is ClusterSnapshot.charge/refund, which refuse any over-commit, so a plan that applies is
a plan whose every intermediate state is feasible. All or nothing: on a refusal the steps already
taken are undone and the ValueError propagates. The simulator applies plans with this function, the
planner checks its plans with it on a scratch copy, and so do the property tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gpuplace.core.defrag.model import Move, Plan, RunningPod
from gpuplace.core.model import Pod
from gpuplace.core.snapshot import ClusterSnapshot, kind_of

_Step = tuple[int, tuple[int, ...], int, int, int, int, int]
"""The arguments of one charge or refund: node, GPUs, CPU, host memory, share, GPU memory, kind."""


def apply_plan(snapshot: ClusterSnapshot, plan: Plan, beneficiary: Pod,
               running: Mapping[str, RunningPod]) -> dict[str, RunningPod]:
    """Carry out `plan` (see the module docstring); returns the moved pods' new records by uid."""
    undo: list[Callable[[], None]] = []
    try:
        moved = _moves(snapshot, plan.moves, running, undo)
        _do(snapshot.charge, snapshot.refund, undo,
            (snapshot.index_of(plan.node), plan.gpu_indices, beneficiary.cpu_milli, beneficiary.memory_mib,
             plan.share_milli, plan.memory_mib, kind_of(len(plan.gpu_indices), plan.share_milli)))
    except (ValueError, KeyError):
        for step in reversed(undo):
            step()
        raise
    return moved


def apply_moves(snapshot: ClusterSnapshot, moves: Sequence[Move], running: Mapping[str, RunningPod]) -> dict[
        str, RunningPod]:
    """Step 1 only: the cluster the beneficiary will find (all or nothing, like apply_plan)."""
    undo: list[Callable[[], None]] = []
    try:
        return _moves(snapshot, moves, running, undo)
    except (ValueError, KeyError):
        for step in reversed(undo):
            step()
        raise


def _moves(snapshot: ClusterSnapshot, moves: Sequence[Move], running: Mapping[str, RunningPod],
           undo: list[Callable[[], None]]) -> dict[str, RunningPod]:
    if len({m.uid for m in moves}) != len(moves):
        raise ValueError("a plan moves a pod twice")
    moved = {}
    for wave in sorted({m.wave for m in moves}):
        this_wave = [m for m in moves if m.wave == wave]
        for move in this_wave:
            pod = running[move.uid].pod
            _do(snapshot.charge, snapshot.refund, undo,
                (snapshot.index_of(move.to_node), move.to_gpu_indices, pod.cpu_milli, pod.memory_mib,
                 move.share_milli, move.memory_mib, kind_of(len(move.to_gpu_indices), move.share_milli)))
        for move in this_wave:
            old = running[move.uid]
            _do(snapshot.refund, snapshot.charge, undo,
                (snapshot.index_of(old.node_name), old.gpu_indices, old.pod.cpu_milli, old.pod.memory_mib,
                 old.share_milli, old.memory_mib, kind_of(len(old.gpu_indices), old.share_milli)))
            moved[move.uid] = RunningPod(old.uid, old.pod, move.to_node, move.to_gpu_indices, move.share_milli,
                                         move.memory_mib, old.owner, old.restart_s)
    return moved


def _do(step: Callable[..., None], inverse: Callable[..., None], undo: list[Callable[[], None]], args: _Step) -> None:
    step(*args)
    undo.append(lambda: inverse(*args))


__all__ = ["apply_moves", "apply_plan"]
