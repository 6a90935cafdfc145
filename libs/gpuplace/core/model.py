"""The placement domain: nodes, GPUs, pods and the assignment of a pod to GPUs.

Rules of this module:
- every type is a frozen dataclass; quantities carry their unit in the name (`cpu_milli`,
  `memory_mib`, `share_milli`);
- a GPU request may be written as a per-GPU share (milli-GPU, the trace's unit), as per-GPU memory
  (MiB, what robotics pods ask for), or both. Each converts to the other on a given GPU, and both
  views are checked and charged, so neither unit is second-class;
- conversions round so that the derived view never refuses what the requested view allows: a
  share of `s` milli on a GPU of `M` MiB charges floor(s * M / 1000) MiB, and `m` MiB charges
  max(1, floor(m * 1000 / M)) milli. A sum of floors never exceeds the floor of the sum, so pods that
  fit by their own unit also fit by the derived one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpuplace.core.node_rules import NO_RULES, PodRules

MILLI_PER_GPU = 1000
"""A whole GPU in milli-GPU: shares are integers in [0, MILLI_PER_GPU]."""

Topology = Literal["preferred", "required"]
"""How a multi-GPU request treats the node's GPU topology (core/topology.py): `preferred` (the default) places it
in one GPU domain -- one NUMA node and one NVLink domain -- when it fits there and scores nodes where it must span
lower; `required` never lets it span: a node where it cannot fit in one domain is filtered out."""
TOPOLOGIES: tuple[Topology, ...] = ("preferred", "required")


@dataclass(frozen=True)
class GpuRequest:
    """What a pod asks of each of its GPUs.

    `count` GPUs, each giving the pod `share_milli` of its compute and/or `memory_mib` of its memory.
    A whole-GPU request is `share_milli=1000`. `allowed_models` empty means any model. `topology` matters only
    for more than one GPU (see Topology).
    """

    count: int = 0
    share_milli: int | None = None
    memory_mib: int | None = None
    allowed_models: tuple[str, ...] = ()
    topology: Topology = "preferred"

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"GPU count must be >= 0, got {self.count}")
        if self.share_milli is not None and not 0 <= self.share_milli <= MILLI_PER_GPU:
            raise ValueError(f"share_milli must be in [0, {MILLI_PER_GPU}], got {self.share_milli}")
        if self.memory_mib is not None and self.memory_mib < 0:
            raise ValueError(f"memory_mib must be >= 0, got {self.memory_mib}")
        if self.count > 0 and self.share_milli is None and self.memory_mib is None:
            raise ValueError("a GPU request needs share_milli, memory_mib or both")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"topology must be one of {', '.join(TOPOLOGIES)}, got {self.topology!r}")

    @property
    def needs_gpu(self) -> bool:
        return self.count > 0 and (bool(self.share_milli) or bool(self.memory_mib))

    @property
    def is_shared(self) -> bool:
        """One GPU, less than all of it: the only request that may share a GPU with others."""
        return self.count == 1 and self.share_milli is not None and self.share_milli < MILLI_PER_GPU

    def allows(self, model: str) -> bool:
        return not self.allowed_models or model in self.allowed_models

    def share_milli_on(self, gpu_memory_mib: int) -> int | None:
        """Share charged on one GPU of `gpu_memory_mib`; None when it cannot be known (memory unknown)."""
        if self.share_milli is not None:
            return self.share_milli
        if self.memory_mib is None:
            return 0
        if gpu_memory_mib <= 0:
            return None
        return min(MILLI_PER_GPU, max(1, self.memory_mib * MILLI_PER_GPU // gpu_memory_mib))

    def memory_mib_on(self, gpu_memory_mib: int) -> int:
        """Memory charged on one GPU of `gpu_memory_mib` (floor of the share's fraction, see module doc)."""
        if self.memory_mib is not None:
            return self.memory_mib
        return (self.share_milli or 0) * max(gpu_memory_mib, 0) // MILLI_PER_GPU


NO_GPU = GpuRequest()

MAX_TOPOLOGY_ID = 2**31
"""NUMA node and NVLink domain numbers are below it (int32 columns; snapshot.py packs the two into one int64)."""


@dataclass(frozen=True)
class Gpu:
    """One device on a node and what is still free on it.

    `numa_node` and `nvlink_domain` place it in the node's topology (core/topology.py): GPUs with equal values
    share a NUMA node / an NVLink domain. None: not described (a node describes all its GPUs or none).
    """

    index: int
    model: str
    memory_mib: int
    free_share_milli: int = MILLI_PER_GPU
    free_memory_mib: int | None = None
    numa_node: int | None = None
    nvlink_domain: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.free_share_milli <= MILLI_PER_GPU:
            raise ValueError(f"GPU {self.index}: free_share_milli out of range: {self.free_share_milli}")
        for what, value in (("numa_node", self.numa_node), ("nvlink_domain", self.nvlink_domain)):
            if value is not None and not 0 <= value < MAX_TOPOLOGY_ID:
                raise ValueError(f"GPU {self.index}: {what} out of [0, {MAX_TOPOLOGY_ID}): {value}")
        if self.free_memory_mib is not None and not 0 <= self.free_memory_mib <= self.memory_mib:
            raise ValueError(f"GPU {self.index}: free_memory_mib out of range: {self.free_memory_mib}")

    @property
    def free_memory(self) -> int:
        return self.memory_mib if self.free_memory_mib is None else self.free_memory_mib


@dataclass(frozen=True)
class Node:
    """A schedulable node: CPU and host memory capacity, and its GPUs (all of one model)."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[Gpu, ...] = ()
    cpu_free_milli: int | None = None
    memory_free_mib: int | None = None

    @classmethod
    def with_gpus(
        cls, name: str, cpu_milli: int, memory_mib: int, gpu_count: int, gpu_model: str, gpu_memory_mib: int,
        *, numa: tuple[int, ...] | None = None, nvlink: tuple[int, ...] | None = None,
    ) -> Node:
        """An idle node with `gpu_count` identical GPUs; `numa` / `nvlink`, if given, per GPU index."""
        for what, values in (("numa", numa), ("nvlink", nvlink)):
            if values is not None and len(values) != gpu_count:
                raise ValueError(f"node {name}: {what} names {len(values)} GPU(s), the node has {gpu_count}")
        gpus = tuple(Gpu(i, gpu_model, gpu_memory_mib, numa_node=None if numa is None else numa[i],
                         nvlink_domain=None if nvlink is None else nvlink[i]) for i in range(gpu_count))
        return cls(name, cpu_milli, memory_mib, gpus)

    @property
    def gpu_model(self) -> str:
        return self.gpus[0].model if self.gpus else ""

    @property
    def gpu_memory_mib(self) -> int:
        return self.gpus[0].memory_mib if self.gpus else 0


@dataclass(frozen=True)
class Pod:
    """A pod as placement sees it. Deadline, frame rate and class serve the latency model."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu: GpuRequest = NO_GPU
    priority: int = 0
    deadline_ms: float | None = None
    frame_rate_hz: float | None = None
    workload_class: str | None = None
    rules: PodRules = NO_RULES  # selectors, affinity, tolerations, host ports, countables (node_rules.py)

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError(f"pod {self.name}: negative CPU or memory request")


@dataclass(frozen=True)
class Assignment:
    """Where a pod went: the node, and per chosen GPU the share and memory charged."""

    pod_name: str
    node_name: str
    gpu_indices: tuple[int, ...] = ()
    share_milli: tuple[int, ...] = ()
    memory_mib: tuple[int, ...] = ()


__all__ = ["Assignment", "Gpu", "GpuRequest", "MAX_TOPOLOGY_ID", "MILLI_PER_GPU", "NO_GPU", "Node", "Pod", "TOPOLOGIES",
           "Topology"]
