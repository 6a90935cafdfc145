"""GPU sharing that is enforced or refused, on the real stack (issue 37).

A node with only the standard NVIDIA device plugin (`nvidia.com/gpu`, no HAMi, no DRA driver, no
gpuplace.io/gpu-sharing-enforcement label) limits no pod's GPU memory. A memory slice asked of gpuplace waits there,
PodScheduled=False saying why, while a whole-GPU pod is bound (the device plugin hands out whole GPUs). With
GPUPLACE_ALLOW_UNENFORCED_SHARING the slice is bound too, with a Warning Event saying nothing limits its memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client

from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import cluster_api
from gpuplace.core.node_rules import MSG_UNENFORCED
from gpuplace.harness.pipeline_run import FLEET_LABEL
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from gpuplace.usecases.enforcement import UNENFORCED_REASON
from tests.integration.conftest import equals, eventually, run_id
from tests.integration.test_kube_api_readiness import gpu_pod, node_of, ready_node, services

pytestmark = pytest.mark.integration
SLICE = {"gpuplace.io/gpu-memory": "9420Mi"}


@contextlib.asynccontextmanager
async def scene(kafka_bootstrap: str, database_url: str, *, allow: bool
                ) -> AsyncIterator[tuple[KubeClusterApi, str, str, Settings]]:
    """A device-plugin-only node and a namespace of the run's own on the stack's first cluster, and settings for
    services that see only them; both deleted after."""
    run = run_id()
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    node, namespace = f"plain-{run}", f"sharing-{run}"
    await migrate.upgrade_async(database_url)
    async with cluster_api(kubeconfig) as api:
        manifest = ready_node(node)
        manifest["metadata"]["labels"][FLEET_LABEL] = run
        await raw_json(await api.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False))
        await raw_json(await api.core.create_node(manifest, _preload_content=False))
        try:
            yield api, node, namespace, Settings(
                kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=f"sharing-{run}",
                kubeconfig=kubeconfig, kubeconfigs={f"sharing-{run}": kubeconfig}, topic_suffix=f".sharing-{run}",
                namespace=namespace, leader_election_namespace=namespace, node_label_selector=f"{FLEET_LABEL}={run}",
                allow_unenforced_sharing=allow, http_port=0)
        finally:
            await raw_json(await api.core.delete_namespace(namespace, _preload_content=False))
            await raw_json(await api.core.delete_node(node, _preload_content=False))


async def unschedulable_message(api: KubeClusterApi, namespace: str, name: str) -> str | None:
    pod = await api.read_pod(namespace, name) or {}
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message"))
    return None


async def unenforced_warnings(api: KubeClusterApi, namespace: str, name: str) -> list[tuple[str, str]] | None:
    """The pod's Warning Events about unenforced sharing (a FailedScheduling may come first: the pod seen before
    its node)."""
    listed = await raw_json(await client.EventsV1Api(api.api_client).list_namespaced_event(
        namespace, _preload_content=False))
    found = [(e["type"], e["note"]) for e in listed["items"]
             if e["regarding"].get("name") == name and e["reason"] == UNENFORCED_REASON]
    return found or None


async def test_a_slice_waits_on_a_device_plugin_node_while_a_whole_gpu_pod_is_bound(kafka_bootstrap: str,
                                                                                   database_url: str) -> None:
    async with scene(kafka_bootstrap, database_url, allow=False) as (api, node, namespace, settings), \
            services(settings):
        await raw_json(await api.core.create_namespaced_pod(namespace, gpu_pod("whole"), _preload_content=False))
        assert await eventually(lambda: node_of(api, namespace, "whole"), timeout_s=90,
                                what="the whole-GPU pod bound") == node
        # the slice once placement knows the node (before, it would wait for "no schedulable node", and a node the
        # slice cannot use would not try it again: what could change for it?)
        await raw_json(await api.core.create_namespaced_pod(namespace, gpu_pod("slice", SLICE, gpus=0),
                                                           _preload_content=False))
        expected = f"0/1 nodes are available: 1 {MSG_UNENFORCED}."
        await eventually(lambda: equals(unschedulable_message(api, namespace, "slice"), expected), timeout_s=60,
                         what=f"PodScheduled=False on the slice saying {expected!r}")
        assert await node_of(api, namespace, "slice") is None


async def test_allowed_unenforced_sharing_places_the_slice_with_a_warning_event(kafka_bootstrap: str,
                                                                               database_url: str) -> None:
    async with scene(kafka_bootstrap, database_url, allow=True) as (api, node, namespace, settings), \
            services(settings):
        await raw_json(await api.core.create_namespaced_pod(namespace, gpu_pod("slice", SLICE, gpus=0),
                                                           _preload_content=False))
        assert await eventually(lambda: node_of(api, namespace, "slice"), timeout_s=90,
                                what="the slice bound") == node
        ((kind, note),) = await eventually(lambda: unenforced_warnings(api, namespace, "slice"), timeout_s=30,
                                           what="the Warning Event")
        assert kind == "Warning"
        assert note.startswith(f"nothing limits this pod's GPU memory on {node} (its GPU enforcement: none")
