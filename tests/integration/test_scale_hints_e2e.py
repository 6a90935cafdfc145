"""On the real stack: a pod too big for every node of the fleet waits, and placement publishes a `scale_hint` on
gpuplace.hints.v1 that says capacity blocks it and names a node shape that would place it."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from aiokafka import AIOKafkaConsumer

from gpuplace.adapters.kafka import client_options, ensure_topics
from gpuplace.adapters.kube.cluster_api import raw_json
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import cluster_api
from gpuplace.contracts import topics
from gpuplace.core.model import GpuRequest, Node, Pod
from gpuplace.harness.pipeline_run import FLEET_LABEL, kwok_node_manifest, pod_manifest
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from services.cluster_watcher import app as cluster_watcher
from services.placement import app as placement
from tests.integration.conftest import eventually

pytestmark = pytest.mark.integration

A100 = "NVIDIA-A100-SXM4-40GB:8:40960:96000:786432"  # declared by the operator: the fleet has only V100s


async def test_a_pod_too_big_for_the_fleet_yields_a_capacity_hint_naming_a_node_shape(
        kafka_bootstrap: str, database_url: str) -> None:
    run = uuid.uuid4().hex[:6]
    cluster, kubeconfig = f"east-{run}", next(iter(cluster_kubeconfigs().values()))
    namespace = f"gpuplace-hint-{run}"
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=cluster,
                        kubeconfigs={cluster: kubeconfig}, topic_suffix=f".hint-{run}", namespace=namespace,
                        leader_election_namespace=namespace, node_label_selector=f"{FLEET_LABEL}={run}",
                        policy="bestfit", scale_hint_min_wait_s=1.0, scale_hint_interval_s=0.0,
                        scale_hint_shapes=A100)
    nodes = [Node.with_gpus(f"hint-{run}-{i}", 32000, 262144, 2, "Tesla-V100-SXM2-16GB", 16384) for i in range(2)]
    await migrate.upgrade_async(database_url)
    await ensure_topics(settings.kafka, [settings.topic(topics.HINTS)])
    stop = asyncio.Event()
    async with cluster_api(kubeconfig) as api:
        await raw_json(await api.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False))
        for node in nodes:
            await raw_json(await api.core.create_node(kwok_node_manifest(node, run), _preload_content=False))
        services = [asyncio.create_task(placement.run(settings, stop)),
                    asyncio.create_task(cluster_watcher.run(settings, stop, kubeconfig=kubeconfig))]
        try:
            big = Pod(name="occupancy-big", cpu_milli=1000, memory_mib=1024,
                      gpu=GpuRequest(count=1, memory_mib=30_000), deadline_ms=100.0, frame_rate_hz=10.0,
                      workload_class="occupancy-bev")  # 30 GB: more than any GPU of the fleet holds
            manifest = pod_manifest(big, namespace, "gpuplace")
            await raw_json(await api.core.create_namespaced_pod(namespace, manifest, _preload_content=False))
            hint = await _first_hint(kafka_bootstrap, settings.topic(topics.HINTS), cluster)
            assert hint["kind"] == "scale_hint" and hint["waiting"] == 1
            assert hint["blocked_by"] == {"capacity": 1}
            (addition,) = hint["additions"]
            assert addition["blocked_by"] == "capacity" and addition["nodes"] == 1 and addition["pods"] == 1
            assert addition["shape"]["gpu_model"] == "NVIDIA-A100-SXM4-40GB"
            assert addition["shape"]["gpu_memory_mib"] == 40960
            assert "NVIDIA-A100-SXM4-40GB" in hint["reason"] and hint["unplaceable"] == []
            assert {d["node"] for d in hint["drainable"]} <= {n.name for n in nodes}  # empty nodes at most
        finally:
            stop.set()
            await asyncio.gather(*services, return_exceptions=True)
            await raw_json(await api.core.delete_namespace(namespace, _preload_content=False))
            for node in nodes:
                await raw_json(await api.core.delete_node(node.name, _preload_content=False))


async def _first_hint(bootstrap: str, topic: str, cluster: str) -> dict:
    consumer = AIOKafkaConsumer(topic, **client_options(bootstrap), auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    try:
        async def probe():
            batch = await consumer.getmany(timeout_ms=500)
            found = [json.loads(m.value) for msgs in batch.values() for m in msgs]
            return next((e for e in found if e["cluster"] == cluster), None)

        return await eventually(probe, timeout_s=90, what="a scale_hint event")
    finally:
        await consumer.stop()
