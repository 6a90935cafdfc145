"""/metrics on the real stack: placement and cluster-watcher run as a deployment runs them (runtime.run_services,
one Telemetry, the HTTP port open), and a scraper reads /metrics over HTTP all along while pods are bound, one
waits, and a defragmentation evicts a pod (test_defrag_e2e's fleet: kube-controller-manager replaces the evicted
Deployment pod, KWOK runs the pods).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuplace.adapters.kafka import ensure_topics, partition_of
from gpuplace.adapters.kube.cluster_api import raw_json
from gpuplace.adapters.metrics import MIB
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import cluster_api
from gpuplace.contracts import topics
from gpuplace.harness.pipeline_run import ensure_priority_classes
from services import http_server, runtime
from services.cluster_watcher import app as cluster_watcher
from services.placement import app as placement
from services.telemetry import Telemetry
from tests.integration.conftest import eventually
from tests.integration.test_defrag_e2e import A100, V100, Fleet, _bound_app_pod, fragment, scene_settings

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

Sample = tuple[str, frozenset[tuple[str, str]]]
PARTITIONS = 4


class Scraper:
    """GET /metrics every `every_s` while it runs; every scrape kept, parsed, for the test to read."""

    def __init__(self, url: str, every_s: float = 0.3) -> None:
        self.url, self.every_s = url, every_s
        self.scrapes: list[dict[Sample, float]] = []
        self.failures: list[str] = []

    async def scrape(self) -> dict[Sample, float]:
        async with aiohttp.ClientSession() as session, session.get(f"{self.url}/metrics") as response:
            if response.status != 200:
                self.failures.append(f"{response.status}: {await response.text()}")
            samples = {(s.name, frozenset(s.labels.items())): s.value
                       for family in text_string_to_metric_families(await response.text()) for s in family.samples}
        self.scrapes.append(samples)
        return samples

    async def run(self) -> None:
        while True:
            await self.scrape()
            await asyncio.sleep(self.every_s)

    def series(self, name: str, **labels: str) -> list[float]:
        """The sample's value in every scrape that had it, in order."""
        key = (name, frozenset(labels.items()))
        return [s[key] for s in self.scrapes if key in s]


