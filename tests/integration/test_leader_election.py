"""Two cluster-watchers of one cluster on the real stack: one publishes, the other takes over when it dies.

- Exactly one publishes: every event content reaches the topics once, not once per replica.
- Killed without releasing its Lease (its task cancelled: a crash), the leader is replaced within the lease duration
  (plus the retry periods client-go's semantics allow), and every pod, created before, during and after the
  takeover, is on the pods topic and is placed.
- A leader that finds another holder in its Lease stops publishing until it has the lease again.
- The elector works with exactly deploy/k8s/rbac.yaml's Role (as gpuplace's service account, impersonated), and
  without it fails saying what is missing; so does a lease namespace that does not exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaConsumer
from kubernetes_asyncio import client

from gpuplace.adapters.dependencies import Misconfigured
from gpuplace.adapters.kafka import client_options, ensure_topics
from gpuplace.adapters.kube.cluster_api import KubeClusterApi, connect, raw_json
from gpuplace.adapters.kube.leader_election import (
    ElectionTiming,
    KubeLeases,
    LeaseConflict,
    LeaseElector,
    LeaseRecord,
    LeaseUnusable,
    micro_time,
)
from gpuplace.bootstrap import cluster_api
from gpuplace.contracts import topics
from gpuplace.harness.pipeline_run import FLEET_LABEL
from gpuplace.harness.shared_cluster import create_all, gpuplace_running, inventory_seen, node_manifest, settle
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from services.cluster_watcher import app as cluster_watcher
from tests.integration.conftest import eventually

pytestmark = pytest.mark.integration

LEASE_S, RENEW_S, RETRY_S = 4, 3.0, 0.5
RBAC_YAML = Path(__file__).parents[2] / "deploy" / "k8s" / "rbac.yaml"
VOLATILE = ("event_id", "occurred_at")


def pod_manifest(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {"gpuplace.io/gpu-memory": "2000Mi"}},
            "spec": {"schedulerName": "gpuplace", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "perception", "image": "registry.invalid/perception:1",
                                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}


@dataclass
class Tap:
    """Every record of the pods and nodes topics, with when it arrived."""

    records: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)

    def pods_seen(self) -> dict[str, float]:
        """pod name -> when its first record arrived."""
        first: dict[str, float] = {}
        for at, topic, event in self.records:
            if topic.startswith(topics.PODS):
                first.setdefault(event["name"], at)
        return first

    async def has(self, names: list[str]) -> bool:
        """A probe for `eventually`: every pod of `names` has a record."""
        return set(names) <= set(self.pods_seen())

    async def first(self, name: str) -> float | None:
        return self.pods_seen().get(name)

    def repeated(self) -> dict[str, int]:
        """Event contents that arrived more than once (what two publishing replicas would cause)."""
        counts = Counter(json.dumps({k: v for k, v in event.items() if k not in VOLATILE}, sort_keys=True)
                         for _, _, event in self.records)
        return {content: n for content, n in counts.items() if n > 1}


@dataclass
class Scene:
    settings: Settings
    kubeconfig: str
    api: KubeClusterApi
    namespace: str
    run: str
    tap: Tap
    watchers: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def lease(self) -> str:
        return cluster_watcher.election_lease(self.settings)

    def start(self, identity: str) -> None:
        settings = self.settings.model_copy(update={"instance_id": identity})
        self.watchers[identity] = asyncio.create_task(cluster_watcher.run(settings, self.stop,
                                                                          kubeconfig=self.kubeconfig))

    async def record(self) -> Any:
        leases = KubeLeases(self.api.api_client, namespace=self.namespace, name=self.lease)
        stored = await leases.get(timeout_s=5)
        return stored.record if stored else None

    async def leader(self) -> str | None:
        record = await self.record()
        return record.holder if record is not None and record.holder in self.watchers else None

    async def create_pods(self, *names: str) -> None:
        await create_all([self.api.core.create_namespaced_pod(self.namespace, pod_manifest(n), _preload_content=False)
                          for n in names])

    def alive(self) -> None:
        for identity, task in self.watchers.items():
            if task.done() and not task.cancelled():
                raise AssertionError(f"cluster-watcher {identity} stopped") from task.exception()


async def _tap(bootstrap: str, names: list[str], tap: Tap, ready: asyncio.Event) -> None:
    consumer = AIOKafkaConsumer(*names, **client_options(bootstrap), auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    loop = asyncio.get_running_loop()
    try:
        ready.set()
        while True:
            batch = await consumer.getmany(timeout_ms=200)
            for messages in batch.values():
                tap.records += [(loop.time(), m.topic, json.loads(m.value)) for m in messages]
    finally:
        await consumer.stop()


@pytest.fixture
async def scene(kafka_bootstrap: str, database_url: str) -> AsyncIterator[Scene]:
    run = uuid.uuid4().hex[:6]
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    cluster, namespace = f"east-{run}", f"gpuplace-lead-{run}"
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=cluster,
                        kubeconfigs={cluster: kubeconfig}, topic_suffix=f".lead-{run}", namespace=namespace,
                        node_label_selector=f"{FLEET_LABEL}={run}", defrag_enabled=False,
                        leader_election_namespace=namespace, leader_election_lease_duration_s=LEASE_S,
                        leader_election_renew_deadline_s=RENEW_S, leader_election_retry_period_s=RETRY_S)
    await ensure_topics(kafka_bootstrap, [settings.topic(t) for t in topics.ALL_TOPICS])
    tap, ready = Tap(), asyncio.Event()
    tapping = asyncio.create_task(_tap(kafka_bootstrap, [settings.topic(topics.PODS), settings.topic(topics.NODES)],
                                       tap, ready))
    async with cluster_api(kubeconfig) as api:
        await raw_json(await api.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False))
        await raw_json(await api.core.create_node(node_manifest(f"lead-{run}", run, gpus=8), _preload_content=False))
        scene = Scene(settings, kubeconfig, api, namespace, run, tap)
        try:
            await asyncio.wait_for(ready.wait(), 30)
            yield scene
        finally:
            scene.stop.set()
            await asyncio.gather(*scene.watchers.values(), return_exceptions=True)
            tapping.cancel()
            await asyncio.gather(tapping, return_exceptions=True)
            with contextlib.suppress(Exception):
                await raw_json(await api.core.delete_namespace(namespace, _preload_content=False))
            with contextlib.suppress(Exception):
                await raw_json(await api.core.delete_node(f"lead-{run}", _preload_content=False))


async def test_of_two_watchers_exactly_one_publishes(scene: Scene) -> None:
    scene.start("watcher-a")
    scene.start("watcher-b")
    leader = await eventually(scene.leader, what="one of the two watchers to hold the lease")
    pods = [f"slam-{i}" for i in range(6)]
    await scene.create_pods(*pods)
    await eventually(lambda: scene.tap.has(pods), what="every pod on the pods topic")
    await asyncio.sleep(4 * RETRY_S)  # time for a second publisher's copies to arrive, if there were one
    scene.alive()
    assert any(topic.startswith(topics.NODES) for _, topic, _ in scene.tap.records), "the node was not published"
    assert scene.tap.repeated() == {}, "an event reached the topics twice: two watchers published"
    record = await scene.record()
    assert (record.holder, record.transitions) == (leader, 0), "the lease changed hands with both watchers alive"


async def test_a_killed_leader_is_replaced_within_the_lease_and_no_pod_is_lost(scene: Scene) -> None:
    loop = asyncio.get_running_loop()
    async with gpuplace_running(scene.settings, scene.kubeconfig, watcher=False):
        scene.start("watcher-a")
        scene.start("watcher-b")
        leader = await eventually(scene.leader, what="one of the two watchers to hold the lease")
        follower = next(identity for identity in scene.watchers if identity != leader)
        await inventory_seen(scene.settings, 1)
        before = [f"before-{i}" for i in range(4)]
        await scene.create_pods(*before)
        await eventually(lambda: scene.tap.has(before), what="the first pods published")

        crashed = scene.watchers.pop(leader)
        crashed.cancel()  # a crash: the lease is not released
        await asyncio.gather(crashed, return_exceptions=True)
        killed_at = loop.time()
        during = [f"during-{i}" for i in range(4)]
        await scene.create_pods(*during)

        async def taken_over() -> float | None:
            return loop.time() if await scene.leader() == follower else None

        took = await eventually(taken_over, timeout_s=LEASE_S * 4, what=f"{follower} to take the lease")
        waited = took - killed_at
        # The follower saw the last renewal at most 2.2 retry periods after it was written, which was at most a
        # retry period before the crash; it then waits the lease from when it saw it. Never less than the lease
        # minus one retry period (the crash came at most that long after the last renewal).
        assert LEASE_S - RETRY_S - 0.5 <= waited <= LEASE_S + 3.2 * RETRY_S + 1.0, waited
        record = await scene.record()
        assert record.transitions == 1, record

        after = [f"after-{i}" for i in range(4)]
        await scene.create_pods(*after)
        everyone = before + during + after
        await eventually(lambda: scene.tap.has(everyone), timeout_s=30,
                         what="every pod, before, during and after the takeover, on the pods topic")
        placed = await settle(scene.api, scene.namespace, len(everyone), timeout_s=90)
        assert {name for name, outcome in placed.items() if outcome.node} == set(everyone), placed
        scene.alive()


async def test_a_leader_that_finds_another_holder_stops_publishing_until_the_lease_is_back(scene: Scene) -> None:
    loop = asyncio.get_running_loop()
    scene.start("watcher-a")
    await eventually(scene.leader, what="the watcher to hold the lease")
    leases = KubeLeases(scene.api.api_client, namespace=scene.namespace, name=scene.lease)
    for _ in range(10):  # the leader renews every retry period: a renewal between read and write is a 409
        stored = await leases.get(timeout_s=5)
        assert stored is not None
        now = micro_time()
        try:
            await leases.replace(stored, LeaseRecord("intruder", LEASE_S, now, now, stored.record.transitions + 1),
                                 timeout_s=5)
            break
        except LeaseConflict:
            continue
    else:
        pytest.fail("could not write the intruder into the Lease in 10 tries")
    stolen_at = loop.time()
    await asyncio.sleep(2 * RETRY_S + 0.3)  # the watcher reads the Lease every retry period: it has stopped by now
    await scene.create_pods("while-deposed")

    seen = await eventually(lambda: scene.tap.first("while-deposed"), timeout_s=LEASE_S * 4,
                            what="the pod published once the watcher has the lease back")
    assert seen - stolen_at >= LEASE_S - 0.5, f"published {seen - stolen_at:.1f} s after losing the lease"
    record = await scene.record()
    assert (record.holder, record.transitions) == ("watcher-a", stored.record.transitions + 2)
    scene.alive()


async def test_a_missing_lease_namespace_fails_with_the_reason(scene: Scene) -> None:
    settings = scene.settings.model_copy(update={"leader_election_namespace": f"absent-{scene.run}"})
    with pytest.raises(Misconfigured, match=f"namespace absent-{scene.run} does not exist.*"
                                            "GPUPLACE_LEADER_ELECTION_NAMESPACE"):
        await asyncio.wait_for(cluster_watcher.run(settings, asyncio.Event(), kubeconfig=scene.kubeconfig), 30)


async def test_the_elector_needs_exactly_the_rbac_role(scene: Scene) -> None:
    """As gpuplace's service account (impersonated by the stack's admin): refused with the reason before the Role
    is bound; with deploy/k8s/rbac.yaml's Role bound in the lease namespace, it leads, renews and releases."""
    documents = {doc["kind"]: doc for doc in yaml.safe_load_all(RBAC_YAML.read_text()) if doc}
    account = documents["ServiceAccount"]["metadata"]["name"]
    impersonated = await connect(scene.kubeconfig)
    impersonated.set_default_header("Impersonate-User", f"system:serviceaccount:{scene.namespace}:{account}")
    timing = ElectionTiming(LEASE_S, RENEW_S, RETRY_S)
    try:
        leases = KubeLeases(impersonated, namespace=scene.namespace, name=f"rbac-{scene.run}")
        with pytest.raises(LeaseUnusable, match="may not get .*deploy/k8s/rbac.yaml"):
            await LeaseElector(leases, identity="sa", timing=timing).run(asyncio.Event(), asyncio.Event().wait)

        rbac = {kind: {**documents[kind], "metadata": {**documents[kind]["metadata"], "namespace": scene.namespace}}
                for kind in ("Role", "RoleBinding")}
        rbac["RoleBinding"]["subjects"] = [{**rbac["RoleBinding"]["subjects"][0], "namespace": scene.namespace}]
        await create_all([
            scene.api.core.create_namespaced_service_account(scene.namespace, {"metadata": {"name": account}},
                                                             _preload_content=False)])
        authorization = client.RbacAuthorizationV1Api(scene.api.api_client)
        await authorization.create_namespaced_role(scene.namespace, rbac["Role"])
        await authorization.create_namespaced_role_binding(scene.namespace, rbac["RoleBinding"])

        async def granted() -> bool:
            try:
                await leases.get(timeout_s=5)
            except LeaseUnusable:
                return False
            return True

        await eventually(granted, what="the RoleBinding to take effect")
        stop, leading = asyncio.Event(), asyncio.Event()

        async def lead() -> None:
            leading.set()
            await asyncio.sleep(3 * RETRY_S)  # a few renewals
            stop.set()
            await asyncio.Event().wait()

        await asyncio.wait_for(LeaseElector(leases, identity="sa", timing=timing).run(stop, lead), 30)
        stored = await KubeLeases(scene.api.api_client, namespace=scene.namespace, name=f"rbac-{scene.run}").get(
            timeout_s=5)
        assert leading.is_set() and stored is not None
        assert (stored.record.holder, stored.record.lease_duration_s) == ("", 1), "not released"
    finally:
        await impersonated.close()
