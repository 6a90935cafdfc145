"""Defragmentation on the real stack (issue 7): kube-controller-manager recreates Deployment pods and
enforces a PodDisruptionBudget; KWOK runs the pods.

Three one-GPU nodes end up with 7384, 7384 and 10960 MiB free: a 12000 MiB pod fits nowhere although the
free memory exists in total. Moving the low-priority 9000 MiB Deployment pod from n1 to n3 opens room.
- with a PDB (minAvailable 1) the eviction is refused: the plan is aborted and every reservation released;
- without it: the pod is evicted, its replacement adopts the place promised on n3, and the blocked
  high-priority pod is bound on n1.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from kubernetes_asyncio import client
from sqlalchemy import select

from gpuplace.adapters.kafka import client_options
from gpuplace.adapters.kube.cluster_api import raw_json
from gpuplace.adapters.postgres import migrate
from gpuplace.adapters.postgres.tables import gpus, pods
from gpuplace.bootstrap import cluster_api, database
from gpuplace.contracts import topics
from gpuplace.core.model import Node
from gpuplace.harness.pipeline_run import FLEET_LABEL, PRIORITY_CLASSES, ensure_priority_classes, kwok_node_manifest
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from services.cluster_watcher import app as cluster_watcher
from services.placement import app as placement
from tests.integration.conftest import eventually, run_id

pytestmark = pytest.mark.integration

V100, A100 = ("Tesla-V100-SXM2-16GB", 16384), ("NVIDIA-A100-SXM4-40GB", 40960)


def _pod_spec(memory_mib: int, priority: int, deadline_ms: float, labels: dict[str, str] | None = None) -> dict:
    return {
        "metadata": {"labels": labels or {}, "annotations": {
            "gpuplace.io/gpu-memory": f"{memory_mib}Mi", "gpuplace.io/deadline-ms": str(deadline_ms)}},
        "spec": {"schedulerName": "gpuplace", "priorityClassName": PRIORITY_CLASSES[priority],
                 "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "registry.local/perception:1",
                                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
    }


class Fleet:
    def __init__(self, api: Any, namespace: str, run: str) -> None:
        self.api, self.namespace, self.run = api, namespace, run

    async def node(self, name: str, product: tuple[str, int]) -> None:
        node = Node.with_gpus(name, 32000, 262144, 1, product[0], product[1])
        await raw_json(await self.api.core.create_node(kwok_node_manifest(node, self.run), _preload_content=False))

    async def pod(self, name: str, memory_mib: int, priority: int, deadline_ms: float) -> None:
        body = _pod_spec(memory_mib, priority, deadline_ms)
        body["metadata"]["name"] = name
        await raw_json(await self.api.core.create_namespaced_pod(self.namespace, body, _preload_content=False))

    async def node_of(self, name: str) -> str | None:
        found = await self.api.read_pod(self.namespace, name)
        return (found or {}).get("spec", {}).get("nodeName")

    async def app_pods(self) -> list[dict]:
        body = await raw_json(await self.api.core.list_namespaced_pod(
            self.namespace, label_selector="app=victim", _preload_content=False))
        return [p for p in body["items"] if not p["metadata"].get("deletionTimestamp")]


def scene_settings(kafka_bootstrap: str, database_url: str, purpose: str) -> tuple[str, str, Settings]:
    """A run id, the stack's first kubeconfig, and settings for a cluster, namespace (leader election's too) and
    topics of the run's own: what each test on this scene starts its services with."""
    run = run_id()
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    cluster, namespace = f"east-{run}", f"gpuplace-{purpose}-{run}"
    return run, kubeconfig, Settings(
        kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=cluster, kubeconfig=kubeconfig,
        kubeconfigs={cluster: kubeconfig}, topic_suffix=f".{purpose}-{run}", namespace=namespace,
        leader_election_namespace=namespace, node_label_selector=f"{FLEET_LABEL}={run}", policy="bestfit")


async def fragment(fleet: Fleet, names: list[str]) -> dict:
    """The scene (module docstring): the Deployment `victim`'s 9000 MiB pod on V100 names[0], filler-a (9000 MiB)
    on V100 names[1], filler-b (30000 MiB) on A100 names[2], each bound before the next node exists. Returns
    the victim's first pod."""
    await fleet.node(names[0], V100)
    apps = client.AppsV1Api(fleet.api.api_client)
    await apps.create_namespaced_deployment(fleet.namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "victim"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "victim"}},
                 "template": _pod_spec(9000, 0, 100.0, {"app": "victim"})}})
    first = await eventually(lambda: _bound_app_pod(fleet, names[0]), timeout_s=90, what="victim on n1")
    await fleet.node(names[1], V100)
    await fleet.pod("filler-a", 9000, 1000, 10.0)
    assert await eventually(lambda: fleet.node_of("filler-a"), timeout_s=60, what="filler-a") == names[1]
    await fleet.node(names[2], A100)
    await fleet.pod("filler-b", 30000, 1000, 10.0)
    assert await eventually(lambda: fleet.node_of("filler-b"), timeout_s=60, what="filler-b") == names[2]
    return first


