"""gpuplace on a cluster it shares with kube-scheduler, end to end on the real stack.

Two clusters of 8-GPU KWOK nodes. Before gpuplace's pods come: some nodes are tainted, some cordoned, the rest
labelled by zone; kube-scheduler binds default-scheduler pods (in another namespace) that take CPU, memory and
whole GPUs of the nodes. Then 1,000 gpuplace pods arrive: perception memory slices, pods that select zone b,
pods that tolerate the taint, and pods that select a zone no node has. Checked from the apiservers, counting
both schedulers' pods: no node's CPU, memory, pod slots or GPUs over-committed; no gpuplace pod on a node a
rule forbids; every gpuplace pod left waiting carries a FailedScheduling Event and PodScheduled=False.
"""

from __future__ import annotations

import json
import os
import random
from collections import defaultdict
from typing import Any

import pytest

from gpuplace.adapters.kube import quantity
from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.adapters.kube.vocabulary import ASSIGNMENT
from gpuplace.bootstrap import database
from gpuplace.harness.pipeline_run import FLEET_LABEL, ClusterApis, PipelineRun, RunConfig
from gpuplace.harness.shared_cluster import create_all, delete_quietly, outcomes
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from tests.integration.conftest import eventually

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

NODES = int(os.environ.get("GPUPLACE_SHARED_E2E_NODES", "120"))
GPUPLACE_PODS = 1000
SELECTING, TOLERATING, NOWHERE = 60, 40, 20  # gpuplace pods with rules; the rest are perception slices
DEFAULT_PODS = 150  # kube-scheduler's: 2-6 cores, 4-24 GiB, 0-2 whole GPUs each
TAINT = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}


def _gpuplace_pod(name: str, spec_extra: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": {
        "gpuplace.io/gpu-memory": "6000Mi", "gpuplace.io/deadline-ms": "100"}},
        "spec": {"schedulerName": "gpuplace", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "registry.local/perception:1",
                                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}], **spec_extra}}


def _default_pod(name: str, run: str, rng: random.Random) -> dict[str, Any]:
    resources = {"cpu": str(rng.choice([2, 4, 6])), "memory": f"{rng.choice([4, 8, 16, 24])}Gi"}
    gpus = rng.choice([0, 1, 1, 2])
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "nodeSelector": {FLEET_LABEL: run}, "terminationGracePeriodSeconds": 0,
        "tolerations": [{"operator": "Exists"}] if rng.random() < 0.2 else [],
        "containers": [{"name": "c", "image": "registry.local/trainer:1",
                        "resources": {"requests": resources, "limits": limits}}]}}


