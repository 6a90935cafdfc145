"""GPU capacity and allocation per node, and a cluster's pods not bound yet and its stranded GPU, read from a
placement worker's in-memory clusters when metrics are scraped (PlacementService.cluster_gauges).

The view is what placement decides against (usecases/cluster_view.py): capacity from the node events, allocation
from the reservations it made and the pods it charged, kept equal to PostgreSQL's by re-reading whenever in doubt.
Reading it costs a few NumPy sums per scrape and no query: the gauges are as fresh as placement's own picture.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from gpuplace.core.fragmentation import fragmentation, stranded_gpu_memory
from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.core.workload import typical_workload
from gpuplace.usecases.cluster_state import ClusterState
from gpuplace.usecases.cluster_view import ClusterView
from gpuplace.usecases.pod_states import PodState
from gpuplace.usecases.ports import ClusterGauges, NodeGpus, PendingReason

_PENDING_REASONS: tuple[PendingReason, ...] = ("unschedulable", "queued", "defrag", "binding")


def cluster_gauges(state: ClusterState) -> ClusterGauges:
    """A loaded cluster's pods not bound yet, by why (a plan holds it, it fits nowhere, it is queued, its bind is
    in flight), the GPU stranded by fragmentation, and its nodes' GPUs."""
    pending: Counter[PendingReason] = Counter({reason: 0 for reason in _PENDING_REASONS})
    pending["binding"] += len(state.binding)
    for uid, row in state.waiting.items():
        pending["defrag" if uid in state.planned else
                "unschedulable" if uid in state.last_reasons or row["state"] == PodState.UNSCHEDULABLE else
                "queued"] += 1
    share, memory = _stranded(state)
    return ClusterGauges(state.view.cluster, dict(pending), share, memory, node_gpus(state.view))


def _stranded(state: ClusterState) -> tuple[float | None, float | None]:
    """GPU share and memory free but unusable by the cluster's typical workload (the FGD measure, DESIGN §6), M
    being the shapes of the pods decided last; as a fraction of the cluster's GPU share, and in MiB. None
    before the cluster has GPUs and pods to measure with."""
    snapshot = state.view.snapshot
    if snapshot is None or not state.recent or snapshot.total_gpu_milli == 0:
        return None, None
    workload = typical_workload(list(state.recent.values()), snapshot.gpu_types)
    share = float(fragmentation(snapshot, workload).sum()) / snapshot.total_gpu_milli
    return share, float(stranded_gpu_memory(snapshot, workload).sum())


def node_gpus(view: ClusterView) -> tuple[NodeGpus, ...]:
    """Each node of the view that has GPUs: its model, GPU count, GPU memory and what of it pods were given."""
    snapshot = view.snapshot
    if snapshot is None:
        return ()
    exists = snapshot.gpu_exists  # (n_nodes, max_gpus)
    memory_mib = snapshot.gpu_memory_mib * snapshot.gpu_count  # (n_nodes,)
    free_memory_mib = np.where(exists, snapshot.free_memory_mib, 0).sum(axis=1)  # (n_nodes,)
    free_share_milli = np.where(exists, snapshot.free_share_milli, 0).sum(axis=1)  # (n_nodes,)
    share_milli = snapshot.gpu_count * MILLI_PER_GPU  # (n_nodes,)
    return tuple(
        NodeGpus(node=name, model=snapshot.gpu_types[int(snapshot.gpu_type_id[row])].model,
                 gpus=int(snapshot.gpu_count[row]), memory_mib=int(memory_mib[row]),
                 memory_allocated_mib=int(memory_mib[row] - free_memory_mib[row]),
                 share_allocated_milli=int(share_milli[row] - free_share_milli[row]))
        for row, name in enumerate(snapshot.node_names) if snapshot.gpu_count[row] > 0)


__all__ = ["cluster_gauges", "node_gpus"]