async def test_moves_pods_for_a_blocked_pod_and_aborts_cleanly_under_a_budget(kafka_bootstrap: str,
                                                                            database_url: str) -> None:
    run, kubeconfig, settings = scene_settings(kafka_bootstrap, database_url, "defrag")
    cluster, namespace = settings.cluster, settings.namespace
    await migrate.upgrade_async(database_url)
    stop = asyncio.Event()
    names = [f"d{run}-n1", f"d{run}-n2", f"d{run}-n3"]
    async with cluster_api(kubeconfig) as api:
        fleet = Fleet(api, namespace, run)
        await ensure_priority_classes(api)
        await raw_json(await api.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False))
        services = [asyncio.create_task(placement.run(settings, stop)),
                    asyncio.create_task(cluster_watcher.run(settings, stop, kubeconfig=kubeconfig))]
        try:
            first = await fragment(fleet, names)
            before = await _assigned(settings, cluster)
            assert before == {names[0]: 9000, names[1]: 9000, names[2]: 30000}

            # 1. A budget forbids the move: aborted, every reservation released, nothing evicted.
            policy_api = client.PolicyV1Api(api.api_client)
            await policy_api.create_namespaced_pod_disruption_budget(namespace, {
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "victim"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "victim"}}}})
            await eventually(lambda: _budget_computed(policy_api, namespace), timeout_s=60, what="PDB status")
            await fleet.pod("urgent-a", 12000, 100, 33.0)
            aborted = await _placement_event(kafka_bootstrap, settings.topic(topics.PLACEMENTS), "defrag_aborted")
            assert aborted["pod"] == "urgent-a" and "PodDisruptionBudget" in aborted["reasons"]["reason"]
            assert [p["metadata"]["uid"] for p in await fleet.app_pods()] == [first["metadata"]["uid"]]
            assert await _assigned(settings, cluster) == before
            assert await _states(settings, cluster, "urgent-a") == ["unschedulable"]
            assert await _states(settings, cluster, None, state="promised") == []

            # 2. Without the budget: evicted, replaced on the promised place, the blocked pod bound.
            await policy_api.delete_namespaced_pod_disruption_budget("victim", namespace)
            await raw_json(await api.core.delete_namespaced_pod("urgent-a", namespace, _preload_content=False))
            await asyncio.sleep(1.0)
            await fleet.pod("urgent-b", 12000, 100, 33.0)
            assert await eventually(lambda: fleet.node_of("urgent-b"), timeout_s=120, what="urgent-b") == names[0]
            replacement = await eventually(lambda: _bound_app_pod(fleet, names[2]), timeout_s=90,
                                           what="the victim's replacement on n3")
            assert replacement["metadata"]["uid"] != first["metadata"]["uid"]
            assert await _assigned(settings, cluster) == {names[0]: 12000, names[1]: 9000, names[2]: 39000}
            assert await _states(settings, cluster, None, state="promised") == []
        finally:
            stop.set()
            await asyncio.gather(*services, return_exceptions=True)
            await raw_json(await api.core.delete_namespace(namespace, _preload_content=False))
            for name in names:
                try:
                    await raw_json(await api.core.delete_node(name, _preload_content=False))
                except Exception:  # noqa: BLE001 - a node the test never created
                    pass


async def _bound_app_pod(fleet: Fleet, node: str) -> dict | None:
    return next((p for p in await fleet.app_pods() if p["spec"].get("nodeName") == node), None)


async def _budget_computed(policy_api: client.PolicyV1Api, namespace: str) -> bool:
    pdb = await policy_api.read_namespaced_pod_disruption_budget("victim", namespace)
    return bool(pdb.status and pdb.status.observed_generation == pdb.metadata.generation
                and pdb.status.current_healthy == 1)


async def _assigned(settings: Settings, cluster: str) -> dict[str, int]:
    async with database(settings) as uow_factory, uow_factory.engine.connect() as conn:
        rows = await conn.execute(select(gpus.c.node, gpus.c.memory_assigned_mib).where(gpus.c.cluster == cluster))
        return {r.node: r.memory_assigned_mib for r in rows}


async def _states(settings: Settings, cluster: str, name: str | None, *, state: str | None = None) -> list[str]:
    async with database(settings) as uow_factory, uow_factory.engine.connect() as conn:
        query = select(pods.c.state).where(pods.c.cluster == cluster)
        query = query.where(pods.c.name == name) if name else query.where(pods.c.state == state)
        return [r.state for r in await conn.execute(query)]


async def _placement_event(bootstrap: str, topic: str, kind: str) -> dict:
    consumer = AIOKafkaConsumer(topic, **client_options(bootstrap), auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    try:
        async def probe() -> dict | None:
            batch = await consumer.getmany(timeout_ms=500)
            return next((e for msgs in batch.values() for m in msgs if (e := json.loads(m.value))["kind"] == kind),
                        None)

        return await eventually(probe, timeout_s=90, what=f"a {kind} placement event")
    finally:
        await consumer.stop()
