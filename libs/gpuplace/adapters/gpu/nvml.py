"""Per-GPU telemetry from NVML (nvidia-ml-py), for a gpu-agent running on the GPU node itself."""

from __future__ import annotations

import pynvml

from gpuplace.adapters.gpu.sample import GpuSample

_MIB = 1024 * 1024


class NvmlUnavailable(RuntimeError):
    """No NVIDIA driver or no GPU on this machine."""


class NvmlSource:
    def __init__(self) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML could not start: {exc}") from exc

    def close(self) -> None:
        pynvml.nvmlShutdown()

    def sample(self) -> list[GpuSample]:
        samples = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                util = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                healthy = True
            except pynvml.NVMLError:  # a GPU that cannot report utilisation is not one to place on
                util, healthy = 0.0, False
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            samples.append(GpuSample(
                index=index, uuid=uuid if isinstance(uuid, str) else uuid.decode(),
                model=name if isinstance(name, str) else name.decode(),
                memory_total_mib=int(memory.total) // _MIB, memory_used_mib=int(memory.used) // _MIB,
                utilization_pct=util, healthy=healthy,
            ))
        return samples


__all__ = ["NvmlSource", "NvmlUnavailable"]
