"""Poison records on the real broker and database (issue 20): each ends on the dead-letter topic (or as a
reported request_error), and a good pod sent right after it on the same partition is still placed within seconds.

Placement runs in process on its own topic suffix and cluster name, as the end-to-end tests run it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from sqlalchemy import select

from gpuplace.adapters.kafka import client_options, cluster_partitioner, ensure_topics, partition_of
from gpuplace.adapters.kube.translate import pod_event as translate_pod
from gpuplace.adapters.postgres import migrate
from gpuplace.adapters.postgres.tables import pods
from gpuplace.bootstrap import database
from gpuplace.contracts import topics
from gpuplace.contracts.events import NodeEvent, PodEvent
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from services.placement import app as placement
from tests.integration.conftest import equals, eventually

pytestmark = pytest.mark.integration
JSON = [("content-type", b"application/json")]
PARTITIONS = 4  # ensure_topics' count


@dataclass
class Bus:
    settings: Settings
    producer: AIOKafkaProducer
    dead_letters: AIOKafkaConsumer

    @property
    def cluster(self) -> str:
        return self.settings.cluster

    async def send(self, value: bytes, *, name: str, headers: list[tuple[str, bytes]] | None = None,
                   topic: str = topics.PODS, partition: int | None = None) -> None:
        """On the cluster's partition (as gpuplace's producers send), unless `partition` says otherwise."""
        await self.producer.send_and_wait(self.settings.topic(topic), value, partition=partition,
                                          key=f"{self.cluster}/poison/{name}".encode(), headers=headers or [])

    def pod(self, name: str, **changes: Any) -> dict[str, Any]:
        event = PodEvent(cluster=self.cluster, kind="pending", namespace="poison", name=name, uid=uuid.uuid4().hex,
                         cpu_milli=100, memory_mib=64)
        return {**json.loads(event.model_dump_json(by_alias=True)), **changes}

    async def next_dead_letter(self, timeout_s: float = 20.0) -> dict[str, Any]:
        record = await asyncio.wait_for(self.dead_letters.getone(), timeout_s)
        return json.loads(record.value)

    async def pod_state(self, uid: str) -> str | None:
        async with database(self.settings) as uow_factory, uow_factory.engine.connect() as conn:
            return (await conn.execute(select(pods.c.state).where(pods.c.cluster == self.cluster,
                                                                  pods.c.uid == uid))).scalar_one_or_none()

    async def assert_not_stalled(self) -> None:
        """A good pod sent now, on the same partition, is read and stored within a few seconds."""
        good = self.pod(f"good-{uuid.uuid4().hex[:6]}")
        await self.send(json.dumps(good).encode(), name=good["name"], headers=JSON)
        await eventually(lambda: self.pod_state(good["uid"]), timeout_s=10, what="the good pod after the poison")


@pytest.fixture
async def bus(kafka_bootstrap: str, database_url: str) -> AsyncIterator[Bus]:
    run = uuid.uuid4().hex[:8]
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=f"poison-{run}",
                        kubeconfig=kubeconfig, topic_suffix=f".poison-{run}", defrag_enabled=False)
    await migrate.upgrade_async(database_url)
    await ensure_topics(kafka_bootstrap, [settings.topic(t) for t in topics.ALL_TOPICS], partitions=PARTITIONS)
    stop = asyncio.Event()
    service = asyncio.create_task(placement.run(settings, stop))
    producer = AIOKafkaProducer(**client_options(kafka_bootstrap), max_request_size=2**21,
                                partitioner=cluster_partitioner)
    dead_letters = AIOKafkaConsumer(settings.topic(topics.DEADLETTER), **client_options(kafka_bootstrap),
                                    auto_offset_reset="earliest", group_id=None)
    await producer.start()
    await dead_letters.start()
    try:
        bus = Bus(settings, producer, dead_letters)
        await bus.assert_not_stalled()  # placement is up and reading
        yield bus
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(service, 30)
        await producer.stop()
        await dead_letters.stop()


@pytest.mark.parametrize(("changes", "field"), [
    ({"priority": 2**31}, "priority"),
    ({"cpu_milli": 9223372036854775807}, "cpu_milli"),
    ({"schema": 2}, "schema"),
], ids=["priority-2**31", "cpu-int64-max", "schema-2"])
async def test_a_record_beyond_the_contract_is_dead_lettered_and_the_partition_moves_on(bus: Bus, changes, field):
    pod = bus.pod("poison", **changes)
    await bus.send(json.dumps(pod).encode(), name="poison", headers=JSON)
    letter = await bus.next_dead_letter()
    assert letter["reason"].startswith(f"{field}:"), letter["reason"]
    await bus.assert_not_stalled()
    assert await bus.pod_state(pod["uid"]) is None  # nothing of it was stored


@pytest.mark.parametrize("headers", [JSON, None], ids=["content-type-json", "no-headers"])
async def test_bad_json_is_dead_lettered_with_or_without_a_content_type(bus: Bus, headers):
    value = b'{"kind": "pending", "namespace": "poison"'
    await bus.send(value, name="bad-json", headers=headers)
    letter = await bus.next_dead_letter()
    assert "Invalid JSON" in letter["reason"] and base64.b64decode(letter["original_value_b64"]) == value
    await bus.assert_not_stalled()


async def test_a_900_kb_record_is_dead_lettered_truncated_with_its_digest(bus: Bus):
    value = json.dumps(bus.pod("huge", workload="w" * 900_000, priority=2**31)).encode()  # 900 KB and invalid
    await bus.send(value, name="huge", headers=JSON)
    letter = await bus.next_dead_letter()  # the copy had to fit Kafka's 1 MB limit to arrive at all
    assert letter["original_size"] == len(value) and letter["original_sha256"] == hashlib.sha256(value).hexdigest()
    assert len(base64.b64decode(letter["original_value_b64"])) == 256 * 1024
    await bus.assert_not_stalled()


async def test_a_gpu_memory_annotation_of_1e400_is_reported_as_a_request_error(bus: Bus):
    manifest = {"metadata": {"name": "inf-memory", "namespace": "poison", "uid": uuid.uuid4().hex,
                             "annotations": {"gpuplace.io/gpu-memory": "1e400"}},
                "spec": {"schedulerName": "gpuplace", "containers": [{"name": "c", "resources": {}}]}}
    event = translate_pod(manifest, cluster=bus.cluster, region="local")
    assert event.request_error and "1e400" in event.request_error
    await bus.send(event.model_dump_json(by_alias=True).encode(), name="inf-memory", headers=JSON)
    assert await eventually(lambda: equals(bus.pod_state(event.uid), "invalid"), timeout_s=10, what="invalid pod")
    await bus.assert_not_stalled()


def test_translate_reports_a_cpu_request_beyond_the_contract_as_a_request_error():
    manifest = {"metadata": {"name": "huge-cpu", "namespace": "poison", "uid": uuid.uuid4().hex},
                "spec": {"schedulerName": "gpuplace", "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": "9223372036854775807"}}}]}}
    event = translate_pod(manifest, cluster="east", region="local")
    assert event.request_error


async def test_a_valid_record_on_another_partition_than_its_clusters_is_dead_lettered(bus: Bus):
    home = partition_of(bus.cluster, PARTITIONS)
    stray = bus.pod("stray")
    await bus.send(json.dumps(stray).encode(), name="stray", headers=JSON, partition=(home + 1) % PARTITIONS)
    letter = await bus.next_dead_letter()
    assert f"belongs to partition {home} of {PARTITIONS}" in letter["reason"], letter["reason"]
    await bus.assert_not_stalled()
    assert await bus.pod_state(stray["uid"]) is None  # the worker owning that partition does not own the cluster


async def test_an_event_id_reused_with_other_content_is_dead_lettered_not_dropped(bus: Bus):
    first = bus.pod("reused", priority=0)
    await bus.send(json.dumps(first).encode(), name="reused", headers=JSON)
    await eventually(lambda: bus.pod_state(first["uid"]), timeout_s=10, what="the first event stored")
    await bus.send(json.dumps(first).encode(), name="reused", headers=JSON)  # a redelivery: skipped quietly
    await bus.send(json.dumps({**first, "priority": 1000}).encode(), name="reused", headers=JSON)
    letter = await bus.next_dead_letter()
    assert letter["reason"].startswith("rejected: event id") and "reused id" in letter["reason"], letter["reason"]
    await bus.assert_not_stalled()


async def test_events_of_a_cluster_no_worker_here_serves_are_dead_lettered_and_write_nothing(bus: Bus):
    other = f"{bus.cluster}-elsewhere"
    node = NodeEvent(cluster=other, kind="upsert", name="n1", cpu_milli=1000, memory_mib=1024, gpu_count=1,
                     gpu_memory_mib=16384)
    await bus.producer.send_and_wait(bus.settings.topic(topics.NODES), node.model_dump_json(by_alias=True).encode(),
                                     key=node.kafka_key(), headers=JSON)
    letter = await bus.next_dead_letter()
    assert f"cluster {other!r} is not one this placement worker serves" in letter["reason"], letter["reason"]
    async with database(bus.settings) as uow_factory, uow_factory() as uow:
        assert await uow.nodes.load_nodes(other) == []
