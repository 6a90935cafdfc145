"""Input the event stream misses, invents or cannot carry, on the real stack (issue 20, cases 1, 4 and 5).

- Pods deleted while cluster-watcher is down are never sent as deleted: placement finds them by reconciling
  PostgreSQL with the apiserver, on restart and periodically, and gives their GPU memory back.
- A forged `deleted` event for a running pod (the broker is reachable by anyone who can write to it) is refused
  and dead-lettered: the pod keeps its GPU memory and the next pod cannot over-commit the GPU.
- A pod whose event would be over Kafka's 1 MB limit (a 200 KB annotation of characters JSON escapes six-fold)
  is published as a small event saying so, and reported invalid; cluster-watcher goes on (it crash-looped).

One KWOK node with one 16,384 MiB GPU; each gpuplace pod asks for 6,000 MiB of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from sqlalchemy import select

from gpuplace.adapters.kafka import client_options, cluster_partitioner, ensure_topics
from gpuplace.adapters.kube.cluster_api import KubeClusterApi
from gpuplace.adapters.postgres import migrate
from gpuplace.adapters.postgres.tables import gpus, nodes, pods
from gpuplace.bootstrap import cluster_api, database
from gpuplace.contracts import topics
from gpuplace.contracts.events import NodeEvent, PodEvent
from gpuplace.harness.pipeline_run import FLEET_LABEL
from gpuplace.harness.shared_cluster import (
    create_all,
    delete_quietly,
    gpuplace_running,
    inventory_seen,
    node_manifest,
    outcomes,
)
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from tests.integration.conftest import equals, eventually

pytestmark = pytest.mark.integration
RECONCILE_S = 3.0


@dataclass
class Scene:
    settings: Settings
    kubeconfig: str
    api: KubeClusterApi
    node: str

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    def pod(self, name: str, memory: str = "6000Mi", **annotations: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": {
            "gpuplace.io/gpu-memory": memory, **annotations}}, "spec": {
            "schedulerName": "gpuplace", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.local/perception:1",
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}

    async def create(self, *names: str, memory: str = "6000Mi", **annotations: str) -> None:
        await create_all([self.api.core.create_namespaced_pod(self.namespace, self.pod(n, memory, **annotations),
                                                              _preload_content=False) for n in names])

    async def bound(self, *names: str) -> dict[str, str]:
        async def all_bound() -> dict[str, str] | None:
            found = await outcomes(self.api, self.namespace)
            nodes = {n: found[n].node for n in names if n in found and found[n].node}
            return nodes if len(nodes) == len(names) else None
        return await eventually(all_bound, timeout_s=60, what=f"{names} bound")

    async def delete(self, *names: str) -> None:
        for name in names:
            await self.api.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)

        async def gone() -> bool:
            return not set(names) & set(await outcomes(self.api, self.namespace))
        await eventually(gone, timeout_s=30, what=f"{names} gone from the apiserver")

    async def gpu_memory_assigned(self) -> int:
        return await self.gpu_memory("memory_assigned_mib")

    async def gpu_memory(self, column: str) -> int:
        """A memory column of the node's one GPU row (memory_assigned_mib, memory_reported_mib, ...)."""
        async with database(self.settings) as uow_factory, uow_factory.engine.connect() as conn:
            return int((await conn.execute(select(gpus.c[column]).where(
                gpus.c.cluster == self.settings.cluster, gpus.c.node == self.node))).scalar_one())

    async def states(self) -> dict[str, str]:
        async with database(self.settings) as uow_factory, uow_factory.engine.connect() as conn:
            rows = await conn.execute(select(pods.c.name, pods.c.state).where(
                pods.c.cluster == self.settings.cluster, pods.c.namespace == self.namespace))
            return dict(rows.all())

    def running(self, *, watcher: bool = True) -> contextlib.AbstractAsyncContextManager[None]:
        """placement (and cluster-watcher) until the block ends; a service that died fails the test."""
        return gpuplace_running(self.settings, self.kubeconfig, watcher=watcher)


@pytest.fixture
async def scene(kafka_bootstrap: str, database_url: str) -> AsyncIterator[Scene]:
    run = uuid.uuid4().hex[:6]
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    cluster, namespace, node = f"east-{run}", f"gpuplace-trust-{run}", f"trust-{run}"
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=cluster,
                        kubeconfigs={cluster: kubeconfig}, topic_suffix=f".trust-{run}", namespace=namespace,
                        leader_election_namespace=namespace,
                        node_label_selector=f"{FLEET_LABEL}={run}", reconcile_interval_s=RECONCILE_S,
                        defrag_enabled=False)
    await migrate.upgrade_async(database_url)
    await ensure_topics(kafka_bootstrap, [settings.topic(t) for t in topics.ALL_TOPICS])
    async with cluster_api(kubeconfig) as api:
        await create_all([api.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False),
                          api.core.create_node(node_manifest(node, run, gpus=1), _preload_content=False)])
        try:
            yield Scene(settings, kubeconfig, api, node)
        finally:
            await delete_quietly(api.core.delete_namespace(namespace), api.core.delete_node(node))


