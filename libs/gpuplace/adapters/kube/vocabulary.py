"""GPU requests in every vocabulary users already write -> one `GpuRequest` and MIG counts, or a `RequestError`.

Pure and Kubernetes-shaped (DESIGN §3). Each vocabulary is read the way its owner reads it; the rule mirrored
is cited where it is applied. At most one of gpuplace, HAMi and KAI per pod:

    key                            unit, as its owner reads it                         -> gpuplace
  gpuplace annotations
    gpuplace.io/gpu-memory         quantity: bare number MiB; Ki/Mi/Gi, k/M/G are bytes  -> memory_mib_per_gpu, ceil
    gpuplace.io/gpu-compute        quantity of one GPU, "300m" = "0.3"                  -> share_milli_per_gpu
    gpuplace.io/gpu-count          count, default 1                                     -> gpu_count
    gpuplace.io/gpu-models         "A100|H100"                                          -> allowed_models
    gpuplace.io/gpu-topology       "preferred" (default) or "required", any vocabulary  -> topology
  HAMi container resources (limits, else requests)
    nvidia.com/gpumem              whole MiB, Quantity.AsInt64: "5k" = 5000 MiB         -> memory_mib_per_gpu
    nvidia.com/gpumem-percentage   whole percent of each GPU's memory, 1-100            -> share = percent x 10
    nvidia.com/gpucores            whole percent of each GPU's compute, 0-100           -> share = percent x 10
    nvidia.com/gpu                 count, default 1                                     -> gpu_count
  KAI annotations
    gpu-fraction                   decimal in (0, 1), strconv.ParseFloat                -> share, ceil to milli
    gpu-memory                     positive integer MiB, strconv.ParseUint              -> memory_mib_per_gpu
    gpu-fraction-num-devices       positive integer, strconv.ParseUint                  -> gpu_count
  whole GPUs
    nvidia.com/gpu                 count, summed over containers                        -> gpu_count, share 1000
  MIG slices (NVIDIA device plugin, mig-strategy=mixed), alone or beside whole GPUs
    nvidia.com/mig-<profile>       count, summed over containers                        -> extended[key]

HAMi's defaults are its chart's (`defaultMemory: 0`, `defaultCores: 0`, `defaultGPUNum: 1`, `memoryFactor: 1`):
without `gpumem` or `gpumem-percentage` a HAMi GPU gets all of its memory, i.e. the whole GPU. gpuplace keeps one
share per GPU, so a HAMi request with a percentage and `gpucores` is charged at the larger of the two.

`gpuplace.io/gpu-topology` says how a multi-GPU pod treats the node's GPU topology (core/topology.py): `preferred`
places its GPUs in one NUMA node and NVLink domain when they fit there, `required` waits for a node where they do.
Like gpu-models it goes with a GPU request of any vocabulary; for one GPU it changes nothing.

Every value is checked before it is used: one that does not parse, is negative, zero where zero means nothing,
a percent above 100, memory above 2**31-1 MiB (HAMi's int32 bound) or a count above 64 is a `RequestError` naming
the key and the text. A pod mixing vocabularies is one too: a wrong guess would place it on a GPU it cannot use.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Context, Decimal
from typing import Literal

from pydantic import ValidationError

from gpuplace.adapters.kube import quantity
from gpuplace.contracts.events import GpuRequest, HamiRequest

GPUPLACE_MEMORY = "gpuplace.io/gpu-memory"
GPUPLACE_COUNT = "gpuplace.io/gpu-count"
GPUPLACE_COMPUTE = "gpuplace.io/gpu-compute"
GPUPLACE_MODELS = "gpuplace.io/gpu-models"
GPUPLACE_TOPOLOGY = "gpuplace.io/gpu-topology"
TOPOLOGIES = ("preferred", "required")
DEADLINE = "gpuplace.io/deadline-ms"
FRAME_RATE = "gpuplace.io/frame-rate"
WORKLOAD = "gpuplace.io/workload"
SERVICE_MS = "gpuplace.io/service-ms"  # per-frame time alone on an H100-class GPU, as profiled
ASSIGNMENT = "gpuplace.io/gpu-assignment"

KAI_FRACTION = "gpu-fraction"
KAI_FRACTION_DEVICES = "gpu-fraction-num-devices"
KAI_MEMORY = "gpu-memory"

NVIDIA_GPU = "nvidia.com/gpu"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_CORES = "nvidia.com/gpucores"
MIG_PREFIX = "nvidia.com/mig-"  # NVIDIA k8s-device-plugin, mig-strategy=mixed: nvidia.com/mig-1g.10gb

MAX_GPUS = 64  # GpuRequest.gpu_count's bound
MAX_MEMORY_MIB = 2**31 - 1  # HAMi rejects more (int32); keeps NumPy and int32 columns downstream safe
MAX_EXTENDED = 64

def gpu_resource(name: str) -> bool:
    """Whether a container resource is one of the GPU vocabularies above (read by gpuplace's GPU model, not
    compared with the node's allocatable as another resource)."""
    return name in (NVIDIA_GPU, *_HAMI_KEYS) or name.startswith(MIG_PREFIX)


_GPUPLACE_KEYS = (GPUPLACE_MEMORY, GPUPLACE_COUNT, GPUPLACE_COMPUTE)
_KAI_KEYS = (KAI_FRACTION, KAI_MEMORY, KAI_FRACTION_DEVICES)
_HAMI_KEYS = (HAMI_MEMORY, HAMI_MEMORY_PERCENT, HAMI_CORES)
_GO_UINT = re.compile(r"[0-9]+")  # strconv.ParseUint(s, 10, 64): ASCII digits only, no sign, no space
_GO_DECIMAL_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # hex floats refused
_EXACT = Context(prec=100)  # a 60-character decimal, scaled by 1000, loses no digit


class RequestError(ValueError):
    """A pod's GPU request (or deadline annotations) could not be understood."""


@dataclass(frozen=True)
class PodRequest:
    """What one pod asks of gpuplace: GPUs (None for none), MIG slices by resource name, its latency contract."""

    gpu: GpuRequest | None
    deadline_ms: float | None = None
    frame_rate_hz: float | None = None
    workload: str | None = None
    service_ms: float | None = None
    extended: dict[str, int] = field(default_factory=dict)


def parse_pod_request(annotations: Mapping[str, str], container_limits: Sequence[Mapping[str, str]]) -> PodRequest:
    """Parse a pod's annotations and its containers' GPU resources; raise `RequestError` with the reason.

    `container_limits` holds each container's resources, limits over requests (HAMi reads limits, then requests).
    """
    containers = [{k: str(v) for k, v in c.items()} for c in container_limits]
    try:
        extended = _mig_profiles(containers)
        return PodRequest(
            gpu=_parse_gpu(annotations, containers, extended),
            deadline_ms=_positive(annotations, DEADLINE),
            frame_rate_hz=_positive(annotations, FRAME_RATE),
            workload=annotations.get(WORKLOAD) or None,
            service_ms=_positive(annotations, SERVICE_MS),
            extended=extended,
        )
    except RequestError:
        raise
    except ValidationError as exc:
        raise RequestError("; ".join(err["msg"] for err in exc.errors())) from exc
    except ValueError as exc:
        raise RequestError(str(exc)) from exc


def _parse_gpu(annotations: Mapping[str, str], containers: list[dict[str, str]],
               extended: dict[str, int]) -> GpuRequest | None:
    used = [name for name, present in (
        ("gpuplace", any(k in annotations for k in _GPUPLACE_KEYS)),
        ("KAI", any(k in annotations for k in _KAI_KEYS)),
        ("HAMi", any(k in c for c in containers for k in _HAMI_KEYS)),
    ) if present]
    if len(used) > 1:
        raise RequestError(f"GPU request written in more than one vocabulary: {', '.join(used)}")
    if used and extended:
        raise RequestError(f"MIG slices ({', '.join(sorted(extended))}) together with a {used[0]} GPU request: "
                           "a MIG slice is a device of its own; ask for one or the other")
    whole_gpu = any(NVIDIA_GPU in c for c in containers)
    if used and used[0] == "gpuplace" and whole_gpu:
        raise RequestError(f"gpuplace GPU annotations together with a {NVIDIA_GPU} limit")
    models = _models(annotations)
    topology = _topology(annotations)
    if not used:
        request = _whole(containers, models)
    elif used[0] == "KAI":
        request = _kai(annotations, whole_gpu, models)
    elif used[0] == "HAMi":
        request = _hami(containers, models)
    else:
        request = _gpuplace(annotations, models)
    if topology is None:
        return request
    if request is None:
        raise RequestError(f"{GPUPLACE_TOPOLOGY} given without any GPU request")
    return request.model_copy(update={"topology": topology})


def _topology(annotations: Mapping[str, str]) -> Literal["preferred", "required"] | None:
    raw = annotations.get(GPUPLACE_TOPOLOGY)
    if raw is None:
        return None
    if raw == "preferred":
        return "preferred"
    if raw == "required":
        return "required"
    raise RequestError(f"{GPUPLACE_TOPOLOGY} must be one of {', '.join(TOPOLOGIES)}, got {raw!r}")


def _models(annotations: Mapping[str, str]) -> tuple[str, ...]:
    raw = annotations.get(GPUPLACE_MODELS, "")
    return tuple(m.strip() for m in raw.replace(",", "|").split("|") if m.strip())


def _whole(containers: list[dict[str, str]], models: tuple[str, ...]) -> GpuRequest | None:
    total = sum(_count(NVIDIA_GPU, c[NVIDIA_GPU], 0, MAX_GPUS) for c in containers if NVIDIA_GPU in c)
    if total > MAX_GPUS:
        raise RequestError(f"{NVIDIA_GPU} adds up to {total} over the containers, more than {MAX_GPUS}")
    if total == 0:
        if models:
            raise RequestError(f"{GPUPLACE_MODELS} given without any GPU request")
        return None
    return GpuRequest(gpu_count=total, share_milli_per_gpu=1000, allowed_models=models)


def _gpuplace(annotations: Mapping[str, str], models: tuple[str, ...]) -> GpuRequest:
    gpus = _count(GPUPLACE_COUNT, annotations.get(GPUPLACE_COUNT, "1"), 1, MAX_GPUS)
    memory, compute = annotations.get(GPUPLACE_MEMORY), annotations.get(GPUPLACE_COMPUTE)
    if memory is None and compute is None:
        return GpuRequest(gpu_count=gpus, share_milli_per_gpu=1000, allowed_models=models)
    memory_mib = share = None
    if memory is not None:  # quantity.memory_mib: "9420Mi", "9.2Gi" (rounded up), bare "9420" = MiB
        memory_mib = _quantity(GPUPLACE_MEMORY, memory, quantity.memory_mib, 1, MAX_MEMORY_MIB)
    if compute is not None:  # "300m" or "0.3" of one GPU
        share = _quantity(GPUPLACE_COMPUTE, compute, quantity.milli, 1, 1000)
    return _request("gpuplace", gpus, memory_mib, share, models)


def _kai(annotations: Mapping[str, str], whole_gpu: bool, models: tuple[str, ...]) -> GpuRequest:
    # KAI pkg/binder/plugins/gpusharing/gpu-request/gpu_request_validator.go ValidateGpuRequests (admission)
    fraction, memory = annotations.get(KAI_FRACTION), annotations.get(KAI_MEMORY)
    if fraction is not None and whole_gpu:
        raise RequestError(f"KAI {KAI_FRACTION} together with a {NVIDIA_GPU} limit")
    if memory is not None and (fraction is not None or whole_gpu):
        raise RequestError(f"KAI {KAI_MEMORY} together with {KAI_FRACTION} or a {NVIDIA_GPU} limit")
    if fraction is None and memory is None:
        raise RequestError(f"KAI {KAI_FRACTION_DEVICES} without {KAI_FRACTION} or {KAI_MEMORY}")
    devices = 1
    if KAI_FRACTION_DEVICES in annotations:
        devices = _go_uint(KAI_FRACTION_DEVICES, annotations[KAI_FRACTION_DEVICES], MAX_GPUS)
    if memory is not None:
        return _request("KAI", devices, _go_uint(KAI_MEMORY, memory, MAX_MEMORY_MIB), None, models)
    return _request("KAI", devices, None, _kai_fraction_milli(annotations[KAI_FRACTION]), models)


def _kai_fraction_milli(text: str) -> int:
    """KAI validateGpuFractionAnnotation: strconv.ParseFloat, then 0 < f < 1; in milli, rounded up."""
    if len(text) > 60 or not _GO_DECIMAL_FLOAT.fullmatch(text):
        raise RequestError(f"{KAI_FRACTION} must be a decimal number in (0, 1), got {text!r}")
    if not 0 < float(text) < 1:  # float64, as Go: "1e-400" underflows to 0 and is refused
        raise RequestError(f"{KAI_FRACTION} must be in (0, 1), got {text!r}")
    return int(Decimal(text).scaleb(3, _EXACT).to_integral_value(rounding=ROUND_CEILING))


def _go_uint(key: str, text: str, most: int) -> int:
    """KAI validateMemoryAnnotation / validateMultiFractionRequest: strconv.ParseUint(s, 10, 64), then > 0."""
    if not _GO_UINT.fullmatch(text):
        raise RequestError(f"{key} must be a positive integer, got {text!r}")
    return _in_range(key, text, int(text), 1, most)


def _hami(containers: list[dict[str, str]], models: tuple[str, ...]) -> GpuRequest:
    gpus, memory, percent, cores = _hami_numbers(containers)[1:]
    if memory is not None:  # Fit: a positive Memreq wins; MemPercentagereq applies only when Memreq == 0
        return _request("HAMi", gpus, memory, cores * 10 or None, models)
    # no gpumem: Totalmem * percent / 100, and percent is 100 without one (defaultMemory 0)
    return _request("HAMi", gpus, None, max(percent or 100, cores) * 10, models)


def _hami_numbers(containers: list[dict[str, str]]) -> tuple[int, int, int | None, int | None, int]:
    """The carrier container's index, then GPUs, gpumem MiB, gpumem-percentage and gpucores as HAMi's scheduler
    sees them once its webhook has run (defaults filled in)."""
    # HAMi pkg/device/nvidia/device.go: MutateAdmission (webhook) then GenerateResourceRequests and Fit (scheduler)
    carriers = [i for i, c in enumerate(containers) if any(k in c for k in (NVIDIA_GPU, *_HAMI_KEYS))]
    if len(carriers) > 1:
        raise RequestError("HAMi GPU resources on more than one container: HAMi gives each its own GPUs, "
                           "gpuplace places one GPU set per pod")
    ctr = containers[carriers[0]]
    # mutateContainerResource: a HAMi key without nvidia.com/gpu gets defaultGPUNum (1)
    gpus = _count(NVIDIA_GPU, ctr[NVIDIA_GPU], 1, MAX_GPUS) if NVIDIA_GPU in ctr else 1
    # GenerateResourceRequests: MiB, above MaxInt32 rejected; 0 would mean "unset", refused here
    memory = _hami_int(ctr, HAMI_MEMORY, 1, MAX_MEMORY_MIB)
    # validateMemoryPercentage refuses above 100; GenerateResourceRequests drops 0 as "unset", refused here
    percent = _hami_int(ctr, HAMI_MEMORY_PERCENT, 1, 100)
    cores = _hami_int(ctr, HAMI_CORES, 0, 100)  # Fit clamps above 100 to 100 with an error log; refused here
    if cores is None:  # defaultExclusiveCoreIfNeeded: 100 when the GPU's memory is all taken, else defaultCores 0
        exclusive = percent == 100 if percent is not None else memory is None
        cores = 100 if exclusive else 0
    return carriers[0], gpus, memory, percent, cores


def hami_request(container_limits: Sequence[Mapping[str, str]], init_containers: int) -> HamiRequest | None:
    """A HAMi-vocabulary pod's request per HAMi container (None for any other pod), for HAMi's bind annotations.

    Call it on a pod `parse_pod_request` accepted: the carrier container's place counts the pod's init containers
    first (HAMi pkg/device/devices.go Resourcereqs), and memory is gpumem MiB or else a percentage, 100 without
    one (pkg/device/nvidia/device.go GenerateResourceRequests with defaultMemory 0, then Fit)."""
    containers = [{k: str(v) for k, v in c.items()} for c in container_limits]
    if not any(k in c for c in containers for k in _HAMI_KEYS):
        return None
    index, gpus, memory, percent, cores = _hami_numbers(containers)
    return HamiRequest(position=init_containers + index, containers=init_containers + len(containers),
                       gpu_count=gpus, memory_mib=memory, memory_percent=None if memory else percent or 100,
                       cores=cores)


def _hami_int(container: Mapping[str, str], key: str, least: int, most: int) -> int | None:
    """A HAMi resource as GenerateResourceRequests reads it, `Quantity.AsInt64`: "5k" = 5000, "1.5" refused."""
    if key not in container:
        return None
    return _count(key, container[key], least, most)


def _mig_profiles(containers: list[dict[str, str]]) -> dict[str, int]:
    """`nvidia.com/mig-<profile>` counts summed over containers; a zero request is none (kube fitsRequest)."""
    totals: dict[str, int] = {}
    for container in containers:
        for key, text in container.items():
            if key.startswith(MIG_PREFIX):
                totals[key] = totals.get(key, 0) + _count(key, text, 0, MAX_EXTENDED)
    for key, total in totals.items():
        if total > MAX_EXTENDED:
            raise RequestError(f"{key} adds up to {total} over the containers, more than {MAX_EXTENDED}")
    return {key: total for key, total in sorted(totals.items()) if total}


def _request(source: str, gpus: int, memory_mib: int | None, share: int | None,
             models: tuple[str, ...]) -> GpuRequest:
    if gpus > 1 and share not in (None, 1000):
        raise RequestError(f"{source}: {share} milli of each of {gpus} GPUs; gpuplace shares a GPU only in a "
                           "single-GPU request (ask for memory instead, or one GPU)")
    return GpuRequest(gpu_count=gpus, memory_mib_per_gpu=memory_mib, share_milli_per_gpu=share,
                      allowed_models=models)


def _count(key: str, text: str, least: int, most: int) -> int:
    """A whole number as `Quantity.AsInt64` reads it: "2" -> 2, "5k" -> 5000; "1.5" and "500m" refused."""
    return _quantity(key, text, quantity.count, least, most)


def _quantity(key: str, text: str, parse: Callable[[str], int], least: int, most: int) -> int:
    try:
        value = parse(text)
    except ValueError as exc:
        raise RequestError(f"{key}: {exc}") from None
    return _in_range(key, text, value, least, most)


def _in_range(key: str, text: str, value: int, least: int, most: int) -> int:
    if not least <= value <= most:
        raise RequestError(f"{key} must be in [{least}, {most}], got {text!r}")
    return value


# What a perception stream can physically be (issue 40: `frame-rate: 1e308` was accepted): a camera or sensor at up to
# 10 kHz, a deadline and a per-frame time of up to an hour. Beyond that the value is a typo or an attack, and the
# latency model's sums (rate x time) would overflow or swamp every co-runner.
LATENCY_BOUNDS = {FRAME_RATE: (10_000.0, "Hz"), DEADLINE: (3_600_000.0, "ms"), SERVICE_MS: (3_600_000.0, "ms")}


def _positive(annotations: Mapping[str, str], key: str) -> float | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise RequestError(f"{key} is not a number: {raw[:64]!r}") from None
    if not value > 0 or math.isinf(value):
        raise RequestError(f"{key} must be a positive number, got {raw[:64]!r}")
    most, unit = LATENCY_BOUNDS[key]
    if value > most:
        raise RequestError(f"{key} {raw[:64]!r} is beyond any perception stream (at most {most:g} {unit})")
    return value


__all__ = ["PodRequest", "RequestError", "parse_pod_request", "hami_request", "ASSIGNMENT", "GPUPLACE_TOPOLOGY",
           "DEADLINE", "FRAME_RATE", "WORKLOAD", "SERVICE_MS", "MIG_PREFIX", "MAX_GPUS", "MAX_MEMORY_MIB",
           "MAX_EXTENDED", "gpu_resource"]
