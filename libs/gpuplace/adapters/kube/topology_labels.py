"""A node's GPU topology from its labels: per GPU index, its NUMA node and its NVLink domain. Pure.

    gpuplace.io/gpu-numa     "0.0.0.0.1.1.1.1"   the NUMA node of GPU 0, 1, ... (the kernel's numa_node)
    gpuplace.io/gpu-nvlink   "0.0.0.0.0.0.0.0"   an NVLink domain number per GPU: equal numbers, NVLink-connected

Why these labels, and not what NVIDIA publishes:
- GPU Feature Discovery labels describe the node, not each GPU (nvidia.com/gpu.product, .count, .memory, .family,
  the MIG labels, and nvidia.com/gpu.clique for a multi-node NVLink clique, which all GPUs of a node share); none
  says which GPU sits on which NUMA node or which GPUs share NVLink.
- NVIDIA's DRA driver (k8s-dra-driver-gpu) publishes per device uuid, productName, pcieBusID and Kubernetes'
  standard resource.kubernetes.io/pcieRoot; Kubernetes defines resource.kubernetes.io/numaNode (the sysfs
  numa_node integer) for drivers to publish. Those live in ResourceSlices, which only DRA claims use; gpuplace
  places pods of the device plugin (`nvidia.com/gpu`, GFD labels), so it reads node labels, carrying the same
  number DRA's numaNode carries. An NFD local feature hook, or an operator, writes them from
  `nvidia-smi topo -m` (or /sys/bus/pci/devices/<bus id>/numa_node); they are static, like GFD's.
- Label values allow only [A-Za-z0-9._-], at most 63 characters: a list cannot use commas, so GPU values are
  separated by dots. That holds 32 GPUs of one-digit values, more than any node has.
- Labels, not GPU telemetry: topology is inventory, fixed while the node lives; the node event already carries the
  GPU count the lists must match, and one event carries the whole node's topology at once.

A node that describes neither label has no topology, and placement treats it as before. A value that does not
parse -- not dot-separated non-negative integers, or not one per GPU -- is ignored with a warning (the node is placed
as one without topology): a typo in a label must not take a node's GPUs away from every pod; only pods that
*require* topology then skip it, with a reason naming the node ("does not describe its GPU topology").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

GPU_NUMA = "gpuplace.io/gpu-numa"
GPU_NVLINK = "gpuplace.io/gpu-nvlink"
MAX_ID = 2**31 - 1  # int32 columns downstream
_DOTTED = re.compile(r"[0-9]+(?:\.[0-9]+)*")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuTopology:
    """Per GPU index, its NUMA node and NVLink domain (empty: not described); `problems`, why a label was ignored."""

    numa: tuple[int, ...] = ()
    nvlink: tuple[int, ...] = ()
    problems: tuple[str, ...] = ()


def gpu_topology(labels: Mapping[str, str], gpu_count: int) -> GpuTopology:
    """Parse the topology labels of a node with `gpu_count` GPUs; a bad label is left out and named in `problems`."""
    values: dict[str, tuple[int, ...]] = {}
    problems = []
    for key in (GPU_NUMA, GPU_NVLINK):
        if key not in labels:
            continue
        try:
            values[key] = _per_gpu(key, labels[key], gpu_count)
        except ValueError as exc:
            problems.append(str(exc))
    return GpuTopology(values.get(GPU_NUMA, ()), values.get(GPU_NVLINK, ()), tuple(problems))


def _per_gpu(key: str, text: str, gpu_count: int) -> tuple[int, ...]:
    if not _DOTTED.fullmatch(text):
        raise ValueError(f"label {key}={text!r} ignored: not dot-separated non-negative integers, one per GPU "
                         f"(e.g. \"0.0.1.1\")")
    numbers = tuple(int(part) for part in text.split("."))
    if len(numbers) != gpu_count:
        raise ValueError(f"label {key}={text!r} ignored: {len(numbers)} value(s) for {gpu_count} GPU(s)")
    if max(numbers) > MAX_ID:
        raise ValueError(f"label {key}={text!r} ignored: values must be at most {MAX_ID}")
    return numbers


@lru_cache(maxsize=1024)
def warn_once(node: str, problem: str) -> None:
    """Log a node's label problem once per node and problem (node updates repeat every few seconds)."""
    log.warning("node %s: %s", node, problem)


__all__ = ["GPU_NUMA", "GPU_NVLINK", "GpuTopology", "gpu_topology", "warn_once"]
