"""DRA (resource.k8s.io/v1) objects <-> gpuplace: ResourceSlices -> GPU inventory, ResourceClaims -> GPU requests
and the devices they hold, and the allocation gpuplace writes on a claim. Pure: JSON dicts in, values out.

gpuplace understands GPUs as the NVIDIA DRA driver (k8s-dra-driver-gpu) publishes them: driver `gpu.nvidia.com`,
one pool per node named after it, devices `gpu-<index>` with the attributes `index`, `productName`, `uuid`, the
capacity `memory`, and `allowMultipleAllocations: true` (KEP-5075 consumable capacity: a claim may take a share of
a GPU's memory). A slice that deviates is refused with the reason (`SliceError`); the node then has no DRA GPUs.
A claim it cannot place exactly as kube-scheduler would is refused with the reason (`RequestError`), never guessed.

The allocation mirrors kube-scheduler's (k8s.io/dynamic-resource-allocation@v0.37.2
structured/internal/incubating/allocator_incubating.go, Allocate: one result per device with request, driver,
pool, device, a fresh shareID and consumedCapacity for a device allowing multiple allocations;
createNodeSelector: matchFields metadata.name In [node] for a node-local slice; config copied from the class and
the claim), and so does the write (k8s.io/kubernetes@v1.37.2
pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go, bindClaim: the finalizer
`resource.kubernetes.io/delete-protection` in a plain update, then allocation and reservedFor in one status update,
resourceVersion as the precondition).
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplace.adapters.kube import quantity
from gpuplace.adapters.kube.vocabulary import MAX_GPUS, MAX_MEMORY_MIB, RequestError
from gpuplace.contracts.events import DraClaim, DraDevice, GpuRequest

DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
FINALIZER = "resource.kubernetes.io/delete-protection"  # k8s.io/api@v0.37.2 resource/v1 types.go Finalizer
API = "/apis/resource.k8s.io/v1"
MEMORY = "memory"
_DEVICE_NAME = re.compile(r"gpu-(0|[1-9][0-9]*)")
_MIB = 1024 * 1024

Json = Mapping[str, Any]


class SliceError(ValueError):
    """A node's ResourceSlices of the GPU driver describe GPUs gpuplace cannot place on exactly."""


@dataclass(frozen=True)
class SliceInventory:
    """A node's GPUs as its DRA driver publishes them: uniform model and memory (what gpuplace's nodes carry)."""

    node: str
    model: str
    count: int
    memory_mib: int
    uuids: tuple[str, ...]


def slice_inventory(node: str, slices: Sequence[Json]) -> SliceInventory:
    """The GPU inventory of `node` from its ResourceSlices of driver gpu.nvidia.com; SliceError says why not.

    Only the newest generation of the pool counts, and only once all its `resourceSliceCount` slices are seen
    (k8s.io/dynamic-resource-allocation@v0.37.2 structured/pools.go GatherPools: an incomplete pool is not used)."""
    pools = {(s.get("spec") or {}).get("pool", {}).get("name") for s in slices}
    if pools != {node}:
        raise SliceError(f"{DRIVER} slices of node {node} publish pool(s) {sorted(map(str, pools))}; "
                         f"gpuplace reads one pool named after the node")
    newest = max(int(s["spec"]["pool"].get("generation") or 0) for s in slices)
    current = [s for s in slices if int(s["spec"]["pool"].get("generation") or 0) == newest]
    expected = int(current[0]["spec"]["pool"].get("resourceSliceCount") or 1)
    if len(current) != expected:
        raise SliceError(f"pool {node} generation {newest}: {len(current)} of {expected} slices seen")
    devices: dict[int, Json] = {}
    for item in current:
        spec = item["spec"]
        if spec.get("nodeName") != node or spec.get("perDeviceNodeSelection") or spec.get("nodeSelector") \
                or spec.get("allNodes"):
            raise SliceError(f"slice {item['metadata']['name']} is not local to node {node} (spec.nodeName)")
        if spec.get("sharedCounters"):
            raise SliceError(f"slice {item['metadata']['name']} has sharedCounters (partitionable devices)")
        for device in spec.get("devices") or ():
            index = _device_index(device)
            if index in devices:
                raise SliceError(f"device gpu-{index} published twice on node {node}")
            devices[index] = device
    if not devices:
        raise SliceError(f"{DRIVER} publishes no device on node {node}")
    if sorted(devices) != list(range(len(devices))):
        raise SliceError(f"node {node}'s GPU indices {sorted(devices)} are not 0..{len(devices) - 1}")
    if len(devices) > MAX_GPUS:
        raise SliceError(f"node {node} publishes {len(devices)} GPUs, more than {MAX_GPUS}")
    models = {_attribute(d, "productName", "string") for d in devices.values()}
    memories = {_capacity_mib(d) for d in devices.values()}
    if len(models) != 1 or len(memories) != 1:
        raise SliceError(f"node {node} mixes GPU models {sorted(map(str, models))} or memory sizes "
                         f"{sorted(memories)} MiB; gpuplace places on nodes of one GPU kind")
    return SliceInventory(node, str(models.pop()), len(devices), memories.pop(),
                          tuple(str(_attribute(devices[i], "uuid", "string") or "") for i in sorted(devices)))


