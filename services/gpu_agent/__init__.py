"""gpu-agent: per-GPU telemetry (NVML, or a DCGM exporter) -> gpuplace.telemetry.v1."""
