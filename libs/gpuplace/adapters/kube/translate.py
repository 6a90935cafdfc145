"""Kubernetes objects (as their JSON dicts) -> gpuplace events. Pure: no client, no clock.

The watcher hands every pod and node it sees to these functions; the result goes to Kafka unchanged.
A pod whose GPU request cannot be parsed still becomes a `pending` event, carrying `request_error`, so
the placement service reports it on the placements topic instead of it waiting silently.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal

from gpuplace.adapters.kube import dra, enforcement, hami, quantity
from gpuplace.adapters.kube.pod_requests import CPU, MEMORY, node_resources, pod_requests
from gpuplace.adapters.kube.pod_rules import rule_fields, unevaluated_fields
from gpuplace.adapters.kube.topology_labels import gpu_topology, warn_once
from gpuplace.adapters.kube.vocabulary import MIG_PREFIX, RequestError, gpu_resource, hami_request, parse_pod_request
from gpuplace.contracts.envelope import RESOURCE_MAX
from gpuplace.contracts.events import QUANTITY_MAX, NodeEvent, PodEvent

GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_MEMORY = "nvidia.com/gpu.memory"  # MiB per GPU, as GPU Feature Discovery writes it
GPU_COUNT = "nvidia.com/gpu.count"
NVIDIA_GPU = "nvidia.com/gpu"
PODS = "pods"  # allocatable pod slots (kubelet --max-pods)
MAX_NODE_COUNT = 2**31 - 1  # int32 columns downstream
MIB = 2**20

Json = Mapping[str, Any]
ClaimLookup = Callable[[str, str], "Json | None"]  # (namespace, name) -> the ResourceClaim, None if not seen yet


class ClaimPending(LookupError):
    """A pod's ResourceClaim is not created (or not seen) yet: the pod is published once it is."""


TERMINAL_PHASES = ("Succeeded", "Failed")


def pod_event(pod: Json, *, cluster: str, region: str, deleted: bool = False,
              scheduler_name: str = "gpuplace", claims: ClaimLookup | None = None,
              unenforced_sharing: bool = False) -> PodEvent:
    """One pod -> `pending`, `bound` or `deleted`, with its parsed GPU request or the parse error.

    A pod of another scheduler is `managed=False`; a pod that finished is `deleted` (it holds nothing).
    A pod with ResourceClaims (spec.resourceClaims) has them read through `claims` (_with_claims); one whose claim
    does not exist yet raises ClaimPending. A GPU share carries the enforcements that can confine it
    (enforcement.pod_needs), and `unenforced_sharing` (GPUPLACE_ALLOW_UNENFORCED_SHARING) when the operator lets it
    go where none does."""
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    annotations = meta.get("annotations") or {}
    containers = spec.get("containers") or []
    fields: dict[str, Any] = {}
    try:
        limits = [_limits_then_requests(c) for c in containers]
        request = parse_pod_request(annotations, limits)
        fields.update(gpu=request.gpu, deadline_ms=request.deadline_ms, frame_rate_hz=request.frame_rate_hz,
                      workload=request.workload, service_ms=request.service_ms, extended=request.extended,
                      hami=hami_request(limits, len(spec.get("initContainers") or ())))
    except RequestError as exc:
        fields["request_error"] = str(exc)
    requests = pod_requests(spec)
    cpu_milli, memory_mib = requests.pop(CPU, 0), -(-requests.pop(MEMORY, 0) // MIB)
    resources = {name: amount for name, amount in requests.items() if not gpu_resource(name)}
    for what, value, most in (("CPU", cpu_milli, QUANTITY_MAX), ("memory", memory_mib, QUANTITY_MAX),
                              *((name, amount, RESOURCE_MAX) for name, amount in resources.items())):
        if value > most:  # the apiserver takes up to 2^63-1; no node has it: reported, never stored
            fields.setdefault("request_error", f"{what} request {value} is beyond any node ({most} at most)")
    node_name = spec.get("nodeName")
    gone = deleted or meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES
    kind: Literal["pending", "bound", "deleted"] = "deleted" if gone else ("bound" if node_name else "pending")
    managed = (spec.get("schedulerName") or "default-scheduler") == scheduler_name
    nominated = (pod.get("status") or {}).get("nominatedNodeName") or None
    if spec.get("resourceClaims") and not gone and claims is not None:  # None: DRA not watched (as before it)
        fields, nominated = _with_claims(pod, fields, claims, managed=managed and not node_name,
                                         nominated=nominated)
    if managed and (needs := enforcement.pod_needs(fields.get("gpu"), fields.get("hami"),
                                                   bool(fields.get("dra_claims")))):
        fields.update(gpu_enforcement=needs, unenforced_sharing=unenforced_sharing)
    return PodEvent(
        cluster=cluster, region=region, kind=kind,
        namespace=meta["namespace"], name=meta["name"], uid=meta["uid"],
        priority=int(spec.get("priority") or 0),
        cpu_milli=min(cpu_milli, QUANTITY_MAX), memory_mib=min(memory_mib, QUANTITY_MAX),
        resources={name: min(amount, RESOURCE_MAX) for name, amount in resources.items()},
        node_name=node_name, owner=_owner(meta), created_at=_time(meta.get("creationTimestamp")),
        managed=managed, **rule_fields(spec), nominated_node_name=nominated,
        unevaluated=unevaluated_fields(spec)[:16] if managed else (),
        **fields,
    )


def claim_names(pod: Json) -> list[str] | None:
    """The names of the ResourceClaims a pod uses: resourceClaimName, or for a template the claim the
    resourceclaim controller created (pod.status.resourceClaimStatuses); None while one is not created yet. A
    template status without a claim name means no claim is needed (the controller's "nil" entry)."""
    statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()}
    names = []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or ():
        if ref.get("resourceClaimName"):
            names.append(str(ref["resourceClaimName"]))
        elif ref.get("name") not in statuses:
            return None
        elif statuses[ref["name"]].get("resourceClaimName"):
            names.append(str(statuses[ref["name"]]["resourceClaimName"]))
    return names