def _device_index(device: Json) -> int:
    name = str(device.get("name", ""))
    match = _DEVICE_NAME.fullmatch(name)
    if match is None:
        raise SliceError(f"device {name!r} is not named gpu-<index> as the NVIDIA DRA driver names GPUs "
                         "(MIG devices and others are not placed by gpuplace)")
    index = int(match.group(1))
    if _attribute(device, "index", "int") != index:
        raise SliceError(f"device {name}: attribute index is {_attribute(device, 'index', 'int')!r}, not {index}")
    if not device.get("allowMultipleAllocations"):
        raise SliceError(f"device {name} does not allow multiple allocations: gpuplace shares GPUs by memory "
                         "(consumable capacity, KEP-5075)")
    for unsupported in ("taints", "bindingConditions", "bindingFailureConditions", "consumesCounters",
                        "nodeName", "nodeSelector", "allNodes"):
        if device.get(unsupported):
            raise SliceError(f"device {name} has {unsupported}, which gpuplace does not handle")
    return index


def _attribute(device: Json, name: str, kind: str) -> Any:
    attributes = device.get("attributes") or {}
    value = attributes.get(name) or attributes.get(f"{DRIVER}/{name}") or {}
    return value.get(kind)


def _capacity_mib(device: Json) -> int:
    capacity = (device.get("capacity") or {}).get(MEMORY) or {}
    if (capacity.get("requestPolicy") or {}):
        raise SliceError(f"device {device['name']}: a memory requestPolicy (rounding of requests) is not handled")
    text = capacity.get("value")
    if text is None:
        raise SliceError(f"device {device['name']} publishes no memory capacity")
    value = _bytes(str(text), f"device {device['name']} memory capacity", SliceError)
    if value % _MIB or not 0 < value // _MIB <= MAX_MEMORY_MIB:
        raise SliceError(f"device {device['name']} memory capacity {text!r} is not a whole number of MiB "
                         f"in [1, {MAX_MEMORY_MIB}]")
    return value // _MIB


def _bytes(text: str, what: str, error: Callable[[str], Exception]) -> int:
    """A Quantity of bytes, exactly (rounded up to a byte)."""
    try:
        exact = quantity.value(text)
    except ValueError as exc:
        raise error(f"{what}: {exc}") from None
    return math.ceil(exact)


