"""On the real stack: latency windows above a pod's deadline -> `slo_violation`, and no new pod on that GPU."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from gpuplace.adapters.kafka import client_options
from gpuplace.adapters.kube.cluster_api import raw_json
from gpuplace.adapters.kube.vocabulary import ASSIGNMENT
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import cluster_api
from gpuplace.contracts import topics
from gpuplace.contracts.events import LatencyWindow
from gpuplace.core.model import GpuRequest, Node, Pod
from gpuplace.harness.pipeline_run import FLEET_LABEL, kwok_node_manifest, pod_manifest
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from services.cluster_watcher import app as cluster_watcher
from services.latency_ingest import app as latency_ingest
from services.placement import app as placement
from tests.integration.conftest import eventually

pytestmark = pytest.mark.integration


async def _gpu_of(api, namespace: str, name: str) -> int | None:
    pod = await raw_json(await api.core.read_namespaced_pod(name, namespace, _preload_content=False))
    raw = (pod["metadata"].get("annotations") or {}).get(ASSIGNMENT)
    return json.loads(raw)["gpus"][0]["index"] if raw and pod["spec"].get("nodeName") else None


async def test_a_pod_past_its_deadline_closes_its_gpu(kafka_bootstrap: str, database_url: str) -> None:
    run = uuid.uuid4().hex[:6]
    cluster, kubeconfig = f"east-{run}", next(iter(cluster_kubeconfigs().values()))
    namespace = f"gpuplace-slo-{run}"
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=cluster,
                        kubeconfigs={cluster: kubeconfig}, topic_suffix=f".slo-{run}", namespace=namespace,
                        leader_election_namespace=namespace,
                        node_label_selector=f"{FLEET_LABEL}={run}", policy="bestfit")
    node = Node.with_gpus(f"slo-{run}", 32000, 262144, 2, "Tesla-V100-SXM2-16GB", 16384)
    await migrate.upgrade_async(database_url)
    stop = asyncio.Event()
    async with cluster_api(kubeconfig) as api:
        await raw_json(await api.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False))
        await raw_json(await api.core.create_node(kwok_node_manifest(node, run), _preload_content=False))
        services = [asyncio.create_task(placement.run(settings, stop)),
                    asyncio.create_task(latency_ingest.run(settings, stop)),
                    asyncio.create_task(cluster_watcher.run(settings, stop, kubeconfig=kubeconfig))]
        try:
            def perception(name: str) -> Pod:
                return Pod(name=name, cpu_milli=1000, memory_mib=1024, gpu=GpuRequest(count=1, memory_mib=4000),
                           deadline_ms=33.3, frame_rate_hz=30.0, workload_class="detection-yolo")

            async def submit(name: str) -> None:
                manifest = pod_manifest(perception(name), namespace, "gpuplace", service_ms=3.0)
                await raw_json(await api.core.create_namespaced_pod(namespace, manifest, _preload_content=False))

            await submit("first")
            first_gpu = await eventually(lambda: _gpu_of(api, namespace, "first"), timeout_s=60, what="first bound")
            first_gpu = int(first_gpu) if first_gpu is not False else 0

            producer = AIOKafkaProducer(**client_options(kafka_bootstrap))
            await producer.start()
            try:
                over = LatencyWindow(cluster=cluster, namespace=namespace, pod="first", workload="detection-yolo",
                                     window_s=10, frames=300, p50_ms=20, p95_ms=41.5, p99_ms=48, deadline_ms=33.3,
                                     deadline_misses=40)
                await producer.send_and_wait(settings.topic(topics.LATENCY), over.model_dump_json(by_alias=True)
                                             .encode(), key=over.kafka_key())
            finally:
                await producer.stop()
            violation = await _first_violation(kafka_bootstrap, settings.topic(topics.PLACEMENTS))
            assert violation["pod"] == "first" and violation["node"] == node.name
            assert violation["reasons"]["gpu_index"] == str(first_gpu)

            await asyncio.sleep(1.0)  # the placement worker re-reads the cluster on the violation event
            # Best fit would stack the second pod on the first pod's GPU; the violation must steer it away.
            await submit("second")
            second_gpu = await eventually(lambda: _gpu_of(api, namespace, "second"), timeout_s=60,
                                          what="second bound")
            assert int(second_gpu) != first_gpu
        finally:
            stop.set()
            await asyncio.gather(*services, return_exceptions=True)
            await raw_json(await api.core.delete_namespace(namespace, _preload_content=False))
            await raw_json(await api.core.delete_node(node.name, _preload_content=False))


async def _first_violation(bootstrap: str, topic: str) -> dict:
    consumer = AIOKafkaConsumer(topic, **client_options(bootstrap), auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    try:
        async def probe():
            batch = await consumer.getmany(timeout_ms=500)
            found = [json.loads(m.value) for msgs in batch.values() for m in msgs]
            return next((e for e in found if e["kind"] == "slo_violation"), None)

        return await eventually(probe, timeout_s=60, what="an slo_violation placement event")
    finally:
        await consumer.stop()
