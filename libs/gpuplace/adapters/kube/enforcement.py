"""What confines a pod to the GPU share gpuplace gives it: read from what cluster-watcher already sees. Pure.

gpuplace decides which GPU, and how much of it, a pod may use; something on the node must hold the pod to that,
or the decision is only bookkeeping. The standard NVIDIA device plugin hands out whole GPUs (`nvidia.com/gpu`), picks
the GPU itself and limits no memory: a pod given "9420 MiB of GPU 3" by annotation alone can take all of any GPU
it sees. So each node says what it has (`node_has`, NodeEvent.gpu_enforcement), each pod asking for a share says
what would hold it (`pod_needs`, PodEvent.gpu_enforcement), and placement puts the pod only where they meet, unless
the operator allows unenforced sharing (GPUPLACE_ALLOW_UNENFORCED_SHARING), which places it anyway with a warning
Event on the pod.

| node has  | seen from                                                   | holds                                  |
|-----------|-------------------------------------------------------------|----------------------------------------|
| dra       | its GPUs come from the NVIDIA DRA driver's ResourceSlice    | pods with a claim (only they go there) |
| declared  | label gpuplace.io/gpu-sharing-enforcement=<mechanism>       | any share gpuplace assigns             |
| hami      | HAMi's device plugin registration (hami.io/node-nvidia-register) | shares in HAMi's vocabulary       |
| mig       | allocatable nvidia.com/mig-<profile> (mixed strategy)       | MIG slices (devices of their own)      |
| none      | only nvidia.com/gpu                                         | whole GPUs                             |

The order is the precedence when a node shows several. Whole GPUs need nothing: the device plugin (or DRA driver)
hands out exactly what is asked, though it picks which GPU itself, so gpuplace's index is its own bookkeeping there.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuplace.contracts.events import GpuEnforcement, GpuRequest, HamiRequest

DECLARED = "gpuplace.io/gpu-sharing-enforcement"
"""A node label set by the operator: something on this node (a device plugin of the site's own, an MPS daemon with
limits, a simulator) reads gpuplace's assignment (gpuplace.io/gpu-assignment) and confines each pod to it."""


def node_has(labels: Mapping[str, str], *, dra: bool, hami: bool, mig: bool) -> GpuEnforcement:
    """The node's enforcement, by the table's precedence."""
    if dra:
        return "dra"
    if labels.get(DECLARED):
        return "declared"
    if hami:
        return "hami"
    return "mig" if mig else "none"


def shared(gpu: GpuRequest | None) -> bool:
    """Whether `gpu` asks for part of a GPU (memory, or a fraction), not whole GPUs."""
    return gpu is not None and (gpu.memory_mib_per_gpu is not None or gpu.share_milli_per_gpu not in (None, 1000))


def pod_needs(gpu: GpuRequest | None, hami: HamiRequest | None, claimed: bool) -> tuple[GpuEnforcement, ...]:
    """The node enforcements that confine a pod's GPU share; () for whole GPUs, none, or a DRA claim (a claim's pod
    goes only to its driver's nodes, and the driver prepares what it allocated)."""
    if claimed or not shared(gpu):
        return ()
    return ("hami", "declared") if hami is not None else ("declared",)


__all__ = ["DECLARED", "node_has", "pod_needs", "shared"]
