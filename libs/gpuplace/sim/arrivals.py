"""The paper's arrival sequence: which pods arrive, in what order, on which node order.

The harness of Weng et al.'s simulator (DESIGN.md §6), step by step, from one seeded generator:
1. the trace's pods, sorted by name, are shuffled;
2. pods drawn uniformly with replacement from the (name-sorted) trace are appended until the
   requested GPU reaches `tune_ratio` (1.3) x the cluster's GPU capacity -- or, if the trace alone
   asks for more, randomly chosen pods are dropped until it does not;
3. the node order is a random permutation of the name-sorted nodes.
The stopping test of step 2 is the reference's, quirk included: it adds a drawn pod's *per-GPU*
share to the running total before comparing, then adds its full request. Kept so that the number
of arrivals (and so the curves past 100%) match. A trace that asks for no GPU is not resampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplace.core.arrays import IntArray


@dataclass(frozen=True)
class ArrivalPlan:
    sequence: IntArray
    """Index into the name-sorted pods of each arrival, in arrival order, (n_arrivals,)."""
    node_order: IntArray
    """Permutation of the name-sorted nodes: row i of the simulated cluster is node_order[i]."""
    n_from_trace: int
    """How many of the arrivals are the shuffled trace itself (the rest were resampled)."""


def plan_arrivals(
    total_milli: IntArray, per_gpu_milli: IntArray, n_nodes: int, capacity_milli: int,
    rng: np.random.Generator, tune_ratio: float = 1.3,
) -> ArrivalPlan:
    """Plan arrivals for pods whose requests are given in name order (see the module docstring).

    `total_milli[i]` is pod i's requested milli-GPU over all its GPUs; `per_gpu_milli[i]` its share
    of one GPU (0 for CPU-only pods).
    """
    total = np.asarray(total_milli, dtype=np.int64)
    per_gpu = np.asarray(per_gpu_milli, dtype=np.int64)
    if total.shape != per_gpu.shape or total.ndim != 1 or not len(total):
        raise ValueError("need one total and one per-GPU request per pod, and at least one pod")
    if n_nodes <= 0 or capacity_milli <= 0 or tune_ratio < 0:
        raise ValueError("need nodes, GPU capacity and a non-negative tune ratio")
    sequence = rng.permutation(len(total))
    target = tune_ratio * float(capacity_milli)
    requested = int(total.sum())
    n_from_trace = len(sequence)
    if tune_ratio > 0 and requested > target:
        sequence, n_from_trace = _tune_down(sequence, total, requested, target, rng)
    elif tune_ratio > 0 and requested < target and requested > 0:  # no GPU asked: resampling never ends
        sequence = _tune_up(sequence, total, per_gpu, requested, target, rng)
    return ArrivalPlan(sequence, rng.permutation(n_nodes), n_from_trace)


def _tune_up(sequence: IntArray, total: IntArray, per_gpu: IntArray, requested: int,
             target: float, rng: np.random.Generator) -> IntArray:
    drawn = []
    while True:
        pod = int(rng.integers(len(total)))
        if float(requested + per_gpu[pod]) > target:  # the reference's test (see module docstring)
            break
        requested += int(total[pod])
        drawn.append(pod)
    return np.concatenate([sequence, np.asarray(drawn, dtype=np.int64)])


def _tune_down(sequence: IntArray, total: IntArray, requested: int, target: float,
               rng: np.random.Generator) -> tuple[IntArray, int]:
    kept = list(sequence)
    while float(requested) > target and kept:
        requested -= int(total[kept.pop(int(rng.integers(len(kept))))])
    return np.asarray(kept, dtype=np.int64), len(kept)


__all__ = ["ArrivalPlan", "plan_arrivals"]
