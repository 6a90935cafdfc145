"""gpu-agent service: sample this node's GPUs every interval and publish one event per GPU; scrape the frame
latency histograms of the node's opted-in GPU pods and publish one latency window per pod.

Runs as a DaemonSet (GPUPLACE_NODE_NAME from the downward API). With GPUPLACE_DCGM_URL it scrapes a DCGM
exporter; otherwise it reads NVML directly and refuses to start where there is no driver. With a kubeconfig and
GPUPLACE_LATENCY_WINDOW_S > 0 it lists the node's pods every window and scrapes those that opted in
(adapters/pod_metrics/targets.py): no workload needs Kafka credentials to report its latency.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from faststream.kafka import KafkaBroker

from gpuplace.adapters.gpu.dcgm import DcgmSource
from gpuplace.adapters.gpu.nvml import NvmlSource
from gpuplace.adapters.gpu.sample import GpuSample
from gpuplace.adapters.kafka import check_broker, make_broker, publish_event, start_broker
from gpuplace.adapters.kube.cluster_api import KubeClusterApi
from gpuplace.adapters.pod_metrics.scraper import PodLatencyScraper
from gpuplace.adapters.pod_metrics.targets import scrape_targets
from gpuplace.bootstrap import cluster_api
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
                loops = [_telemetry_loop(broker, settings, settings.node_name, stop, nvml, dcgm)]
                if settings.latency_window_s > 0 and settings.kubeconfig:
                    loops.append(_latency_loop(broker, settings, settings.node_name, stop))
                elif settings.latency_window_s > 0:
                    log.info("pod latency scrape off: no kubeconfig to list the node's pods with")
                await asyncio.gather(*loops)
    finally:
        if nvml is not None:
            nvml.close()


async def _telemetry_loop(broker: KafkaBroker, settings: Settings, node: str, stop: asyncio.Event,
                          nvml: NvmlSource | None, dcgm: DcgmSource | None) -> None:
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
            await publish_event(broker, to_event(sample, settings, node), topic=settings.topic(topics.TELEMETRY))
        await _pause(stop, settings.telemetry_interval_s)


async def _latency_loop(broker: KafkaBroker, settings: Settings, node: str, stop: asyncio.Event) -> None:
    """Every window: list the node's pods, scrape the opted-in ones, publish their windows."""
    assert settings.kubeconfig is not None  # run() starts this loop only with one
    scraper = PodLatencyScraper(cluster=settings.cluster, region=settings.region, node=node,
                                metric=settings.latency_metric)
    async with cluster_api(settings.kubeconfig) as api:
        while not stop.is_set():
            try:
                await _scrape_once(api, scraper, broker, settings, node)
            except Exception as exc:  # noqa: BLE001 - one failed round (API, broker) is logged, the next one runs
                log.warning("pod latency round failed: %s", exc)
            await _pause(stop, settings.latency_window_s)


async def _scrape_once(api: KubeClusterApi, scraper: PodLatencyScraper, broker: KafkaBroker, settings: Settings,
                       node: str) -> None:
    pods, _ = await api.list("pods", field_selector=f"spec.nodeName={node}")
    targets, skipped = scrape_targets(pods)
    for pod in skipped:
        log.warning("not scraping %s/%s: %s", pod.namespace, pod.pod, pod.reason)
    for window in await scraper.windows(targets, time.monotonic()):
        await publish_event(broker, window, topic=settings.topic(topics.LATENCY))


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        pass
