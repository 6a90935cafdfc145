"""GPU capacity and allocation per node, read from a placement worker's in-memory view when metrics are scraped.

The view is what placement decides against (usecases/cluster_view.py): capacity from the node events, allocation
from the reservations it made and the pods it charged, kept equal to PostgreSQL's by re-reading whenever in doubt.
Reading it costs a few NumPy sums per scrape and no query: the gauges are as fresh as placement's own picture.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.usecases.cluster_view import ClusterView
from gpuplace.usecases.ports import NodeGpus


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


__all__ = ["node_gpus"]
