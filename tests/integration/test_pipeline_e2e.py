"""The pipeline end to end on the real stack (issue 4): two kube-apiservers, Kafka, PostgreSQL, KWOK.

200 fake nodes x 8 GPUs over two clusters, 2,000 pending perception pods asking for GPU memory slices.
Before any pod is submitted, one malformed message goes to each input topic: each must reach the
dead-letter topic, be counted on the run's /metrics, and change nothing. Then every pod must be bound exactly
once, no GPU over its memory,
PostgreSQL must agree with the apiservers, and every decision must have its placements event.
A smaller run with two placement workers in one consumer group, each owning one cluster, must hold the same.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections import Counter
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from gpuplace.adapters.kafka import client_options, list_topics, partition_of
from gpuplace.adapters.kube.vocabulary import ASSIGNMENT
from gpuplace.adapters.postgres.tables import allocations, decisions, gpus, nodes, pods
from gpuplace.bootstrap import database
from gpuplace.contracts import topics
from gpuplace.harness.pipeline_run import PipelineRun, RunConfig
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

NODES = int(os.environ.get("GPUPLACE_E2E_NODES", "200"))
PODS = int(os.environ.get("GPUPLACE_E2E_PODS", "2000"))

BAD_MESSAGES = {  # one per input topic, each wrong in a different way
    topics.PODS: b'{"kind": "pending", "namespace": "x"',  # truncated JSON
    topics.NODES: b'{"kind": "upsert", "cluster": "east", "name": "n1", "gpu_count": -1}',  # out of range
    topics.TELEMETRY: b'{"cluster": "east", "node": "n1", "gpu_index": 0, "memory_total_mib": 10, '
                      b'"memory_used_mib": 20}',  # used > total
    topics.LATENCY: b'{"cluster": "east", "namespace": "ns", "pod": "p", "workload": "w", "window_s": 10, '
                    b'"frames": 5, "p50_ms": 9, "p95_ms": 3, "p99_ms": 4}',  # p95 < p50
}


async def _state_fingerprint(settings: Settings, clusters: list[str]) -> dict[str, Any]:
    async with database(settings) as uow_factory, uow_factory.engine.connect() as conn:
        counts = {}
        for table in (nodes, gpus, pods, allocations, decisions):
            counts[table.name] = (await conn.execute(
                select(func.count()).select_from(table).where(table.c.cluster.in_(clusters)))).scalar_one()
        counts["assigned_mib"] = (await conn.execute(select(func.coalesce(func.sum(gpus.c.memory_assigned_mib), 0))
                                                     .where(gpus.c.cluster.in_(clusters)))).scalar_one()
        return counts


async def _read_topic(bootstrap: str, topic: str, *, expect: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    consumer = AIOKafkaConsumer(topic, **client_options(bootstrap), auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    records: list[dict[str, Any]] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        idle_rounds = 0
        while loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=1000)
            got = [json.loads(m.value) for msgs in batch.values() for m in msgs]
            records += got
            idle_rounds = 0 if got else idle_rounds + 1
            if len(records) >= expect and idle_rounds >= 2:
                break
    finally:
        await consumer.stop()
    return records


async def test_pipeline_places_every_pod_once_across_two_clusters(kafka_bootstrap: str, database_url: str) -> None:
    kubeconfigs = cluster_kubeconfigs()
    assert len(kubeconfigs) >= 2, f"the end-to-end test needs two clusters, the stack has {list(kubeconfigs)}"
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url)
    run = PipelineRun(RunConfig(kubeconfigs=dict(list(kubeconfigs.items())[:2]), nodes=NODES, pods=PODS,
                                keep=True, timeout_s=900), settings)
    clusters = list(run.clusters)
    dead_letters: list[dict[str, Any]] = []

    async def inject_bad_messages(_: PipelineRun) -> None:
        before = await _state_fingerprint(settings, clusters)
        producer = AIOKafkaProducer(**client_options(kafka_bootstrap))
        await producer.start()
        try:
            for topic, value in BAD_MESSAGES.items():
                await producer.send_and_wait(topic + run.suffix, value, key=f"{clusters[0]}/bad".encode())
        finally:
            await producer.stop()
        dead_letters.extend(await _read_topic(kafka_bootstrap, topics.DEADLETTER + run.suffix,
                                              expect=len(BAD_MESSAGES)))
        assert await _state_fingerprint(settings, clusters) == before, "a malformed message changed the state"
        async with aiohttp.ClientSession() as session:  # the run's services, as a platform sees them
            # ready as a kubelet judges it: unready only after failureThreshold (3) probes in a row fail (a check
            # times out at 3 s, which a two-core machine under load can take on one probe)
            for probe in range(3):
                async with session.get(f"{run.http_url}/readyz") as ready:
                    why = await ready.text()
                    if ready.status == 200 or probe == 2:
                        break
                await asyncio.sleep(1.0)
            assert ready.status == 200, why
            async with session.get(f"{run.http_url}/metrics") as scraped:
                text = await scraped.text()
        counted = {s.labels["topic"]: s.value for family in text_string_to_metric_families(text)
                   for s in family.samples if s.name == "gpuplace_dead_letters_total"}
        assert counted == {topic + run.suffix: 1.0 for topic in BAD_MESSAGES}

    try:
        result = await run.run(before_submit=inject_bad_messages)

        # Each bad message reached the dead-letter topic once, with a reason and its original bytes.
        assert Counter(d["source_topic"] for d in dead_letters) == Counter(t + run.suffix for t in BAD_MESSAGES)
        assert all(d["reason"] and d["original_value_b64"] for d in dead_letters)

        # Capacity is ample (1,600 GPUs of >= 16 GiB for 2,000 slices of <= 24 GiB): every pod fits, so every
        # pod must be bound, once, and no GPU may hold more memory than it has.
        assert result.pods_submitted == PODS
        assert result.pods_bound == PODS, result.summary()
        assert result.pods_unschedulable == 0
        assert result.gpus_overcommitted == 0
        assert result.bound_twice == 0

        await _assert_postgres_matches_apiservers(run, settings)
        await _assert_placements_event_per_decision(run, settings, kafka_bootstrap)

        # Cleaning up deletes the run's topics too: left behind, runs add up to a broker that restarts slowly.
        await run.cleanup()
        assert not {t for t in await list_topics(kafka_bootstrap) if t.endswith(run.suffix)}
    finally:
        await run.cleanup()


async def _assert_postgres_matches_apiservers(run: PipelineRun, settings: Settings) -> None:
    from gpuplace.adapters.kube.cluster_api import raw_json
    from gpuplace.bootstrap import cluster_api

    api_view: dict[tuple[str, str], tuple[str, tuple]] = {}
    for cluster, name in run.clusters.items():
        async with cluster_api(run.config.kubeconfigs[name]) as api:
            body = await raw_json(await api.core.list_namespaced_pod(run.namespace, _preload_content=False))
        for pod in body["items"]:
            grant = json.loads(pod["metadata"]["annotations"][ASSIGNMENT])
            gpus_held = tuple(sorted((g["index"], g["memory_mib"]) for g in grant["gpus"]))
            api_view[(cluster, pod["metadata"]["uid"])] = (pod["spec"]["nodeName"], gpus_held)
    async with database(settings) as uow_factory, uow_factory.engine.connect() as conn:
        rows = (await conn.execute(select(pods.c.cluster, pods.c.uid, pods.c.node, pods.c.state)
                                   .where(pods.c.cluster.in_(list(run.clusters))))).all()
        held: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for a in (await conn.execute(select(allocations).where(allocations.c.cluster.in_(list(run.clusters))))):
            held.setdefault((a.cluster, a.pod_uid), []).append((a.gpu_index, a.memory_mib))
    db_view = {(r.cluster, r.uid): (r.node, tuple(sorted(held.get((r.cluster, r.uid), [])))) for r in rows}
    assert {r.state for r in rows} == {"bound"}
    assert db_view == api_view


async def _assert_placements_event_per_decision(run: PipelineRun, settings: Settings, bootstrap: str) -> None:
    async with database(settings) as uow_factory, uow_factory.engine.connect() as conn:
        decision_ids = set((await conn.execute(select(decisions.c.id).where(
            decisions.c.cluster.in_(list(run.clusters))))).scalars())
    events = await _read_topic(bootstrap, topics.PLACEMENTS + run.suffix, expect=len(decision_ids))
    assert {e["event_id"] for e in events} >= decision_ids
    bound = Counter((e["cluster"], e["pod_uid"]) for e in events if e["kind"] == "bound")
    assert len(bound) == PODS and set(bound.values()) == {1}


def _run_id_splitting(clusters: list[str], partitions: int = 4) -> str:
    """A run id whose two clusters hash to partitions the range assignor gives to different members of a
    two-worker group (0-1 and 2-3), so that each worker owns one cluster."""
    for _ in range(1000):
        run_id = uuid.uuid4().hex[:6]
        halves = {partition_of(f"{c}-{run_id}", partitions) // (partitions // 2) for c in clusters}
        if len(halves) == 2:
            return run_id
    raise AssertionError("no run id splits the clusters")


async def test_two_placement_workers_split_the_clusters_and_bind_every_pod_once(kafka_bootstrap: str,
                                                                               database_url: str) -> None:
    kubeconfigs = dict(list(cluster_kubeconfigs().items())[:2])
    assert len(kubeconfigs) == 2, f"the end-to-end test needs two clusters, the stack has {list(kubeconfigs)}"
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url)
    run = PipelineRun(RunConfig(kubeconfigs=kubeconfigs, nodes=40, pods=400, placement_workers=2, keep=True,
                                run_id=_run_id_splitting(list(kubeconfigs)), timeout_s=600), settings)
    try:
        result = await run.run()
        assert result.pods_bound == result.pods_submitted == 400, result.summary()
        assert result.gpus_overcommitted == 0 and result.bound_twice == 0
        await _assert_postgres_matches_apiservers(run, settings)
    finally:
        await run.cleanup()


async def test_a_paced_run_submits_at_its_rate_and_binds_every_pod(kafka_bootstrap: str, database_url: str) -> None:
    """`bench pipeline --rate` (issue 35): pod i is submitted no sooner than i / rate seconds after the first, so
    60 pods at 20 per second take about 3 s to submit, and each is bound as it comes."""
    kubeconfigs = dict(list(cluster_kubeconfigs().items())[:2])
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url)
    run = PipelineRun(RunConfig(kubeconfigs=kubeconfigs, nodes=10, pods=60, rate=20.0, timeout_s=300), settings)
    try:
        result = await run.run()
        assert result.pods_bound == result.pods_submitted == 60, result.summary()
        assert result.gpus_overcommitted == 0 and result.bound_twice == 0
        submitted = sorted(run.submitted_at.values())
        assert submitted[-1] - submitted[0] >= 59 / 20.0 * 0.95, "the pods were not spread at the rate asked"
    finally:
        await run.cleanup()
