"""GPU requests in every vocabulary users already write -> one `GpuRequest`, or a `RequestError`.

Pure and Kubernetes-shaped (DESIGN §3). Accepted vocabularies, exactly one per pod:

- gpuplace annotations: `gpuplace.io/gpu-memory: 9420Mi`, `gpuplace.io/gpu-count: 2`,
  `gpuplace.io/gpu-compute: 300m`, `gpuplace.io/gpu-models: V100|A100`;
- HAMi resources in container limits: `nvidia.com/gpumem` (MiB per GPU), `nvidia.com/gpucores` (percent of
  one GPU), with `nvidia.com/gpu` as the count;
- KAI annotations: `gpu-fraction: "0.5"` (with `gpu-fraction-num-devices`), `gpu-memory: "2000"` (MiB);
- whole GPUs: `nvidia.com/gpu: 2` in container limits.

A pod mixing vocabularies, or writing a value that does not parse, is reported with the reason, never
guessed: a wrong guess would place it on a GPU it cannot use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from gpuplace.adapters.kube import quantity
from gpuplace.contracts.events import GpuRequest

GPUPLACE_MEMORY = "gpuplace.io/gpu-memory"
GPUPLACE_COUNT = "gpuplace.io/gpu-count"
GPUPLACE_COMPUTE = "gpuplace.io/gpu-compute"
GPUPLACE_MODELS = "gpuplace.io/gpu-models"
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
HAMI_CORES = "nvidia.com/gpucores"

_GPUPLACE_KEYS = (GPUPLACE_MEMORY, GPUPLACE_COUNT, GPUPLACE_COMPUTE)
_KAI_KEYS = (KAI_FRACTION, KAI_MEMORY)


class RequestError(ValueError):
    """A pod's GPU request (or deadline annotations) could not be understood."""


@dataclass(frozen=True)
class PodRequest:
    """What one pod asks of gpuplace: GPUs (None for none) and its latency contract."""

    gpu: GpuRequest | None
    deadline_ms: float | None = None
    frame_rate_hz: float | None = None
    workload: str | None = None
    service_ms: float | None = None


def parse_pod_request(annotations: Mapping[str, str], container_limits: Sequence[Mapping[str, str]]) -> PodRequest:
    """Parse a pod's annotations and its containers' resource limits; raise `RequestError` with the reason."""
    try:
        gpu = _parse_gpu(annotations, _sum_limits(container_limits))
        return PodRequest(
            gpu=gpu,
            deadline_ms=_positive(annotations, DEADLINE),
            frame_rate_hz=_positive(annotations, FRAME_RATE),
            workload=annotations.get(WORKLOAD) or None,
            service_ms=_positive(annotations, SERVICE_MS),
        )
    except RequestError:
        raise
    except ValidationError as exc:
        raise RequestError("; ".join(err["msg"] for err in exc.errors())) from exc
    except ValueError as exc:
        raise RequestError(str(exc)) from exc


def _sum_limits(container_limits: Sequence[Mapping[str, str]]) -> dict[str, list[str]]:
    """Collect each GPU resource's values over the containers (the pod asks for their union)."""
    limits: dict[str, list[str]] = {}
    for container in container_limits:
        for key in (NVIDIA_GPU, HAMI_MEMORY, HAMI_CORES):
            if key in container:
                limits.setdefault(key, []).append(str(container[key]))
    return limits


def _parse_gpu(annotations: Mapping[str, str], limits: dict[str, list[str]]) -> GpuRequest | None:
    used = [
        name
        for name, present in (
            ("gpuplace", any(k in annotations for k in _GPUPLACE_KEYS)),
            ("kai", any(k in annotations for k in _KAI_KEYS)),
            ("hami", HAMI_MEMORY in limits or HAMI_CORES in limits),
        )
        if present
    ]
    if len(used) > 1:
        raise RequestError(f"GPU request written in more than one vocabulary: {', '.join(used)}")
    if used and used[0] != "hami" and NVIDIA_GPU in limits:
        raise RequestError(f"{used[0]} GPU annotations together with a {NVIDIA_GPU} limit")
    models = _models(annotations)
    if not used:
        return _whole(limits, models)
    return {"gpuplace": _gpuplace, "kai": _kai, "hami": _hami}[used[0]](annotations, limits, models)