# -- claims -> requests ---------------------------------------------------------------------------------------
def claim_request(claim: Json) -> tuple[GpuRequest, DraClaim]:
    """What a pod gpuplace places asks through `claim`: a GPU request and the claim reference the binder needs.

    Understood: one request, `exactly`, deviceClassName gpu.nvidia.com, allocationMode ExactCount (count 1-64),
    optionally capacity.requests.memory (a share of each GPU; without it each GPU is taken whole, as the upstream
    allocator's fillEmptyRequest consumes the device's whole capacity). Anything else is a RequestError naming
    what is not supported."""
    meta, spec = claim.get("metadata") or {}, claim.get("spec") or {}
    name = meta.get("name", "?")
    devices = spec.get("devices") or {}
    requests = devices.get("requests") or []
    where = f"ResourceClaim {name}"
    if len(requests) != 1:
        raise RequestError(f"{where} has {len(requests)} device requests; gpuplace allocates claims of one request")
    if devices.get("constraints"):
        raise RequestError(f"{where}: device constraints (matchAttribute) are not supported by gpuplace")
    request = requests[0]
    if request.get("firstAvailable"):
        raise RequestError(f"{where}: firstAvailable (prioritized alternatives) is not supported by gpuplace")
    exactly = request.get("exactly")
    if not exactly:
        raise RequestError(f"{where}: request {request.get('name')!r} has no `exactly` device request")
    if exactly.get("deviceClassName") != DEVICE_CLASS:
        raise RequestError(f"{where}: device class {exactly.get('deviceClassName')!r}; gpuplace allocates "
                           f"{DEVICE_CLASS} only")
    mode = exactly.get("allocationMode") or "ExactCount"
    if mode != "ExactCount":
        raise RequestError(f"{where}: allocationMode {mode} is not supported by gpuplace (ExactCount only)")
    if exactly.get("adminAccess"):
        raise RequestError(f"{where}: adminAccess is not supported by gpuplace")
    if exactly.get("selectors"):
        raise RequestError(f"{where}: CEL selectors on device attributes are not supported by gpuplace")
    if exactly.get("tolerations"):
        raise RequestError(f"{where}: device tolerations are not supported by gpuplace")
    count = int(exactly.get("count") or 1)
    if not 1 <= count <= MAX_GPUS:
        raise RequestError(f"{where}: count {count} is not in [1, {MAX_GPUS}]")
    asked = dict(((exactly.get("capacity") or {}).get("requests")) or {})
    memory_text = asked.pop(MEMORY, None)
    if asked:
        raise RequestError(f"{where}: capacity {sorted(asked)} requested; gpu.nvidia.com GPUs offer {MEMORY} only")
    memory_mib = None
    if memory_text is not None:
        value = _bytes(str(memory_text), f"{where} capacity memory", RequestError)
        memory_mib = -(-value // _MIB)
        if not 1 <= memory_mib <= MAX_MEMORY_MIB:
            raise RequestError(f"{where}: memory {memory_text!r} is not in [1Mi, {MAX_MEMORY_MIB}Mi]")
    gpu = GpuRequest(gpu_count=count, memory_mib_per_gpu=memory_mib,
                     share_milli_per_gpu=None if memory_mib else 1000)
    ref = DraClaim(name=name, uid=meta["uid"], driver=DRIVER, request=request["name"],
                   memory=str(memory_text) if memory_text is not None else None)
    return gpu, ref


def allocated(claim: Json) -> DraClaim | None:
    """The node and GPUs an allocated claim holds (any allocator's), None when it is not allocated or holds no
    gpu.nvidia.com GPU. consumedCapacity.memory is rounded up to MiB; none means the whole device."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        return None
    found: list[DraDevice] = []
    node = None
    for result in (allocation.get("devices") or {}).get("results") or ():
        match = _DEVICE_NAME.fullmatch(str(result.get("device", "")))
        if result.get("driver") != DRIVER or match is None:
            continue
        node = result.get("pool")
        used = (result.get("consumedCapacity") or {}).get(MEMORY)
        memory = None
        if used is not None:
            try:
                memory = -(-_bytes(str(used), "consumed memory", ValueError) // _MIB)
            except ValueError:
                memory = None  # unreadable: charged whole, never less
        found.append(DraDevice(index=int(match.group(1)), memory_mib=memory))
    selected = _selected_node(allocation.get("nodeSelector"))
    node = selected or node
    if not found or not node:
        return None
    meta = claim.get("metadata") or {}
    return DraClaim(name=meta["name"], uid=meta["uid"], driver=DRIVER, node=node, devices=tuple(found))


def _selected_node(selector: Json | None) -> str | None:
    """The node of an allocation's nodeSelector as createNodeSelector writes it for a node-local slice."""
    for term in (selector or {}).get("nodeSelectorTerms") or ():
        for field in term.get("matchFields") or ():
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and \
                    len(field.get("values") or ()) == 1:
                return str(field["values"][0])
    return None


def reserved_for(claim: Json) -> list[str]:
    """The uids of the pods a claim is reserved for."""
    return [str(r.get("uid")) for r in (claim.get("status") or {}).get("reservedFor") or ()
            if r.get("resource") == "pods"]


# -- the allocation gpuplace writes ----------------------------------------------------------------------------
def allocation(claim: Json, node: str, gpu_indices: Sequence[int], gpu_memory_mib: int,
               device_class: Json | None = None) -> dict[str, Any]:
    """status.allocation for `claim` on `node`'s GPUs `gpu_indices`, as the upstream allocator writes it: each
    device consumes the claim's requested memory, or (none requested) its whole `gpu_memory_mib` capacity."""
    request = claim["spec"]["devices"]["requests"][0]
    asked = ((request.get("exactly") or {}).get("capacity") or {}).get("requests") or {}
    consumed = str(asked[MEMORY]) if MEMORY in asked else f"{gpu_memory_mib}Mi"
    results = [{"request": request["name"], "driver": DRIVER, "pool": node, "device": f"gpu-{index}",
                "shareID": str(uuid.uuid4()), "consumedCapacity": {MEMORY: consumed}}
               for index in gpu_indices]
    config = [{"source": "FromClass", "requests": [request["name"]], **c}
              for c in ((device_class or {}).get("spec") or {}).get("config") or ()]
    for item in (claim["spec"]["devices"].get("config") or ()):
        config.append({"source": "FromClaim", **item})
    devices: dict[str, Any] = {"results": results}
    if config:
        devices["config"] = config
    return {"devices": devices, "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}


def same_devices(current: Json, node: str, gpu_indices: Sequence[int]) -> bool:
    """Whether a claim's allocation is on `node` and exactly `gpu_indices` (gpuplace's own earlier write)."""
    held = allocated(current)
    return held is not None and held.node == node and sorted(d.index for d in held.devices) == sorted(gpu_indices)


def pod_reference(name: str, uid: str) -> dict[str, str]:
    """A status.reservedFor entry for a pod (ResourceClaimConsumerReference), as kube-scheduler writes it."""
    return {"resource": "pods", "name": name, "uid": uid}


__all__ = ["DRIVER", "DEVICE_CLASS", "FINALIZER", "API", "SliceError", "SliceInventory", "slice_inventory",
           "claim_request", "allocated", "reserved_for", "allocation", "same_devices", "pod_reference"]
