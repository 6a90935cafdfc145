"""What the scripts beside this one share: their trace arguments, a harness run read at the 100% mark, and the base
of the experiments that put gpuplace behind a filter of their own."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from gpuplace.cli.choices import parse_seeds
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.sim import simulator
from gpuplace.traces import alibaba


def trace_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--trace", default="default", help="pod trace short name (default, cpu050, ...)")
    parser.add_argument("--seeds", default="42-51", help="N, N-M or a comma-separated list of those")
    parser.add_argument("--trace-dir", type=Path, default=Path("../shared/traces/alibaba-gpu-v2023"))
    return parser


def seeded_runs(args: argparse.Namespace, policy: str = "gpuplace") -> Iterator[tuple[int, simulator.Prepared]]:
    """(seed, the harness's set-up of that seed) for each of --seeds, the trace read once."""
    nodes = alibaba.read_nodes(args.trace_dir / "openb_node_list_gpu_node.csv")
    pods = alibaba.read_pods(args.trace_dir / f"openb_pod_list_{args.trace}.csv")
    for seed in parse_seeds(args.seeds):
        yield seed, simulator.prepare(nodes, pods, policy, seed)


def unallocated_at_100(run: simulator.Prepared, policy=None) -> float:
    """Place the run's arrivals up to the 100% mark with `policy` (default: the run's own); unallocated GPU %."""
    policy = policy or run.placer
    snapshot, total = run.snapshot, run.snapshot.total_gpu_milli
    arrived = allocated = 0
    demands: dict = {}
    for index in arrivals_to_100(run):
        arrived += run.requested[index]
        demand = simulator._demand(run.pods[index], snapshot, demands)
        decision = decide(snapshot, demand, policy)
        if decision.scheduled:
            allocated += sum(bind(snapshot, demand, decision).share_milli)
    return 100.0 * (total - allocated) / total


def arrivals_to_100(run: simulator.Prepared) -> Iterator[int]:
    """Pod indices of the arrivals whose GPU request keeps the arrived total within the cluster's capacity."""
    arrived, total = 0, run.snapshot.total_gpu_milli
    for index in run.sequence:
        if arrived + run.requested[index] > total:
            return
        arrived += run.requested[index]
        yield int(index)


MIN_SHARE_MILLI = 700
"""The shared pods the reserve experiments may hold back: >= 700m, so no two of them share a GPU."""


def opens_a_gpu(snapshot, share) -> np.ndarray:
    """(n_nodes,): nodes where a shared one-GPU pod of `share` (per node, >= MIN_SHARE_MILLI) would open a GPU of
    its own: no partly used GPU there has room for it."""
    free = snapshot.free_share_milli
    reservable = (share >= MIN_SHARE_MILLI) & (share < MILLI_PER_GPU)
    into_used = ((free >= share[:, None]) & (free < MILLI_PER_GPU)).any(axis=1)
    return reservable & ~into_used


class BehindFilter:
    """A base policy behind an experiment's `filter`: score and GPU choice stay the base's; `refused` counts the pods
    the filter left with no node although they fit somewhere."""

    def __init__(self, base) -> None:
        self.base = base
        self.refused = 0

    def score(self, snapshot, demand, candidates):
        return self.base.score(snapshot, demand, candidates)

    def choose_gpus(self, snapshot, demand, node):
        return self.base.choose_gpus(snapshot, demand, node)

