"""`gpuplace bench dra`'s fleet and claim stream through the placement core alone, policy beside policy.

    python bench/dra_offline.py --policies gpuplace,fgd,bestfit,random --training-scale 0.7 --seed 7

Separates what a policy does from what the pipeline adds: the GPU mix of `robotics_fleet.fleet(200)` and the stream
of `dra_stream.claims(2000)` (the bench's), nodes and claims dealt alternately to two clusters (the bench splits its
nodes per cluster instead, so the fleets differ a little), each claim decided in arrival order against its
cluster's snapshot and bound when it fits. Prints the claims placed per policy. The policies are built once per
cluster with the typical workload of its first 200 claims (the live house policy learns it as it goes).
"""

from __future__ import annotations

import argparse

import numpy as np

from gpuplace.core.demand import resolve
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.policies import registry
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import typical_workload
from gpuplace.sim import dra_stream, robotics_fleet

CLUSTERS = 2
WORKLOAD_PODS = 200


def placed(policy: str, *, nodes: int, pods: int, seed: int, training_scale: float) -> int:
    fleet = robotics_fleet.fleet(nodes, seed=seed)
    stream = dra_stream.claims(pods, seed=seed, training_scale=training_scale)
    count = 0
    for k in range(CLUSTERS):
        snapshot = ClusterSnapshot(fleet[k::CLUSTERS])
        arrivals = stream[k::CLUSTERS]
        placer = registry.create(policy, PolicyContext(
            workload=typical_workload(arrivals[:WORKLOAD_PODS], snapshot.gpu_types), rng=np.random.default_rng(seed)))
        for pod in arrivals:
            demand = resolve(pod, snapshot)
            decision = decide(snapshot, demand, placer)
            if decision.scheduled:
                bind(snapshot, demand, decision)
                count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="gpuplace,fgd,bestfit,random")
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--training-scale", type=float, default=1.0)
    args = parser.parse_args()
    for policy in args.policies.split(","):
        count = placed(policy, nodes=args.nodes, pods=args.pods, seed=args.seed, training_scale=args.training_scale)
        print(f"{policy}: {count} of {args.pods} placed")


if __name__ == "__main__":
    main()
