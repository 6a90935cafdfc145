"""GPU topology labels on a real kube-apiserver (adapters/kube/topology_labels.py): the dotted per-GPU lists are
legal label values, the node the watcher reads back carries them into its NodeEvent, and the comma form the
module's docstring rules out is refused by the apiserver itself (why the lists use dots)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpuplace.adapters.kube.cluster_api import raw_json
from gpuplace.adapters.kube.topology_labels import GPU_NUMA, GPU_NVLINK
from gpuplace.adapters.kube.translate import node_event

pytestmark = pytest.mark.integration


async def test_topology_labels_reach_the_node_event(kube: client.ApiClient, gpu_node: dict[str, Any]) -> None:
    core = client.CoreV1Api(kube)
    name = gpu_node["metadata"]["name"]
    await core.patch_node(name, {"metadata": {"labels": {GPU_NUMA: "0.0.0.0.1.1.1.1", GPU_NVLINK: "0.0.1.1.2.2.3.3"}}})
    served = await raw_json(await core.read_node(name, _preload_content=False))  # as the watcher receives it
    event = node_event(served, cluster="east", region="local")
    assert event.gpu_count == 8
    assert event.gpu_numa == (0, 0, 0, 0, 1, 1, 1, 1) and event.gpu_nvlink == (0, 0, 1, 1, 2, 2, 3, 3)


async def test_the_apiserver_refuses_comma_separated_label_values(kube: client.ApiClient,
                                                                 gpu_node: dict[str, Any]) -> None:
    core = client.CoreV1Api(kube)
    with pytest.raises(ApiException) as refused:
        await core.patch_node(gpu_node["metadata"]["name"], {"metadata": {"labels": {GPU_NUMA: "0,0,0,0,1,1,1,1"}}})
    assert refused.value.status == 422