def _models(annotations: Mapping[str, str]) -> tuple[str, ...]:
    raw = annotations.get(GPUPLACE_MODELS, "")
    return tuple(m.strip() for m in raw.replace(",", "|").split("|") if m.strip())


def _whole(limits: dict[str, list[str]], models: tuple[str, ...]) -> GpuRequest | None:
    total = sum(quantity.count(v) for v in limits.get(NVIDIA_GPU, []))
    if total == 0:
        if models:
            raise RequestError(f"{GPUPLACE_MODELS} given without any GPU request")
        return None
    return GpuRequest(gpu_count=total, share_milli_per_gpu=1000, allowed_models=models)


def _gpuplace(annotations: Mapping[str, str], _: dict[str, list[str]], models: tuple[str, ...]) -> GpuRequest:
    gpus = quantity.count(annotations.get(GPUPLACE_COUNT, "1"))
    memory = annotations.get(GPUPLACE_MEMORY)
    compute = annotations.get(GPUPLACE_COMPUTE)
    if memory is None and compute is None:
        return GpuRequest(gpu_count=gpus, share_milli_per_gpu=1000, allowed_models=models)
    return GpuRequest(
        gpu_count=gpus,
        memory_mib_per_gpu=quantity.memory_mib(memory) if memory is not None else None,
        share_milli_per_gpu=quantity.milli(compute) if compute is not None else None,
        allowed_models=models,
    )


def _kai(annotations: Mapping[str, str], _: dict[str, list[str]], models: tuple[str, ...]) -> GpuRequest:
    if KAI_FRACTION in annotations and KAI_MEMORY in annotations:
        raise RequestError(f"KAI {KAI_FRACTION} and {KAI_MEMORY} are mutually exclusive")
    devices = quantity.count(annotations.get(KAI_FRACTION_DEVICES, "1"))
    if KAI_FRACTION in annotations:
        share = quantity.milli(annotations[KAI_FRACTION])
        if not 0 < share <= 1000:
            raise RequestError(f"{KAI_FRACTION} must be in (0, 1], got {annotations[KAI_FRACTION]!r}")
        return GpuRequest(gpu_count=devices, share_milli_per_gpu=share, allowed_models=models)
    return GpuRequest(gpu_count=devices, memory_mib_per_gpu=quantity.memory_mib(annotations[KAI_MEMORY]),
                      allowed_models=models)


def _hami(_: Mapping[str, str], limits: dict[str, list[str]], models: tuple[str, ...]) -> GpuRequest:
    for key in (HAMI_MEMORY, HAMI_CORES):
        if len(limits.get(key, [])) > 1:
            raise RequestError(f"{key} set on more than one container; gpuplace places one GPU set per pod")
    gpus = sum(quantity.count(v) for v in limits.get(NVIDIA_GPU, [])) or 1
    memory = limits.get(HAMI_MEMORY, [None])[0]
    cores = limits.get(HAMI_CORES, [None])[0]
    share = None
    if cores is not None:
        percent = quantity.count(cores)
        if not 0 < percent <= 100:
            raise RequestError(f"{HAMI_CORES} must be a percentage in (0, 100], got {cores!r}")
        share = percent * 10
    return GpuRequest(
        gpu_count=gpus,
        memory_mib_per_gpu=quantity.memory_mib(memory) if memory is not None else None,
        share_milli_per_gpu=share,
        allowed_models=models,
    )


def _positive(annotations: Mapping[str, str], key: str) -> float | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise RequestError(f"{key} is not a number: {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise RequestError(f"{key} must be a positive number, got {raw!r}")
    return value


__all__ = ["PodRequest", "RequestError", "parse_pod_request", "ASSIGNMENT", "DEADLINE", "FRAME_RATE", "WORKLOAD",
           "SERVICE_MS"]