def _with_claims(pod: Json, fields: dict[str, Any], claims: ClaimLookup, *, managed: bool,
                 nominated: str | None) -> tuple[dict[str, Any], str | None]:
    """A pod's claims folded into its event's fields (dra_claims, gpu, request_error) and its nominated node.

    A pod gpuplace places (pending, `managed`) must use one claim it understands (adapters/kube/dra.claim_request),
    not allocated for anyone else, and no other GPU request. Any other pod is charged on the GPUs its allocated
    claims hold: where they are allocated, before the pod is bound (kube-scheduler allocates a claim, then binds;
    in between the capacity is taken already)."""
    meta = pod["metadata"]
    names = claim_names(pod)
    found = [claims(meta["namespace"], n) for n in names] if names is not None else [None]
    if names is None or any(c is None for c in found):
        raise ClaimPending(f"pod {meta['namespace']}/{meta['name']}: ResourceClaim not created yet")
    objects = [c for c in found if c is not None]
    fields = dict(fields)
    if not managed:
        holding = [a for a in (dra.allocated(c) for c in objects) if a is not None]
        fields["dra_claims"] = tuple(holding)
        if "gpu" not in fields or fields.get("gpu") is None:
            fields.pop("request_error", None)
            with contextlib.suppress(RequestError):
                fields["gpu"] = dra.claim_request(objects[0])[0] if len(objects) == 1 else None
        return fields, nominated or (holding[0].node if holding else None)
    if "request_error" in fields:
        return fields, nominated
    try:
        if fields.get("gpu") is not None:
            raise RequestError("GPUs asked both through a ResourceClaim and through resources or annotations")
        if len(objects) != 1:
            raise RequestError(f"{len(objects)} ResourceClaims; gpuplace allocates pods with one")
        claim = objects[0]
        gpu, ref = dra.claim_request(claim)
        held = dra.allocated(claim)
        if (claim.get("status") or {}).get("allocation"):
            if held is None or meta["uid"] not in dra.reserved_for(claim):
                raise RequestError(f"ResourceClaim {ref.name} is allocated already (for other pods); gpuplace "
                                   "places a pod with a claim it allocates itself")
            ref = ref.model_copy(update={"node": held.node, "devices": held.devices})
    except RequestError as exc:
        fields["request_error"] = str(exc)
        return fields, nominated
    fields.update(gpu=gpu, dra_claims=(ref,))
    return fields, nominated


