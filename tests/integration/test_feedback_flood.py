"""Feedback under a flood of unschedulable pods, on the local cluster (issue 40, build item 5).

In issue 40 a flood of unschedulable pods filled the feedback queue (1,000 reports, as client-go's event
broadcaster holds): 931 FailedScheduling reports and 11 Scheduled Events were dropped, with ~930 warning lines.
Here 1,000 pods that fit nowhere (20,000 MiB asked of 16,384 MiB GPUs) arrive in placement's batches, then 5 that
fit, through PlacementService on PostgreSQL and KubeClusterApi on the real apiserver, whose feedback calls wait
until the flood is in (SlowFeedback). The local apiserver takes reports about as fast as placement makes them, so
without the wait whether the old queue overflowed hung on the machine's load (2,000 pods dropped 370 reports
once, none the next time); a busy apiserver or a rate-limited client is slower than a flood.

Afterwards every waiting pod has exactly one FailedScheduling Event series, every bound pod its Scheduled Event
(behind the flood, it is what the old queue dropped), and the feedback log holds at most a handful of lines.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import pytest
from kubernetes_asyncio import client

from gpuplace.adapters.kube import translate
from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.adapters.postgres import migrate
from gpuplace.adapters.postgres.unit_of_work import PostgresUnitOfWorkFactory, make_engine
from gpuplace.harness.shared_cluster import create_all
from gpuplace.usecases.decide import decider
from gpuplace.usecases.placement import PlacementService

from .conftest import eventually

pytestmark = pytest.mark.integration

WAITING, FITTING, BATCH = 1000, 5, 256  # BATCH: placement's Kafka reads
CLUSTER = "east"


class SlowFeedback(KubeClusterApi):
    """The real adapter whose reports start only once `opened` is set; binds are not held."""

    def __init__(self, kube: client.ApiClient) -> None:
        super().__init__(kube)
        self.opened = asyncio.Event()

    async def report_unschedulable(self, namespace: str, name: str, uid: str, message: str) -> None:
        await self.opened.wait()
        await super().report_unschedulable(namespace, name, uid, message)

    async def report_scheduled(self, namespace: str, name: str, uid: str, node: str, gpus_text: str) -> None:
        await self.opened.wait()
        await super().report_scheduled(namespace, name, uid, node, gpus_text)


def _pod(name: str, memory: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {"gpuplace.io/gpu-memory": memory}},
            "spec": {"schedulerName": "gpuplace", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "registry.invalid/slam:1",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


async def _ready_node(core: client.CoreV1Api, name: str) -> dict[str, Any] | None:
    """The node as the apiserver has it, once KWOK has made it Ready."""
    node = await raw_json(await core.read_node(name, _preload_content=False))
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
    return node if ready else None


async def _events_by_pod(kube: client.ApiClient, namespace: str) -> dict[str, Counter[str]]:
    """pod name -> how many Events of each reason are about it (events.k8s.io: one object per series)."""
    listed = await raw_json(await client.EventsV1Api(kube).list_namespaced_event(namespace, _preload_content=False))
    found: dict[str, Counter[str]] = {}
    for event in listed["items"]:
        found.setdefault(event["regarding"]["name"], Counter())[event["reason"]] += 1
    return found


async def test_a_flood_of_unschedulable_pods_gets_one_event_series_each_and_no_scheduled_event_is_lost(
    kube: client.ApiClient, namespace: str, gpu_node: dict[str, Any], fresh_database: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    core = client.CoreV1Api(kube)
    waiting = [f"waits-{i:04d}" for i in range(WAITING)]
    fitting = [f"fits-{i}" for i in range(FITTING)]
    await create_all([core.create_namespaced_pod(namespace, _pod(n, "20000Mi"), _preload_content=False)
                      for n in waiting] +
                     [core.create_namespaced_pod(namespace, _pod(n, "9420Mi"), _preload_content=False)
                      for n in fitting])
    listed = await raw_json(await core.list_namespaced_pod(namespace, _preload_content=False))
    by_name = {p["metadata"]["name"]: translate.pod_event(p, cluster=CLUSTER, region="local")
               for p in listed["items"]}
    pods = [by_name[n] for n in waiting + fitting]  # the fitting ones last: behind the flood

    await migrate.upgrade_async(fresh_database)
    engine = make_engine(fresh_database)
    api = SlowFeedback(kube)
    placement = PlacementService(PostgresUnitOfWorkFactory(engine), {CLUSTER: api},
                                 decider("bestfit"), policy="bestfit")
    try:
        node = await eventually(lambda: _ready_node(core, gpu_node["metadata"]["name"]), what="the node Ready")
        await placement.on_node(translate.node_event(node, cluster=CLUSTER, region="local"))
        for start in range(0, len(pods), BATCH):
            await placement.on_pods(pods[start:start + BATCH])
        api.opened.set()
        await placement.drain()
    finally:
        await engine.dispose()

    events = await _events_by_pod(kube, namespace)
    not_one_series = [n for n in waiting if events.get(n) != Counter(FailedScheduling=1)]
    no_scheduled = [n for n in fitting if events.get(n) != Counter(Scheduled=1)]
    # by name, so the test also runs against the code before usecases/report_queue (where it fails)
    loggers = {"gpuplace.usecases.report_queue", "gpuplace.usecases.feedback", "gpuplace.adapters.kube.cluster_api"}
    lines = [r.getMessage() for r in caplog.records if r.name in loggers]
    assert (len(not_one_series), no_scheduled, len(lines)) == (0, [], min(len(lines), 3)), (
        not_one_series[:5], [events.get(n) for n in no_scheduled], lines[:5])
    bound = await raw_json(await core.list_namespaced_pod(namespace, _preload_content=False))
    assert sorted(p["metadata"]["name"] for p in bound["items"] if p["spec"].get("nodeName")) == fitting