async def test_pods_deleted_while_cluster_watcher_was_down_are_released_when_placement_restarts(scene: Scene):
    async with scene.running():
        await inventory_seen(scene.settings, 1)
        await scene.create("slam-0", "slam-1")
        await scene.bound("slam-0", "slam-1")
        await eventually(lambda: equals(scene.gpu_memory_assigned(), 12000), timeout_s=20, what="12,000 MiB held")
    await scene.delete("slam-0", "slam-1")  # nothing watches: no deleted event will ever be sent
    async with scene.running():
        await eventually(lambda: equals(scene.gpu_memory_assigned(), 0), timeout_s=30,
                         what="the GPU memory of the pods deleted meanwhile given back")
        assert await scene.states() == {"slam-0": "deleted", "slam-1": "deleted"}


async def test_a_deletion_missed_while_cluster_watcher_was_down_is_freed_soon_after_it_restarts(scene: Scene):
    # issue 40: placement kept running, so only its periodic reconciliation (5 minutes) found the pod gone. The
    # restarted watcher's re-list sends every node again, and placement reconciles after that burst.
    settings = scene.settings.model_copy(update={"reconcile_interval_s": 300.0})
    async with gpuplace_running(settings, scene.kubeconfig, watcher=False):
        async with gpuplace_running(settings, scene.kubeconfig, placing=False):
            await inventory_seen(settings, 1)
            await scene.create("slam-0", "slam-1")
            await scene.bound("slam-0", "slam-1")
            await eventually(lambda: equals(scene.gpu_memory_assigned(), 12000), timeout_s=20,
                             what="12,000 MiB held")
        await scene.delete("slam-0")  # no watcher runs: no deleted event will ever be sent
        await asyncio.sleep(2 * RECONCILE_S)
        assert await scene.gpu_memory_assigned() == 12000  # nothing else frees it
        async with gpuplace_running(settings, scene.kubeconfig, placing=False):
            await eventually(lambda: equals(scene.gpu_memory_assigned(), 6000), timeout_s=30,
                             what="the deleted pod's memory freed within 30 s of the watcher's restart")


async def test_a_pod_deleted_while_only_placement_runs_is_released_by_the_periodic_reconciliation(scene: Scene):
    async with scene.running():
        await inventory_seen(scene.settings, 1)
        await scene.create("slam-0")
        await scene.bound("slam-0")
    async with scene.running(watcher=False):
        await eventually(lambda: equals(scene.gpu_memory_assigned(), 6000), timeout_s=20, what="6,000 MiB held")
        await asyncio.sleep(RECONCILE_S)  # the reconciliation on taking the cluster has run: the pod still ran
        assert await scene.gpu_memory_assigned() == 6000
        await scene.delete("slam-0")
        await eventually(lambda: equals(scene.gpu_memory_assigned(), 0), timeout_s=4 * RECONCILE_S,
                         what="the periodic reconciliation to give the memory back")


@contextlib.asynccontextmanager
async def forging(settings: Settings) -> AsyncIterator[Callable[[PodEvent | NodeEvent], Awaitable[str]]]:
    """A producer anyone on the broker could run: `forge(event)` sends it and returns the dead letter's reason."""
    letters = AIOKafkaConsumer(settings.topic(topics.DEADLETTER), **client_options(settings.kafka_bootstrap),
                               auto_offset_reset="earliest", group_id=None)
    forger = AIOKafkaProducer(**client_options(settings.kafka_bootstrap), partitioner=cluster_partitioner)
    await letters.start()
    await forger.start()

    async def forge(event: PodEvent | NodeEvent) -> str:
        topic = topics.PODS if isinstance(event, PodEvent) else topics.NODES
        await forger.send_and_wait(settings.topic(topic), event.model_dump_json(by_alias=True).encode(),
                                   key=event.kafka_key(), headers=[("content-type", b"application/json")])
        return str(json.loads((await asyncio.wait_for(letters.getone(), 30)).value)["reason"])

    try:
        yield forge
    finally:
        await letters.stop()
        await forger.stop()


