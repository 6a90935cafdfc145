"""CPU per placement decision of a latency pod, as the placement service pays it (issue 16).

    python bench/latency_decisions.py [--pods 2000] [--repeats 3]

The pipeline bench's cluster (`gpuplace bench pipeline --nodes 200 --pods 2000`: 100 nodes x 10 GPUs per
apiserver, sim/robotics_fleet.py's products) and its perception pods, each decided by the service's Decider
(usecases/decide.py: the house policy behind the latency filter) on one ClusterView, charged to the snapshot and
the GpuLoad when placed. Prints the median process CPU per decision over the repeats and a digest of the final
free GPU memory, so that a change meant to be faster, not different, shows the same digest.
"""

from __future__ import annotations

import argparse
import statistics
import time
import zlib

from gpuplace.core.demand import resolve
from gpuplace.core.framework import runtime
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import DEFAULT_MODEL, Stream
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.sim import robotics_fleet
from gpuplace.usecases.cluster_view import ClusterView
from gpuplace.usecases.decide import Decider


def run(n_pods: int, n_nodes: int = 100) -> tuple[float, int, int]:
    """(CPU ms per decision, pods placed, digest of the final free GPU memory)."""
    snapshot = ClusterSnapshot(robotics_fleet.fleet(n_nodes, gpus_per_node=10, seed=7, prefix="bench-n"))
    view = ClusterView("bench", snapshot, {}, latency_model=DEFAULT_MODEL)
    view.gpu_load = load = GpuLoad.for_snapshot(snapshot)
    decider = Decider("gpuplace")
    pods = robotics_fleet.pods(n_pods, seed=7)
    placed = 0
    started = time.process_time()
    for pod, service_ms in pods:
        stream = Stream.of(pod, service_ms)
        decision = runtime.place(snapshot, pod, decider.policy(view, pod, stream))
        if decision.node is None:
            continue
        runtime.bind(snapshot, resolve(pod, snapshot), decision)
        if stream is not None and decision.gpu_indices:
            load.charge(pod.name, decision.node, decision.gpu_indices, stream)
        placed += 1
    cpu_ms = 1000.0 * (time.process_time() - started) / len(pods)
    return cpu_ms, placed, zlib.crc32(snapshot.free_memory_mib.tobytes())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=100, help="one cluster's nodes (the 1,000-node pipeline bench "
                        "has 500 per apiserver)")
    args = parser.parse_args()
    runs = [run(args.pods, args.nodes) for _ in range(args.repeats)]
    cpu = statistics.median(r[0] for r in runs)
    print(f"{args.pods} latency pods on {args.nodes} nodes x 10 GPUs: {cpu:.3f} ms CPU per decision (median of "
          f"{args.repeats}: {', '.join(f'{r[0]:.3f}' for r in runs)}); placed {runs[0][1]}; digest {runs[0][2]}")


if __name__ == "__main__":
    main()
