"""Sources of per-GPU telemetry: NVML on the node itself, or a DCGM exporter's Prometheus endpoint."""