async def test_a_forged_deletion_of_a_running_pod_is_dead_lettered_and_its_gpu_stays_taken(scene: Scene):
    settings = scene.settings
    async with forging(settings) as forge, scene.running():
        await inventory_seen(settings, 1)
        await scene.create("slam-0")
        await scene.bound("slam-0")
        live = await scene.api.read_pod(scene.namespace, "slam-0")
        reason = await forge(PodEvent(cluster=settings.cluster, kind="deleted", namespace=scene.namespace,
                                      name="slam-0", uid=live["metadata"]["uid"]))
        assert reason.startswith(f"rejected: pod {scene.namespace}/slam-0"), reason
        assert "still runs on the apiserver" in reason
        assert await scene.states() == {"slam-0": "bound"} and await scene.gpu_memory_assigned() == 6000

        await scene.create("big", memory="12000Mi")  # 6,000 + 12,000 > 16,384: must wait, not over-commit
        await eventually(lambda: _state_is(scene, "big", "unschedulable"), timeout_s=30, what="big to wait")
        assert await scene.gpu_memory_assigned() == 6000
        assert (await outcomes(scene.api, scene.namespace))["big"].node is None


async def test_a_forged_bound_event_for_a_waiting_pod_is_dead_lettered_and_the_pod_placed_later(scene: Scene):
    settings = scene.settings
    async with forging(settings) as forge, scene.running():
        await inventory_seen(settings, 1)
        await scene.create("big", memory="12000Mi")
        await scene.bound("big")
        await scene.create("waits", memory="12000Mi")
        await eventually(lambda: _state_is(scene, "waits", "unschedulable"), timeout_s=30, what="waits to wait")
        live = await scene.api.read_pod(scene.namespace, "waits")
        reason = await forge(PodEvent(cluster=settings.cluster, kind="bound", namespace=scene.namespace,
                                      name="waits", uid=live["metadata"]["uid"], node_name=scene.node))
        assert "is not bound to" in reason, reason
        assert (await scene.states())["waits"] == "unschedulable"
        await scene.delete("big")  # room appears: the pod the forged event named is placed as usual
        await scene.bound("waits")


async def test_a_forged_bound_event_read_before_the_pods_pending_event_is_dead_lettered(scene: Scene):
    # found by `gpuplace bench chaos` (issue 40): placement had no row for the pod yet, so the forged event went
    # unchecked, charged the pod on the forged node, and its pending event then found it bound: never placed
    settings = scene.settings
    async with forging(settings) as forge, gpuplace_running(settings, scene.kubeconfig, watcher=False):
        await scene.create("early")  # no watcher runs: placement has not heard of it
        live = await scene.api.read_pod(scene.namespace, "early")
        reason = await forge(PodEvent(cluster=settings.cluster, kind="bound", namespace=scene.namespace,
                                      name="early", uid=live["metadata"]["uid"], node_name=scene.node))
        assert "is not bound to" in reason, reason
        assert await scene.states() == {}
    async with scene.running():
        await scene.bound("early")  # the watcher's pending event places it as usual


async def test_a_forged_node_capacity_or_deletion_changes_nothing(scene: Scene):
    # issue 40: a forged record raised one GPU's memory, and three pods landed on a 16 GiB GPU (49,152 MiB)
    settings = scene.settings
    async with forging(settings) as forge, scene.running():
        await inventory_seen(settings, 1)
        real = NodeEvent(cluster=settings.cluster, kind="upsert", name=scene.node, cpu_milli=16_000,
                         memory_mib=65_536, gpu_model="Tesla-V100-SXM2-16GB", gpu_count=1, gpu_memory_mib=16_384)
        reason = await forge(real.model_copy(update={"gpu_memory_mib": 49_152, "event_id": "forged-capacity"}))
        assert "the apiserver NodeCapacity" in reason, reason
        reason = await forge(NodeEvent(cluster=settings.cluster, kind="deleted", name=scene.node))
        assert "still on the apiserver" in reason, reason
        await scene.create("a", "b", "c", memory="12000Mi")  # one fits the real 16,384 MiB GPU, two wait

        async def one_bound_two_waiting() -> bool:
            return sorted((await scene.states()).values()) == ["bound", "unschedulable", "unschedulable"]
        await eventually(one_bound_two_waiting, timeout_s=30, what="one pod bound and two waiting")
        assert await scene.gpu_memory_assigned() == 12000


