"""What the scripts beside this one share: their trace arguments, and a harness run read at the 100% mark."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from gpuplace.cli.choices import parse_seeds
from gpuplace.core.framework.runtime import bind, decide
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
