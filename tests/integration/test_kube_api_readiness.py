"""Readiness that tells the truth about each cluster's apiserver, on the real stack (issue 37).

- A cluster whose apiserver serves no resource.k8s.io (an apiserver of the test's own, the API group turned off)
  gets its pods placed from the nodes' device-plugin resources, and /readyz says DRA is off there.
- A token the apiserver stops accepting turns /readyz to 503 naming the cluster and the cause within a minute;
  a fresh token in the file brings it back, with no restart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.adapters.metrics import PrometheusMetrics
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import cluster_api
from gpuplace.settings import Settings
from services import http_server, runtime
from services.cluster_watcher import app as cluster_watcher
from services.placement import app as placement
from services.telemetry import Health, Telemetry
from tests.integration.conftest import equals, eventually, run_id
from tests.integration.extra_apiserver import WITHOUT_DRA, extra_apiserver

pytestmark = pytest.mark.integration


def ready_node(name: str, gpus: int = 4) -> dict[str, Any]:
    """A GPU node as the NVIDIA device plugin and GPU Feature Discovery describe it, Ready from the start (no
    KWOK runs for an apiserver of the test's own)."""
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                                                  "nvidia.com/gpu.memory": "40960", "nvidia.com/gpu.count": str(gpus)}},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}


def gpu_pod(name: str, annotations: dict[str, str] | None = None, gpus: int = 1) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"schedulerName": "gpuplace", "containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}]}}


async def readyz(url: str) -> tuple[int, str] | None:
    try:
        async with aiohttp.ClientSession() as session, session.get(f"{url}/readyz") as response:
            return response.status, await response.text()
    except aiohttp.ClientError:
        return None


async def metric(url: str, name: str, **labels: str) -> float | None:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        text = await response.text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


async def node_of(api: KubeClusterApi, namespace: str, name: str) -> str | None:
    pod = await api.read_pod(namespace, name)
    return (pod or {}).get("spec", {}).get("nodeName") or None


@contextlib.asynccontextmanager
async def services(settings: Settings, names: tuple[str, ...] = ("cluster-watcher", "placement")
                   ) -> AsyncIterator[str]:
    """The services in this process, reporting into one Telemetry served on a free port; yields its URL."""
    runs = {"cluster-watcher": cluster_watcher.run, "placement": placement.run}
    telemetry = Telemetry(PrometheusMetrics(process_metrics=False), Health(check_timeout_s=3.0))
    stop = asyncio.Event()
    async with http_server.serving(telemetry, 0, host="127.0.0.1") as (host, port):
        task = asyncio.create_task(runtime.run_services({n: runs[n] for n in names}, settings, stop, telemetry))
        try:
            yield f"http://{host}:{port}"
            assert not task.done(), "a service ended early"
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)


async def test_a_cluster_without_dra_gets_pods_placed_and_readiness_says_dra_is_off(kafka_bootstrap: str,
                                                                                    database_url: str) -> None:
    run = run_id()
    name, namespace = f"nodra-{run}", f"nodra-{run}"
    await migrate.upgrade_async(database_url)
    async with extra_apiserver(name, *WITHOUT_DRA) as server, cluster_api(server.kubeconfig) as api:
        assert await api.served_versions("resource.k8s.io") == set()
        await raw_json(await api.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False))
        await raw_json(await api.core.create_node(ready_node(f"{run}-n1"), _preload_content=False))
        settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=name,
                            kubeconfig=server.kubeconfig, kubeconfigs={name: server.kubeconfig},
                            topic_suffix=f".nodra-{run}", leader_election_namespace=namespace, http_port=0)
        async with services(settings) as url:
            await raw_json(await api.core.create_namespaced_pod(namespace, gpu_pod("whole"), _preload_content=False))
            assert await eventually(lambda: node_of(api, namespace, "whole"), timeout_s=90,
                                    what="the pod bound on a cluster without DRA") == f"{run}-n1"
            status, body = await eventually(lambda: readyz(url), timeout_s=30, what="/readyz")
            assert status == 200, body
            lines = body.splitlines()
            assert lines[0] == "ok"
            assert any(line.startswith(f"DRA off in cluster {name}: its apiserver serves no resource.k8s.io/v1")
                       for line in lines[1:]), body
            assert await metric(url, "gpuplace_kube_api_served", cluster=name, api="resource.k8s.io/v1") == 0.0
            # no watch failed on the API that is not there: nothing waits for a ResourceSlice list
            assert await metric(url, "gpuplace_kube_api_failures_total", cluster=name,
                                call="resourceslices") is None


async def test_the_stack_serves_dra_and_readiness_notes_nothing(kafka_bootstrap: str, database_url: str,
                                                                kube_clusters: dict) -> None:
    """The contrast: the stack's own apiserver serves resource.k8s.io/v1, and /readyz is a bare "ok"."""
    from gpuplace.harness.stack_env import cluster_kubeconfigs

    run = run_id()
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    cluster, namespace = f"dra-{run}", f"dra-{run}"
    await migrate.upgrade_async(database_url)
    async with cluster_api(kubeconfig) as api:
        assert "v1" in await api.served_versions("resource.k8s.io")
        await raw_json(await api.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False))
        try:
            settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=cluster,
                                kubeconfig=kubeconfig, topic_suffix=f".dra-{run}", leader_election_namespace=namespace,
                                node_label_selector=f"gpuplace.io/fleet={run}", http_port=0)
            async with services(settings, ("cluster-watcher",)) as url:
                await eventually(lambda: equals(metric(url, "gpuplace_kube_api_served", cluster=cluster,
                                                       api="resource.k8s.io/v1"), 1.0), timeout_s=60, what="discovery")
                assert await eventually(lambda: _status(url, 200), timeout_s=60, what="/readyz 200") == "ok\n"
        finally:
            await raw_json(await api.core.delete_namespace(namespace, _preload_content=False))


async def _status(url: str, expected: int) -> str | None:
    answer = await readyz(url)
    return answer[1] if answer is not None and answer[0] == expected else None
