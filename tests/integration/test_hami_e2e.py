"""gpuplace next to HAMi's node components, on the real stack (issue 13, item 4).

A KWOK node carries what HAMi's device plugin writes on a real one: `hami.io/node-nvidia-register` (two GPUs, in
today's JSON encoding) and allocatable `nvidia.com/gpu` of 20 (2 GPUs x deviceSplitCount 10). cluster-watcher
and placement run as deployed. Checked from the apiserver and PostgreSQL:

- the node is offered as its 2 registered GPUs of their registered memory, not as 20;
- HAMi-vocabulary pods (schedulerName gpuplace) are bound with exactly the annotations HAMi's scheduler writes
  (Project-HAMi/HAMi@4707fb02 pkg/scheduler/scheduler.go Filter and Bind), and HAMi's own readers (ported line by
  line, tests/unit/adapters/hami_go_port.py) decode them to the GPU gpuplace chose, for the right container;
- a HAMi-vocabulary pod on a node without the registration is bound as before, without HAMi's annotations.

KWOK starts a bound pod at once (phase Running), so the device plugin's wait for a Pending pod is checked in the
unit tests (tests/unit/adapters/test_hami.py), not here.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpuplace.adapters.kafka import ensure_topics
from gpuplace.adapters.kube import hami
from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.adapters.kube.vocabulary import ASSIGNMENT
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import cluster_api, database
from gpuplace.contracts import topics
from gpuplace.harness.pipeline_run import FLEET_LABEL
from gpuplace.harness.shared_cluster import create_all, delete_quietly, gpuplace_running, inventory_seen, node_manifest
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from tests.integration.conftest import eventually
from tests.unit.adapters import hami_go_port as go

pytestmark = pytest.mark.integration

UUIDS = ("GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec", "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448")
DEVMEM = 32768


def _registration() -> str:
    """Two V100s as HAMi's device plugin registers them (device.MarshalNodeDevices; index 0 is omitted, omitempty)."""
    return json.dumps([
        {"id": UUIDS[0], "count": 10, "devmem": DEVMEM, "devcore": 100, "type": "NVIDIA-Tesla V100-PCIE-32GB",
         "health": True, "mode": "hami-core"},
        {"id": UUIDS[1], "index": 1, "count": 10, "devmem": DEVMEM, "devcore": 100,
         "type": "NVIDIA-Tesla V100-PCIE-32GB", "health": True, "mode": "hami-core"},
    ], separators=(",", ":"))


def _hami_node(name: str, run: str) -> dict[str, Any]:
    node = node_manifest(name, run)
    node["metadata"]["annotations"].update({hami.REGISTER: _registration(),
                                            hami.HANDSHAKE: "Reported 2026-12-02 10:00:00 +0000 UTC"})
    for status in ("allocatable", "capacity"):
        node["status"][status]["nvidia.com/gpu"] = "20"  # the device plugin's replicas: GPUs x deviceSplitCount
    return node


def _pod(name: str, limits: dict[str, str], *, node: str | None = None, sidecar: bool = False,
         init: bool = False) -> dict[str, Any]:
    image = "registry.local/perception:1"
    containers = [{"name": "main", "image": image, "resources": {"limits": limits}}]
    if sidecar:
        containers.insert(0, {"name": "side", "image": image})
    spec: dict[str, Any] = {"schedulerName": "gpuplace", "terminationGracePeriodSeconds": 0,
                            "containers": containers}
    if init:
        spec["initContainers"] = [{"name": "init", "image": image}]
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
async def scene(kafka_bootstrap: str, database_url: str) -> AsyncIterator[tuple[Settings, str, KubeClusterApi, str]]:
    run = uuid.uuid4().hex[:6]
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    cluster, namespace = f"east-{run}", f"gpuplace-hami-{run}"
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=cluster,
                        kubeconfigs={cluster: kubeconfig}, topic_suffix=f".hami-{run}", namespace=namespace,
                        leader_election_namespace=namespace, node_label_selector=f"{FLEET_LABEL}={run}",
                        defrag_enabled=False)
    await migrate.upgrade_async(database_url)
    await ensure_topics(kafka_bootstrap, [settings.topic(t) for t in topics.ALL_TOPICS])
    hami_node, plain_node = f"hami-{run}", f"plain-{run}"
    async with cluster_api(kubeconfig) as api:
        await create_all([api.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False),
                          api.core.create_node(_hami_node(hami_node, run), _preload_content=False),
                          api.core.create_node(node_manifest(plain_node, run, gpus=1), _preload_content=False)])
        try:
            yield settings, kubeconfig, api, run
        finally:
            await delete_quietly(api.core.delete_namespace(namespace), api.core.delete_node(hami_node),
                                 api.core.delete_node(plain_node))


