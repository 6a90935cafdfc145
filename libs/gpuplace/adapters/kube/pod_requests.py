"""What a pod asks of a node, per resource, as kube-scheduler's NodeResourcesFit counts it. Pure.

kube-scheduler (v1.37) computes a pod's requests with component-helpers `resource.PodRequests`
(staging/src/k8s.io/component-helpers/resource/helpers.go), and this module does the same, step by step:
- the app containers' requests, summed;
- init containers in order: a sidecar (`restartPolicy: Always`) runs beside the app containers, so its requests
  are added to the sum and to every later init container's; a plain init container needs its own requests plus
  the sidecars started before it; the pod needs the largest of these if it is more than the sum;
- pod-level requests (`spec.resources.requests`, PodLevelResources) replace that total for the resources they
  name that pod level supports (cpu, memory, hugepages-*);
- the pod's overhead (RuntimeClass) is added.
Each container's requests are read as the apiserver stores them: limits where no request is given (API defaulting).

Then, as `framework.NewResource` reads the list: CPU in milli-units rounded up (`MilliValue`), everything else in
its base unit rounded up (`Value`: bytes for memory, ephemeral-storage and hugepages, units for extended
resources). Only the resources NodeResourcesFit checks are kept (`fits_checked`): cpu, memory, ephemeral-storage
and the scalar resources (extended `domain/name` resources, `kubernetes.io/` prefixed ones, hugepages-*,
attachable-volumes-*).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from gpuplace.adapters.kube import quantity

Json = Mapping[str, Any]
CPU, MEMORY, PODS, EPHEMERAL_STORAGE = "cpu", "memory", "pods", "ephemeral-storage"
HUGEPAGES_PREFIX = "hugepages-"
ATTACHABLE_VOLUMES_PREFIX = "attachable-volumes-"
SIDECAR = "Always"  # an init container's restartPolicy that makes it a sidecar


def pod_requests(spec: Json) -> dict[str, int]:
    """The pod's requests by resource name (cpu in milli, the rest in base units), the resources NodeResourcesFit
    checks only, zeros left out. A quantity that does not parse is a `ValueError` naming it."""
    total = _sum(_requests(c) for c in spec.get("containers") or ())
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for container in spec.get("initContainers") or ():
        own = _requests(container)
        if container.get("restartPolicy") == SIDECAR:
            _add(total, own)
            _add(sidecars, own)
            needs = dict(sidecars)
        else:
            needs = _sum((own, sidecars))
        _max(init_peak, needs)
    _max(total, init_peak)
    pod_level = {k: quantity.value(str(v)) for k, v in
                 ((spec.get("resources") or {}).get("requests") or {}).items() if _pod_level(k)}
    total.update(pod_level)
    _add(total, {k: quantity.value(str(v)) for k, v in (spec.get("overhead") or {}).items()})
    return {name: amount for name, exact in total.items()
            if fits_checked(name) and (amount := _rounded_up(name, exact)) > 0}


def node_resources(allocatable: Json) -> dict[str, int]:
    """A node's allocatable resources in the units of `pod_requests` (framework.NewResource of
    node.status.allocatable), the resources NodeResourcesFit checks only."""
    return {name: _rounded_up(name, quantity.value(str(v))) for name, v in allocatable.items() if fits_checked(name)}


def fits_checked(name: str) -> bool:
    """Whether NodeResourcesFit compares `name` with the node's allocatable (framework.Resource.Add): cpu, memory,
    ephemeral-storage, or a scalar resource (schedutil.IsScalarResourceName)."""
    return name in (CPU, MEMORY, EPHEMERAL_STORAGE) or "/" in name or name.startswith(HUGEPAGES_PREFIX) \
        or name.startswith(ATTACHABLE_VOLUMES_PREFIX)


def _requests(container: Json) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {k: quantity.value(str(v)) for k, v in merged.items()}


def _pod_level(name: str) -> bool:
    # component-helpers IsSupportedPodLevelResource
    return name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)


def _rounded_up(name: str, exact: Decimal) -> int:
    return math.ceil(exact * 1000) if name == CPU else math.ceil(exact)


def _sum(lists: Iterable[Mapping[str, Decimal]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for one in lists:
        _add(total, one)
    return total


def _add(into: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, Decimal(0)) + amount


def _max(into: dict[str, Decimal], other: Mapping[str, Decimal]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, Decimal(0)):
            into[name] = amount


__all__ = ["pod_requests", "node_resources", "fits_checked", "CPU", "MEMORY", "EPHEMERAL_STORAGE"]
