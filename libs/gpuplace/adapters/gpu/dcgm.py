"""Per-GPU telemetry from a DCGM exporter's Prometheus endpoint (`/metrics`).

Reads DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE (MiB), DCGM_FI_DEV_GPU_UTIL (%) and
DCGM_FI_DEV_XID_ERRORS (a non-zero last XID marks the GPU unhealthy), keyed by the `gpu` label.
Lines for other nodes (a cluster-wide exporter) are kept out by the `Hostname` label when given.
"""

from __future__ import annotations

import math

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gpuplace.adapters.gpu.sample import GpuSample

_WANTED = {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS"}


def parse_metrics(text: str, *, hostname: str | None = None) -> list[GpuSample]:
    """Prometheus exposition text -> one sample per GPU that reports both used and free memory.

    The text is read by prometheus_client's parser (ValueError on text that is not the exposition format)."""
    values: dict[int, dict[str, float]] = {}
    info: dict[int, dict[str, str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name not in _WANTED or math.isnan(sample.value) or "gpu" not in labels:
                continue
            if hostname and labels.get("Hostname", hostname) != hostname:
                continue
            index = int(labels["gpu"])
            values.setdefault(index, {})[sample.name] = float(sample.value)
            info.setdefault(index, labels)
    samples = []
    for index, v in sorted(values.items()):
        if "DCGM_FI_DEV_FB_USED" not in v or "DCGM_FI_DEV_FB_FREE" not in v:
            continue
        used, free = int(v["DCGM_FI_DEV_FB_USED"]), int(v["DCGM_FI_DEV_FB_FREE"])
        samples.append(GpuSample(
            index=index, uuid=info[index].get("UUID"), model=info[index].get("modelName"),
            memory_total_mib=used + free, memory_used_mib=used,
            utilization_pct=min(100.0, max(0.0, v.get("DCGM_FI_DEV_GPU_UTIL", 0.0))),
            healthy=v.get("DCGM_FI_DEV_XID_ERRORS", 0.0) == 0.0,
        ))
    return samples


class DcgmSource:
    def __init__(self, url: str, *, hostname: str | None = None, timeout_s: float = 5.0) -> None:
        self._url = url
        self._hostname = hostname
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def sample(self) -> list[GpuSample]:
        async with aiohttp.ClientSession(timeout=self._timeout) as session, session.get(self._url) as response:
            response.raise_for_status()
            return parse_metrics(await response.text(), hostname=self._hostname)


__all__ = ["DcgmSource", "parse_metrics"]