async def test_a_node_deleted_and_registered_again_with_pods_running_gets_no_new_pod_on_their_gpus(scene: Scene):
    # issue 40: the node's record went with its deletion and so did its pods' reservations; when the same name
    # came back, new pods were stacked on GPUs the running pods still used. Pods, not node records, are the truth.
    async with scene.running():
        await inventory_seen(scene.settings, 1)
        await scene.create("slam-0", "slam-1")
        await scene.bound("slam-0", "slam-1")
        await eventually(lambda: equals(scene.gpu_memory_assigned(), 12000), timeout_s=20, what="12,000 MiB held")
        manifest = node_manifest(scene.node, scene.settings.node_label_selector.split("=", 1)[1], gpus=1)
        await scene.api.core.delete_node(scene.node)
        await eventually(lambda: _node_absent(scene), timeout_s=30, what="placement to see the node leave")
        await scene.api.core.create_node(manifest)  # registered again at once: its pods were never deleted
        await inventory_seen(scene.settings, 1)
        assert {o.node for o in (await outcomes(scene.api, scene.namespace)).values()} == {scene.node}

        await scene.create("big", memory="6000Mi")  # 12,000 + 6,000 > 16,384: must wait, not over-commit
        await eventually(lambda: _state_is(scene, "big", "unschedulable"), timeout_s=30, what="big to wait")
        assert await scene.gpu_memory_assigned() == 12000
        await scene.delete("slam-0")
        await scene.bound("big")  # room again once a running pod goes
        await eventually(lambda: equals(scene.gpu_memory_assigned(), 12000), timeout_s=20, what="12,000 MiB held")


async def test_a_gpu_whose_reported_memory_really_drops_below_what_is_held_gets_no_new_pod(scene: Scene):
    # issue 40: the watcher's correct, smaller value was refused by a database check and dead-lettered
    async with scene.running():
        await inventory_seen(scene.settings, 1)
        await scene.create("slam-0", "slam-1")
        await scene.bound("slam-0", "slam-1")  # 12,000 of 16,384 MiB
        await scene.api.core.patch_node(scene.node, {"metadata": {"labels": {"nvidia.com/gpu.memory": "8192"}}})
        await eventually(lambda: equals(scene.gpu_memory("memory_reported_mib"), 8192), timeout_s=30,
                         what="the smaller GPU recorded")
        assert await scene.gpu_memory_assigned() == 12000
        await scene.create("small", memory="2000Mi")  # fits 16,384 - 12,000; the GPU has 8,192 now: it waits
        await eventually(lambda: _state_is(scene, "small", "unschedulable"), timeout_s=30, what="small to wait")
        await scene.delete("slam-0", "slam-1")
        await scene.bound("small")


async def _node_absent(scene: Scene) -> bool:
    async with database(scene.settings) as uow_factory, uow_factory.engine.connect() as conn:
        absent = (await conn.execute(select(nodes.c.absent_since).where(
            nodes.c.cluster == scene.settings.cluster, nodes.c.name == scene.node))).scalar_one_or_none()
    return absent is not None


async def _state_is(scene: Scene, name: str, state: str) -> bool:
    return (await scene.states()).get(name) == state


@pytest.mark.parametrize("annotations", [{"gpuplace.io/gpu-memory": "1e400"}, {"gpuplace.io/deadline-ms": "1e400"},
                                         {"gpuplace.io/gpu-memory": "9223372036854775807Gi"}],
                         ids=["gpu-memory-1e400", "deadline-1e400", "gpu-memory-beyond-int64"])
async def test_a_pod_whose_annotation_no_number_holds_is_reported_and_the_cluster_goes_on(scene: Scene, annotations):
    async with scene.running():
        await inventory_seen(scene.settings, 1)
        await scene.create("absurd", **annotations)
        await scene.create("after")
        await scene.bound("after")
        await eventually(lambda: _state_is(scene, "absurd", "invalid"), timeout_s=30, what="absurd reported invalid")


async def test_a_pod_whose_event_is_over_the_size_limit_is_reported_and_the_watcher_goes_on(scene: Scene):
    async with scene.running():
        await inventory_seen(scene.settings, 1)
        # 200,000 control characters: 200 KB in the apiserver (its annotation limit is 256 KiB), 1.2 MB as JSON
        await scene.create("huge", **{"gpuplace.io/workload": "\x01" * 200_000})
        await scene.create("after")
        await scene.bound("after")
        await eventually(lambda: _state_is(scene, "huge", "invalid"), timeout_s=30, what="huge reported invalid")
        async with database(scene.settings) as uow_factory, uow_factory.engine.connect() as conn:
            reason = (await conn.execute(select(pods.c.reason).where(
                pods.c.cluster == scene.settings.cluster, pods.c.name == "huge"))).scalar_one()
        assert "exceeds the 900000-byte event limit" in reason, reason
