"""A small cluster with running pods, built the way it reads (tests only).

    cluster = Cluster(make_node("a").cpu(32).gpus(2).build())
    cluster.run("p1", make_pod("p1").gpu_share(500).build(), "a", 0)
    cluster.snapshot, cluster.running   # the snapshot with p1 charged on a/GPU 0, and p1's RunningPod
"""

from __future__ import annotations

from gpuplace.core.defrag.model import RunningPod
from gpuplace.core.demand import resolve
from gpuplace.core.model import Node, Pod
from gpuplace.core.snapshot import ClusterSnapshot


class Cluster:
    def __init__(self, *nodes: Node) -> None:
        self.snapshot = ClusterSnapshot(list(nodes))
        self.running: list[RunningPod] = []

    def run(self, uid: str, pod: Pod, node: str, *gpus: int, owner: str | None = None,
            restart_s: float = 30.0) -> RunningPod:
        """Charge `pod` on `node`'s `gpus` and record it as running."""
        row = self.snapshot.index_of(node)
        demand = resolve(pod, self.snapshot)
        type_id = self.snapshot.gpu_type_id[row]
        share = int(demand.share_milli_by_type[type_id]) if gpus else 0
        memory = int(demand.gpu_memory_mib_by_type[type_id]) if gpus else 0
        kind = demand.kind_on(self.snapshot, row)
        self.snapshot.charge(row, gpus, pod.cpu_milli, pod.memory_mib, share, memory, kind)
        running = RunningPod(uid, pod, node, tuple(gpus), share, memory, owner, restart_s)
        self.running.append(running)
        return running

    def by_uid(self) -> dict[str, RunningPod]:
        return {r.uid: r for r in self.running}
