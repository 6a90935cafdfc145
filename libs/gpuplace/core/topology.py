"""GPU topology: keep a multi-GPU pod's GPUs in one domain when the node says where its GPUs sit.

A multi-GPU pod's GPUs talk to each other (all-reduce, pipeline stages) and to host memory. Across NUMA nodes
that traffic crosses the CPU interconnect, and between GPUs without NVLink it goes over PCIe: the pod runs
slower. A node may describe, per GPU, its NUMA node and its NVLink domain (snapshot `gpu_numa`, `gpu_nvlink`).
A GPU *domain* is the GPUs that share both: the set inside which every pair is close in both respects. A level
the node does not describe counts as one domain, so a DGX-style node (one NVSwitch domain, two NUMA nodes) has
two domains, its NUMA nodes, and a PCIe node with NVLink bridges has its bridged pairs.

What placement does with it (the runtime applies it for every policy, runtime.py):
- GPU choice (gpu_selection.in_one_domain): when the pod fits in one domain, its GPUs come from one, the
  domain with the fewest usable GPUs that fits (the larger domains stay whole for larger pods);
- score: a node where the pod must span domains although it fits its GPUs loses the policy's `span_penalty`
  (in its own score units; SPAN_PENALTY_DEFAULT, 0, leaves only the tie-break) and loses every tie against a
  node where it fits in one domain;
- `required` (GpuRequest.topology): a node where the pod cannot fit in one domain is filtered out
  (filters/gpu_topology.py), and so is a node that does not describe its topology, which cannot promise it.

A node without topology is never said to span: it behaves as before topology existed, and a cluster none of
whose nodes describe it (the traces) skips all of this at the cost of one flag check per pod.
"""

from __future__ import annotations

import numpy as np

from gpuplace.core.arrays import BoolArray, IntArray
from gpuplace.core.demand import Demand
from gpuplace.core.gpu_usable import usable_gpus
from gpuplace.core.snapshot import ClusterSnapshot, domain_room

SPAN_PENALTY_DEFAULT = 0.0
"""A policy that declares no `span_penalty`: spanning decides ties only (its scores keep their meaning)."""


def applies(snapshot: ClusterSnapshot, demand: Demand) -> bool:
    """Whether topology can matter for `demand` at all: more than one GPU, on a cluster that describes some."""
    return snapshot.any_topology and demand.needs_gpu and demand.gpu_count > 1


def spans(snapshot: ClusterSnapshot, demand: Demand, rows: IntArray) -> BoolArray | None:
    """Rows (each able to take the pod) where its GPUs cannot all come from one domain now, (n_rows,);
    None when topology cannot matter (see `applies`)."""
    if not applies(snapshot, demand):
        return None
    described = snapshot.has_topology[rows]
    out = np.zeros(len(rows), dtype=bool)
    if described.any():
        sub = rows[described]
        out[described] = domain_room(snapshot, usable_gpus(snapshot, demand, sub), sub) < demand.gpu_count
    return out


def could_hold(snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
    """Rows where a `required` pod could fit in one domain once the node were empty, (n_nodes,): it describes its
    topology and one of its domains has enough GPUs. All rows for any other pod."""
    if not demand.topology_required:
        return np.ones(snapshot.n_nodes, dtype=bool)
    real = np.arange(snapshot.max_gpus)[None, :] < snapshot.gpu_count[:, None]  # (n_nodes, max_gpus)
    holds: BoolArray = snapshot.has_topology & (domain_room(snapshot, real, slice(None)) >= demand.gpu_count)
    return holds


__all__ = ["SPAN_PENALTY_DEFAULT", "applies", "could_hold", "spans"]