async def _bound(api: KubeClusterApi, namespace: str, name: str) -> dict[str, Any]:
    async def read() -> dict[str, Any] | None:
        pod = await raw_json(await api.core.read_namespaced_pod(name, namespace, _preload_content=False))
        return pod if pod["spec"].get("nodeName") else None
    return await eventually(read, timeout_s=60, what=f"{name} bound")


async def test_hami_vocabulary_pods_are_bound_with_hamis_scheduler_annotations(scene):
    settings, kubeconfig, api, run = scene
    namespace, hami_node, plain_node = settings.namespace, f"hami-{run}", f"plain-{run}"
    async with gpuplace_running(settings, kubeconfig):
        await inventory_seen(settings, 2)
        async with database(settings) as uow_factory, uow_factory() as uow:
            rows = {n["name"]: n for n in await uow.nodes.load_nodes(settings.cluster)}
        assert (rows[hami_node]["gpu_count"], rows[hami_node]["gpu_memory_mib"]) == (2, DEVMEM)  # not 20 GPUs

        gpu = {"nvidia.com/gpu": "1"}  # without HAMi's webhook the pod names it (README, "Next to HAMi")
        pods = {
            "by-memory": (_pod("by-memory", {**gpu, "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"},
                               node=hami_node), 0, 1, 3000, 30),
            "by-percent": (_pod("by-percent", {**gpu, "nvidia.com/gpumem-percentage": "50"}, node=hami_node,
                                sidecar=True, init=True), 2, 3, DEVMEM * 50 // 100, 0),
            "unregistered": (_pod("unregistered", {**gpu, "nvidia.com/gpumem": "1000"}, node=plain_node),
                             0, 1, 1000, 0),
        }
        await create_all([api.core.create_namespaced_pod(namespace, manifest, _preload_content=False)
                          for manifest, *_ in pods.values()])
        bound = {name: await _bound(api, namespace, name) for name in pods}

    for name in ("by-memory", "by-percent"):
        pod, (_, position, containers, usedmem, usedcores) = bound[name], pods[name]
        annotations = pod["metadata"]["annotations"]
        assert pod["spec"]["nodeName"] == hami_node
        (chosen,) = json.loads(annotations[ASSIGNMENT])["gpus"]  # gpuplace's own annotation rides along
        devices = f"{UUIDS[chosen['index']]},NVIDIA,{usedmem},{usedcores}:"
        expected = ";" * position + devices + ";" * (containers - position)
        assert {k: v for k, v in annotations.items() if k.startswith("hami.io/")} == {
            hami.TO_ALLOCATE: expected, hami.ALLOCATED: expected, hami.VGPU_NODE: hami_node,
            hami.VGPU_TIME: annotations[hami.BIND_TIME], hami.BIND_PHASE: "allocating",
            hami.BIND_TIME: annotations[hami.BIND_TIME]}
        assert annotations[hami.BIND_TIME].isdigit()
        # HAMi's device plugin, as ported: the pod's devices, for its GPU container, are the GPU gpuplace chose
        spec = pod["spec"]
        as_go = go.Pod(name, "Pending", hami_node, annotations, [c["name"] for c in spec.get("initContainers") or []],
                       [c["name"] for c in spec["containers"]])
        assert go.GetPendingPod([as_go], hami_node) is as_go
        container, got = go.popNextContainerDevices(as_go, go.decodePodSingleDevice("NVIDIA", as_go))
        assert container == "main"
        assert [(d.UUID, d.Type, d.Usedmem, d.Usedcores) for d in got] == [
            (UUIDS[chosen["index"]], "NVIDIA", usedmem, usedcores)]

    plain = bound["unregistered"]
    assert plain["spec"]["nodeName"] == plain_node and ASSIGNMENT in plain["metadata"]["annotations"]
    assert not [k for k in plain["metadata"]["annotations"] if k.startswith("hami.io/")]
