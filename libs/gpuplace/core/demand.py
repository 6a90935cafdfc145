"""A pod's request resolved against a snapshot's GPU types: what it takes from each kind of node.

A share request is the same on every GPU; a memory request is a different share on a 16 GiB and a
32 GiB GPU. Resolving once per pod and snapshot gives filters and policies plain per-type arrays
they index with `snapshot.gpu_type_id`, so per-node work stays vectorised.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gpuplace.core.arrays import BoolArray, IntArray
from gpuplace.core.model import MILLI_PER_GPU, Pod
from gpuplace.core.node_rules import NO_RULES, PodRules
from gpuplace.core.snapshot import ClusterSnapshot, kind_of

RequestKey = tuple[int, int, int, int | None, int | None, tuple[str, ...]]
"""(cpu milli, memory MiB, GPU count, share milli or None, GPU memory MiB or None, allowed models)."""

UNRESOLVABLE = np.iinfo(np.int64).max // 4
"""Share or memory need on a GPU type where the request cannot be converted (memory unknown)."""


@dataclass(frozen=True, eq=False)
class Demand:
    """Per-GPU-type view of one pod's request. Arrays are indexed by GPU type, (n_types,)."""

    pod_name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    share_milli_by_type: IntArray
    gpu_memory_mib_by_type: IntArray
    allowed_by_type: BoolArray
    request_key: RequestKey
    """Hashable identity of the request (without the pod's name and rules): equal keys, equal scores."""
    rules: PodRules = NO_RULES
    """Which nodes the pod may use at all (filters/node_rules.py); scores never depend on it."""
    topology_required: bool = False
    """More than one GPU, all in one GPU domain, or not at all (filters/gpu_topology.py; core/topology.py)."""

    @cached_property
    def needs_gpu(self) -> bool:
        """Read by every filter and score of a decision: computed once per Demand (its arrays never change)."""
        return self.gpu_count > 0 and bool((self.share_milli_by_type > 0).any() or (
            self.gpu_memory_mib_by_type > 0).any())

    def share_on(self, snapshot: ClusterSnapshot) -> IntArray:
        """Share needed on each GPU of each node, (n_nodes,)."""
        return self.share_milli_by_type[snapshot.gpu_type_id]

    def gpu_memory_on(self, snapshot: ClusterSnapshot) -> IntArray:
        """Memory needed on each GPU of each node, (n_nodes,)."""
        return self.gpu_memory_mib_by_type[snapshot.gpu_type_id]

    def kind_on(self, snapshot: ClusterSnapshot, node: int) -> int:
        share = int(self.share_milli_by_type[snapshot.gpu_type_id[node]])
        return kind_of(self.gpu_count, share)


def resolve(pod: Pod, snapshot: ClusterSnapshot) -> Demand:
    """Resolve `pod` against the snapshot's GPU types (see the module docstring)."""
    request = pod.gpu
    n_types = len(snapshot.gpu_types)
    share = np.zeros(n_types, dtype=np.int64)  # (n_types,)
    memory = np.zeros(n_types, dtype=np.int64)  # (n_types,)
    allowed = np.ones(n_types, dtype=bool)  # (n_types,)
    if request.needs_gpu:
        for t, gpu_type in enumerate(snapshot.gpu_types):
            allowed[t] = bool(gpu_type.model) and request.allows(gpu_type.model)
            converted = request.share_milli_on(gpu_type.memory_mib)
            share[t] = UNRESOLVABLE if converted is None else converted
            memory[t] = request.memory_mib_on(gpu_type.memory_mib)
    gpu_count = request.count if request.needs_gpu else 0
    key: RequestKey = (pod.cpu_milli, pod.memory_mib, gpu_count, request.share_milli, request.memory_mib,
           request.allowed_models if request.needs_gpu else ())
    required = gpu_count > 1 and request.topology == "required"
    return Demand(pod.name, pod.cpu_milli, pod.memory_mib, gpu_count, share, memory, allowed, key, pod.rules,
                  required)


def nominal_share_milli(pod: Pod, snapshot: ClusterSnapshot) -> int:
    """GPU milli a pod asks for in total, for arrival accounting.

    A share request counts as written (count x share, as the paper's harness does); a memory-only
    request counts on the smallest allowed GPU type, the most it can cost.
    """
    request = pod.gpu
    if not request.needs_gpu:
        return 0
    if request.share_milli is not None:
        return request.count * request.share_milli
    demand = resolve(pod, snapshot)
    usable = demand.allowed_by_type & (demand.share_milli_by_type < UNRESOLVABLE)
    per_gpu = int(demand.share_milli_by_type[usable].max()) if usable.any() else MILLI_PER_GPU
    return request.count * per_gpu


__all__ = ["Demand", "RequestKey", "UNRESOLVABLE", "nominal_share_milli", "resolve"]