def node_event(node: Json, *, cluster: str, region: str, deleted: bool = False,
               inventory: dra.SliceInventory | None = None) -> NodeEvent:
    """One node -> its GPU inventory from GPU Feature Discovery labels and allocatable `nvidia.com/gpu`.

    A node HAMi's device plugin registered (hami.io/node-nvidia-register, adapters/kube/hami.py) is read as HAMi
    reads it instead: its allocatable `nvidia.com/gpu` counts shares (GPUs x deviceSplitCount), so the GPUs are
    the registered HAMi-core devices, each with the smallest registered memory; the model is the GFD label, else
    the registered type. A registration that does not decode is a `ValueError` (the event is not sent).
    Allocatable `pods` becomes `max_pods` (None when the node does not say) and allocatable
    `nvidia.com/mig-<profile>` counts (the device plugin's mixed strategy) become `extended`. The GPU topology
    labels (topology_labels.py) become `gpu_numa` and `gpu_nvlink`; a bad one is left out, with a warning logged.
    What confines a pod to a GPU share there is `gpu_enforcement` (enforcement.node_has).
    """
    meta, spec, status = node.get("metadata", {}), node.get("spec", {}), node.get("status", {})
    labels = meta.get("labels") or {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    gpus = quantity.count(str(allocatable.get(NVIDIA_GPU, labels.get(GPU_COUNT, "0"))))
    model, gpu_memory = labels.get(GPU_PRODUCT), quantity.count(labels.get(GPU_MEMORY, "0"))
    registered = hami.registered_devices(meta.get("annotations") or {})
    if registered is not None:
        gpus = len(registered)
        gpu_memory = min((d.memory_mib for d in registered), default=0)
        model = model or (registered[0].type if registered else None)
    topology = gpu_topology(labels, gpus)
    for problem in topology.problems:
        warn_once(meta["name"], problem)
    driver = None
    if inventory is not None:  # the DRA driver's ResourceSlice describes the GPUs (adapters/kube/dra.py)
        model, gpus, gpu_memory, driver = inventory.model, inventory.count, inventory.memory_mib, dra.DRIVER
        topology = replace(topology, numa=topology.numa if len(topology.numa) == gpus else (),
                           nvlink=topology.nvlink if len(topology.nvlink) == gpus else ())
    extended = {k: _node_count(allocatable, k) for k in sorted(allocatable) if k.startswith(MIG_PREFIX)}
    return NodeEvent(
        cluster=cluster, region=region, kind="deleted" if deleted else "upsert",
        name=meta["name"],
        cpu_milli=quantity.milli(str(allocatable.get("cpu", "0"))),
        memory_mib=quantity.memory_mib(str(allocatable.get("memory", "0")), bare_unit_mib=False),
        gpu_model=model, gpu_count=gpus, gpu_memory_mib=gpu_memory, dra_driver=driver,
        ready=_ready(status), unschedulable=bool(spec.get("unschedulable")),
        labels=dict(labels),
        taints=tuple(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in spec.get("taints") or []),
        max_pods=_node_count(allocatable, PODS) if PODS in allocatable else None,
        extended=extended,
        resources={name: min(amount, RESOURCE_MAX) for name, amount in sorted(node_resources(allocatable).items())
                   if name not in (CPU, MEMORY) and not gpu_resource(name)},
        gpu_numa=topology.numa, gpu_nvlink=topology.nvlink,
        gpu_enforcement=enforcement.node_has(labels, dra=driver is not None, hami=registered is not None,
                                             mig=bool(extended)),
    )


def _limits_then_requests(container: Json) -> dict[str, str]:
    """GPU resources as HAMi's GenerateResourceRequests reads them: the limit, else the request.

    For extended resources Kubernetes requires the limit and makes the request equal to it, so this differs
    from the requests (pod_requests) only for CPU and memory, which the vocabulary does not read.
    """
    resources = container.get("resources") or {}
    return {k: str(v) for k, v in {**(resources.get("requests") or {}), **(resources.get("limits") or {})}.items()}


def _node_count(allocatable: Json, key: str) -> int:
    """A whole allocatable count ("110", "7"); anything else or beyond int32 is a `ValueError` naming the key."""
    count = quantity.count(str(allocatable[key]))
    if count > MAX_NODE_COUNT:
        raise ValueError(f"allocatable {key} out of range: {allocatable[key]!r}")
    return count


def _owner(meta: Json) -> str | None:
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{ref['kind']}/{ref['name']}"
    return None


def _ready(status: Json) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


__all__ = ["pod_event", "node_event", "claim_names", "ClaimPending", "ClaimLookup",
           "GPU_PRODUCT", "GPU_MEMORY", "GPU_COUNT", "NVIDIA_GPU"]
