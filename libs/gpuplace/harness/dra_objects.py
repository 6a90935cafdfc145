"""The DRA objects `gpuplace bench dra` creates (resource.k8s.io/v1, Kubernetes v1.37), as
/work/notes/dra-format.md agrees them with gpuplace's DRA support: what the NVIDIA DRA driver (k8s-dra-driver-gpu)
publishes and what its users write.

- DeviceClass `gpu.nvidia.com`, selecting the driver's devices by CEL (as the driver's chart installs it);
- one ResourceSlice per node, pool named after the node, one device per GPU with `allowMultipleAllocations` and
  its memory as consumable capacity (no requestPolicy: a request without capacity consumes the whole device);
- one ResourceClaim per pod: a memory slice of one GPU (`capacity.requests.memory`), or `count` whole GPUs;
- the pod, referencing its claim by `resourceClaimName` (created by the bench right before the pod: a
  ResourceClaimTemplate would put kube-controller-manager's client, 20 QPS by default, in the measured path).

Pure: manifests in, manifests out, and the reading of allocation results back (`consumed_mib`).
"""

from __future__ import annotations

import uuid
from typing import Any

from gpuplace.adapters.kube import quantity
from gpuplace.adapters.kube.dra import DEVICE_CLASS, DRIVER, MEMORY
from gpuplace.core.model import Node, Pod
from gpuplace.sim.dra_stream import is_whole

API_VERSION = "resource.k8s.io/v1"
CLAIM_REQUEST = "gpu"  # the request's name in every claim, and the pod's name for its claim
# GPU Feature Discovery's product label (robotics_fleet's GPU names) -> the driver's productName attribute (NVML's
# name; GFD writes it with '-' for ' ').
PRODUCT_NAMES = {"Tesla-V100-SXM2-16GB": "Tesla V100-SXM2-16GB", "NVIDIA-A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
                 "NVIDIA-H100-80GB-HBM3": "NVIDIA H100 80GB HBM3", "NVIDIA-H200": "NVIDIA H200"}
_UUIDS = uuid.UUID("5f0d7a4e-6c1b-4a43-9b0e-3d7f1c2b8a90")


def device_class() -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "DeviceClass", "metadata": {"name": DEVICE_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def device_name(index: int) -> str:
    return f"gpu-{index}"


def resource_slice(node: Node, labels: dict[str, str], owner_uid: str | None = None) -> dict[str, Any]:
    """The node's ResourceSlice; owned by the Node when its uid is given (as the kubelet plugin publishes it), so
    the slice goes with the node."""
    metadata: dict[str, Any] = {"name": slice_name(node.name), "labels": dict(labels)}
    if owner_uid:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": owner_uid,
                                        "controller": True}]
    devices = [{
        "name": device_name(g.index), "allowMultipleAllocations": True,
        "attributes": {"type": {"string": "gpu"},
                       "productName": {"string": PRODUCT_NAMES.get(g.model, g.model.replace("-", " "))},
                       "uuid": {"string": f"GPU-{uuid.uuid5(_UUIDS, f'{node.name}/{g.index}')}"},
                       "index": {"int": g.index}},
        "capacity": {MEMORY: {"value": f"{g.memory_mib}Mi"}},
    } for g in node.gpus]
    return {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": metadata,
            "spec": {"driver": DRIVER, "nodeName": node.name,
                     "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def claim_name(pod: str) -> str:
    return f"{pod}-{CLAIM_REQUEST}"


def resource_claim(pod: Pod, namespace: str) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount",
                               "count": pod.gpu.count}
    if not is_whole(pod):
        exactly["capacity"] = {"requests": {MEMORY: f"{pod.gpu.memory_mib}Mi"}}
    return {"apiVersion": API_VERSION, "kind": "ResourceClaim",
            "metadata": {"name": claim_name(pod.name), "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": CLAIM_REQUEST, "exactly": exactly}]}}}


def pod_manifest(pod: Pod, namespace: str, *, scheduler: str, node_selector: dict[str, str],
                 deadlines: bool = False) -> dict[str, Any]:
    """The pod, the same for every scheduler but `scheduler`: its claim, CPU and memory, the run's fleet as its
    nodeSelector (the shared clusters have other nodes, some with other ResourceSlices), its workload class, and
    with `deadlines` a perception pod's deadline and frame rate (annotations kube-scheduler ignores; gpuplace then
    also refuses a GPU where the pod would miss its deadline, so the two no longer solve the same problem)."""
    annotations = {"gpuplace.io/workload": pod.workload_class or "unknown"}
    if deadlines and pod.deadline_ms:
        annotations["gpuplace.io/deadline-ms"] = str(pod.deadline_ms)
    if deadlines and pod.frame_rate_hz:
        annotations["gpuplace.io/frame-rate"] = str(pod.frame_rate_hz)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": namespace, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler, "nodeSelector": dict(node_selector),
            "resourceClaims": [{"name": CLAIM_REQUEST, "resourceClaimName": claim_name(pod.name)}],
            "containers": [{"name": "main", "image": "registry.local/robotics:1", "resources": {
                "requests": {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"},
                "claims": [{"name": CLAIM_REQUEST}]}}],
        },
    }


def allocated_devices(claim: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    """(pool, device, consumed MiB or None for the whole device) per result of the claim's allocation; [] when
    unallocated. With `allowMultipleAllocations` the allocator records consumedCapacity for every result, the
    device's full memory for a request without capacity (dynamic-resource-allocation@v0.37.2
    structured/internal/incubating/allocator_incubating.go allocateDevice); a result without it holds the device
    exclusively."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    found = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        if result.get("driver") != DRIVER:
            continue
        consumed = (result.get("consumedCapacity") or {}).get(MEMORY)
        found.append((result["pool"], result["device"], quantity.memory_mib(consumed) if consumed else None))
    return found


__all__ = ["CLAIM_REQUEST", "allocated_devices", "claim_name", "device_class",
           "device_name", "pod_manifest", "resource_claim", "resource_slice", "slice_name"]