@contextlib.asynccontextmanager
async def scraping(url: str) -> AsyncIterator[Scraper]:
    scraper = Scraper(url)
    task = asyncio.create_task(scraper.run())
    try:
        yield scraper
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_placement_metrics_move_as_pods_bind_wait_and_are_evicted(kafka_bootstrap: str,
                                                                       fresh_database: str) -> None:
    # a database of its own: migrated to this branch's head without moving the shared one's schema
    run, kubeconfig, settings = scene_settings(kafka_bootstrap, fresh_database, "metrics")
    cluster, namespace = settings.cluster, settings.namespace
    await migrate.upgrade_async(fresh_database)
    await ensure_topics(kafka_bootstrap, [settings.topic(t) for t in topics.ALL_TOPICS], partitions=PARTITIONS)
    names = [f"m{run}-n1", f"m{run}-n2", f"m{run}-n3"]
    telemetry, stop = Telemetry(), asyncio.Event()
    services = {"placement": placement.run, "cluster-watcher": cluster_watcher.run}
    async with cluster_api(kubeconfig) as api, http_server.serving(telemetry, 0, host="127.0.0.1") as (host, port):
        fleet = Fleet(api, namespace, run)
        await ensure_priority_classes(api)
        await raw_json(await api.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False))
        service_task = asyncio.create_task(runtime.run_services(services, settings, stop, telemetry))
        try:
            async with scraping(f"http://{host}:{port}") as scraper:
                metric = _Reader(scraper, cluster)
                # 1. Bound: a Deployment's pod, then two fillers; a pod too big for any GPU waits.
                await fragment(fleet, names)
                await fleet.pod("too-big", 60000, 0, 100.0)  # 60000 MiB: no GPU has that much at all
                await eventually(lambda: metric.now("gpuplace_pending_pods", reason="unschedulable", equals=1),
                                 timeout_s=60, what="the waiting pod counted as unschedulable")
                assert await metric.now("gpuplace_binds_total") == 3
                assert await metric.now("gpuplace_scheduling_attempts_total", result="reserved") == 3
                assert await metric.now("gpuplace_scheduling_attempts_total", result="unschedulable") >= 1
                share = await metric.now("gpuplace_stranded_gpu_share")
                assert 0 < share < 1  # 7384 + 7384 MiB left on the V100s: holes no 9000 MiB pod can use
                # pending to bound: the three pods bound, timed; the waiting one is not (yet)
                assert await metric.now("gpuplace_pod_scheduling_sli_duration_seconds_count") == 3
                assert 0 < await metric.now("gpuplace_pod_scheduling_sli_duration_seconds_sum") < 3 * 120
                # capacity and allocation per node and model: what the three pods hold
                v100 = {"model": V100[0]}
                assert await metric.now("gpuplace_node_gpus", node=names[0], **v100) == 1
                assert await metric.now("gpuplace_node_gpu_memory_bytes", node=names[0], **v100) == V100[1] * MIB
                for node, held_mib in ((names[0], 9000), (names[1], 9000)):
                    assert await metric.now("gpuplace_node_gpu_memory_allocated_bytes", node=node, **v100) == \
                        held_mib * MIB
                assert await metric.now("gpuplace_node_gpu_memory_allocated_bytes", node=names[2],
                                        model=A100[0]) == 30000 * MIB

                # 2. Evicted: a high-priority pod blocked by fragmentation has the Deployment's pod moved.
                await fleet.pod("urgent", 12000, 100, 33.0)
                assert await eventually(lambda: fleet.node_of("urgent"), timeout_s=120, what="urgent") == names[0]
                await eventually(lambda: _bound_app_pod(fleet, names[2]), timeout_s=90, what="the replacement on n3")
                await eventually(lambda: metric.now("gpuplace_binds_total", equals=5), timeout_s=30,
                                 what="five binds: victim, two fillers, urgent, the victim's replacement")
                assert await metric.now("gpuplace_evictions_total", outcome="evicted") == 1
                assert await metric.now("gpuplace_defrag_plans_total", outcome="planned") == 1
                assert await metric.now("gpuplace_defrag_plans_total", outcome="completed") == 1
                assert await metric.now("gpuplace_scheduling_attempts_total", result="unschedulable") >= 2
                assert await metric.now("gpuplace_pending_pods", reason="unschedulable") == 1  # still too big
                assert await metric.now("gpuplace_pod_scheduling_sli_duration_seconds_count") == 5
                # the victim moved off names[0] (urgent's 12000 MiB took its GPU) and its replacement is on names[2]
                assert await metric.now("gpuplace_node_gpu_memory_allocated_bytes", node=names[0],
                                        model=V100[0]) == 12000 * MIB
                assert await metric.now("gpuplace_node_gpu_memory_allocated_bytes", node=names[2],
                                        model=A100[0]) == (30000 + 9000) * MIB
                await scraper.scrape()

            # Read all along: counters never went back, and each one moved while the scraper watched.
            assert scraper.failures == [] and len(scraper.scrapes) >= 5
            for name, labels in [("gpuplace_binds_total", {}),
                                 ("gpuplace_scheduling_attempts_total", {"result": "reserved"}),
                                 ("gpuplace_scheduling_attempts_total", {"result": "unschedulable"}),
                                 ("gpuplace_evictions_total", {"outcome": "evicted"})]:
                seen = scraper.series(name, cluster=cluster, **labels)
                assert seen == sorted(seen) and seen[0] < seen[-1], (name, labels, seen)
            lag = scraper.series("gpuplace_consumer_lag_records", topic=settings.topic(topics.PODS),
                                 partition=str(partition_of(cluster, PARTITIONS)))
            assert lag and lag[-1] == 0  # placement's consumer caught up with the pods topic
            assert scraper.series("gpuplace_outbox_backlog_rows")
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(service_task, return_exceptions=True), 60)
            await raw_json(await api.core.delete_namespace(namespace, _preload_content=False))
            for name in names:
                with contextlib.suppress(Exception):  # a node the test never created
                    await raw_json(await api.core.delete_node(name, _preload_content=False))


class _Reader:
    """One cluster's sample in a fresh scrape; with `equals`, None until it has that value (for eventually)."""

    def __init__(self, scraper: Scraper, cluster: str) -> None:
        self.scraper, self.cluster = scraper, cluster

    async def now(self, name: str, equals: float | None = None, **labels: str) -> float | None:
        samples = await self.scraper.scrape()
        value = samples.get((name, frozenset({"cluster": self.cluster, **labels}.items())))
        if equals is not None:
            return value if value == equals else None
        assert value is not None, f"{name}{labels} not exposed for {self.cluster}"
        return value

