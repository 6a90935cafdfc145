"""gpu-agent service: sample this node's GPUs every interval and publish one event per GPU.

Runs as a DaemonSet (GPUPLACE_NODE_NAME from the downward API). With GPUPLACE_DCGM_URL it scrapes a DCGM
exporter; otherwise it reads NVML directly and refuses to start where there is no driver.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from gpuplace.adapters.gpu.dcgm import DcgmSource
from gpuplace.adapters.gpu.nvml import NvmlSource
from gpuplace.adapters.gpu.sample import GpuSample
from gpuplace.adapters.kafka import check_broker, make_broker, publish_event, start_broker
from gpuplace.contracts import topics
from gpuplace.contracts.events import GpuTelemetry
from gpuplace.settings import ConfigurationError, Settings
from services.telemetry import Telemetry

NAME = "gpu-agent"
log = logging.getLogger(__name__)


def to_event(sample: GpuSample, settings: Settings, node: str) -> GpuTelemetry:
    return GpuTelemetry(
        cluster=settings.cluster, region=settings.region, node=node, gpu_index=sample.index,
        gpu_uuid=sample.uuid, model=sample.model, memory_total_mib=sample.memory_total_mib,
        memory_used_mib=min(sample.memory_used_mib, sample.memory_total_mib),
        utilization_pct=sample.utilization_pct, healthy=sample.healthy,
    )


async def run(settings: Settings, stop: asyncio.Event, *, telemetry: Telemetry | None = None) -> None:
    telemetry = telemetry or Telemetry()
    if not settings.node_name:
        raise ConfigurationError("gpu-agent needs GPUPLACE_NODE_NAME (the node whose GPUs it reports)")
    nvml = None if settings.dcgm_url else NvmlSource()
    dcgm = DcgmSource(settings.dcgm_url, hostname=settings.node_name) if settings.dcgm_url else None
    broker = make_broker(settings.kafka, client_id=f"{NAME}-{settings.node_name}", by_cluster=False)
    try:
        async with broker:
            await start_broker(broker, settings.kafka)
            with telemetry.health.running(NAME, kafka=functools.partial(check_broker, broker)):
                while not stop.is_set():
                    try:
                        if dcgm is not None:
                            samples = await dcgm.sample()
                        else:
                            assert nvml is not None  # the one source without a DCGM URL
                            samples = await asyncio.to_thread(nvml.sample)
                    except Exception as exc:  # noqa: BLE001 - a failed scrape is skipped, the agent keeps going
                        log.warning("telemetry sample failed: %s", exc)
                        samples = []
                    for sample in samples:
                        event = to_event(sample, settings, settings.node_name)
                        await publish_event(broker, event, topic=settings.topic(topics.TELEMETRY))
                    try:
                        await asyncio.wait_for(stop.wait(), timeout=settings.telemetry_interval_s)
                    except TimeoutError:
                        pass
    finally:
        if nvml is not None:
            nvml.close()