class Scene:
    """What the hook sets up before gpuplace's pods, and what the checks need to know of it."""

    def __init__(self, run: PipelineRun) -> None:
        self.run = run
        self.others = f"others-{run.config.run_id}"
        self.tainted: set[str] = set()
        self.cordoned: set[str] = set()
        self.zone: dict[str, str] = {}

    async def _placement_sees_the_rules(self, run: PipelineRun) -> None:
        """Until placement has stored every taint, cordon and zone label: pods sent before would be decided on the
        nodes as they were, as kube-scheduler would decide on a cordon it has not seen yet."""
        async with database(run.settings) as uow_factory:
            async def seen() -> bool:
                async with uow_factory() as uow:
                    rows = [n for c in run.clusters for n in await uow.nodes.load_nodes(c)]
                return all((n["name"] not in self.tainted or n["taints"]) and
                           (n["name"] not in self.cordoned or n["unschedulable"]) and
                           (n["name"] not in self.zone or n["labels"].get("zone") == self.zone[n["name"]])
                           for n in rows)
            await eventually(seen, timeout_s=60, what="placement to see the taints, cordons and labels")

    async def __call__(self, run: PipelineRun) -> None:
        rng = random.Random(11)
        async with ClusterApis(run.config.kubeconfigs) as apis:
            for cluster, name in run.clusters.items():
                api = apis[name]
                nodes = [n.name for n in run._fleets()[cluster]]
                patches = []
                for i, node in enumerate(nodes):
                    if i % 10 == 0:
                        self.tainted.add(node)
                        body: dict[str, Any] = {"spec": {"taints": [TAINT]}}
                    elif i % 10 == 1:
                        self.cordoned.add(node)
                        body = {"spec": {"unschedulable": True}}
                    else:
                        self.zone[node] = "b" if i % 3 == 0 else "a"
                        body = {"metadata": {"labels": {"zone": self.zone[node]}}}
                    patches.append(api.core.patch_node(node, body, _preload_content=False))
                await create_all(patches)
                await raw_json(await api.core.create_namespace({"metadata": {"name": self.others}},
                                                               _preload_content=False))
                await create_all([api.core.create_namespaced_pod(
                    self.others, _default_pod(f"trainer-{i}", run.config.run_id, rng), _preload_content=False)
                    for i in range(DEFAULT_PODS // len(run.clusters))])
            await self._placement_sees_the_rules(run)
            for name in run.clusters.values():
                async def settled(api: KubeClusterApi = apis[name]) -> bool:
                    found = await outcomes(api, self.others)
                    return bool(found) and all(o.settled for o in found.values())
                await eventually(settled, timeout_s=120, what="kube-scheduler to place its pods")
            # gpuplace's pods with rules, alongside the perception pods the run submits next
            for k, name in enumerate(run.clusters.values()):
                per = len(run.clusters)
                bodies = [_gpuplace_pod(f"select-{i}", {"nodeSelector": {"zone": "b"}})
                          for i in range(k, SELECTING, per)]
                bodies += [_gpuplace_pod(f"tolerate-{i}", {"tolerations": [{**TAINT, "operator": "Equal"}]})
                           for i in range(k, TOLERATING, per)]
                bodies += [_gpuplace_pod(f"nowhere-{i}", {"affinity": {"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["nowhere"]}]}]}}}})
                    for i in range(k, NOWHERE, per)]
                await create_all([apis[name].core.create_namespaced_pod(run.namespace, b, _preload_content=False)
                                  for b in bodies])


async def test_gpuplace_shares_a_cluster_with_kube_scheduler(kafka_bootstrap: str, database_url: str) -> None:
    kubeconfigs = dict(list(cluster_kubeconfigs().items())[:2])
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url)
    perception = GPUPLACE_PODS - SELECTING - TOLERATING - NOWHERE
    run = PipelineRun(RunConfig(kubeconfigs=kubeconfigs, nodes=NODES, pods=perception, keep=True, timeout_s=900),
                      settings)
    scene = Scene(run)
    try:
        await run.run(before_submit=scene)
        async with ClusterApis(run.config.kubeconfigs) as apis:
            for cluster, name in run.clusters.items():
                fleet = {n.name: n for n in run._fleets()[cluster]}
                await _check_cluster(apis[name], run, scene, fleet)
    finally:
        async with ClusterApis(run.config.kubeconfigs) as apis:
            await delete_quietly(*(api.core.delete_namespace(scene.others) for api in apis.values()))
        await run.cleanup()


async def _check_cluster(api: KubeClusterApi, run: PipelineRun, scene: Scene, fleet: dict[str, Any]) -> None:
    body = await raw_json(await api.core.list_pod_for_all_namespaces(_preload_content=False))
    on_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    ours_waiting = []
    for pod in body["items"]:
        node = pod["spec"].get("nodeName")
        if node in fleet:
            on_node[node].append(pod)
        elif pod["metadata"]["namespace"] == run.namespace:
            ours_waiting.append(pod)
    nodes = {n["metadata"]["name"]: n for n in (await raw_json(await api.core.list_node(
        label_selector=f"{FLEET_LABEL}={run.config.run_id}", _preload_content=False)))["items"]}
    both = {"gpuplace": 0, "default-scheduler": 0}
    for name, pods in on_node.items():
        _check_node(nodes[name], pods, fleet[name].gpu_memory_mib)
        for pod in pods:
            both[pod["spec"].get("schedulerName", "default-scheduler")] += 1
            if pod["spec"].get("schedulerName") == "gpuplace":
                _check_rules(pod, name, scene)
    assert both["gpuplace"] > 0 and both["default-scheduler"] > 0, both
    nowhere = [p for p in ours_waiting if p["metadata"]["name"].startswith("nowhere-")]
    assert len(nowhere) == NOWHERE // len(run.clusters)
    waiting = await outcomes(api, run.namespace)
    events = await raw_json(await api.events.list_namespaced_event(run.namespace, _preload_content=False))
    failed = {e["regarding"]["name"] for e in events["items"] if e["reason"] == "FailedScheduling"}
    for pod in ours_waiting:
        name = pod["metadata"]["name"]
        assert waiting[name].unschedulable, f"{name} waits without PodScheduled=False/Unschedulable"
        assert name in failed, f"{name} waits without a FailedScheduling Event"
        if name.startswith("nowhere-"):
            assert "didn't match Pod's node affinity/selector" in waiting[name].unschedulable


def _check_node(node: dict[str, Any], pods: list[dict[str, Any]], gpu_memory_mib: int) -> None:
    """Both schedulers' pods together fit the node, as the apiserver has them."""
    name, allocatable = node["metadata"]["name"], node["status"]["allocatable"]
    cpu = sum(_request(p, "cpu") for p in pods)
    memory = sum(_request(p, "memory") for p in pods)
    assert cpu <= quantity.milli(allocatable["cpu"]), f"{name}: CPU over-committed ({cpu}m)"
    assert memory <= quantity.memory_mib(allocatable["memory"], bare_unit_mib=False), f"{name}: memory"
    assert len(pods) <= int(allocatable["pods"]), f"{name}: too many pods"
    whole = sum(_request(p, "nvidia.com/gpu") for p in pods if p["spec"].get("schedulerName") != "gpuplace")
    per_gpu: dict[int, int] = defaultdict(int)
    for pod in pods:
        raw = (pod["metadata"].get("annotations") or {}).get(ASSIGNMENT)
        for gpu in json.loads(raw)["gpus"] if raw else []:
            per_gpu[gpu["index"]] += gpu["memory_mib"]
    # The device plugin gives other schedulers' pods whole GPUs gpuplace has not touched: they must exist.
    assert whole + len(per_gpu) <= int(allocatable["nvidia.com/gpu"]), f"{name}: GPUs over-committed"
    assert all(used <= gpu_memory_mib for used in per_gpu.values()), f"{name}: GPU memory over-committed"


def _check_rules(pod: dict[str, Any], node: str, scene: Scene) -> None:
    name = pod["metadata"]["name"]
    assert node not in scene.cordoned, f"{name} on cordoned {node}"
    assert node not in scene.tainted or name.startswith("tolerate-"), f"{name} on tainted {node}"
    if name.startswith("select-"):
        assert scene.zone.get(node) == "b", f"{name} on {node} outside zone b"


def _request(pod: dict[str, Any], resource: str) -> int:
    """The pod's request of `resource` summed over its containers (requests, else limits), in the node's unit:
    milli-CPU, MiB, or a count."""
    parse = {"cpu": quantity.milli, "memory": lambda v: quantity.memory_mib(v, bare_unit_mib=False)}.get(
        resource, quantity.count)
    total = 0
    for c in pod["spec"]["containers"]:
        resources = c.get("resources") or {}
        value = (resources.get("requests") or {}).get(resource) or (resources.get("limits") or {}).get(resource)
        total += parse(str(value)) if value is not None else 0
    return total
