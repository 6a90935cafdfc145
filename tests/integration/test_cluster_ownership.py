"""Three placement workers in one consumer group on the real broker: each owns whole clusters.

A cluster's nodes, pods and placements must reach the same worker, since a worker keeps the state of its
clusters in memory (DESIGN §2). That rests on three things checked together here: every record of a cluster
goes to one partition (cluster_partitioner), each worker reads its topics with one consumer and the range
assignor (same partition numbers on every topic), and the topics have one partition count.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest
from aiokafka import ConsumerRebalanceListener

from gpuplace.adapters.kafka import (
    Route,
    check_copartitioned,
    ensure_copartitioned,
    ensure_topics,
    list_topics,
    make_broker,
    partition_of,
    subscribe,
)
from gpuplace.contracts import topics
from gpuplace.contracts.events import NodeEvent, PlacementEvent, PodEvent
from tests.builders import node_event, pod_event

from .conftest import eventually, unique_name

pytestmark = pytest.mark.integration
READ = (topics.NODES, topics.PODS, topics.PLACEMENTS)
PARTITIONS = 4
WORKERS = ("a", "b", "c")  # three: with two, a round-robin assignor would line the topics up by chance


class Assignment(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.now: set[tuple[str, int]] = set()

    async def on_partitions_revoked(self, revoked) -> None:
        self.now.clear()

    async def on_partitions_assigned(self, assigned) -> None:
        self.now = {(tp.topic, tp.partition) for tp in assigned}


async def test_each_cluster_is_read_by_one_worker_on_every_topic(kafka_bootstrap: str) -> None:
    suffix = "." + unique_name("ownership")
    await ensure_topics(kafka_bootstrap, [t + suffix for t in READ], partitions=PARTITIONS)
    assert await check_copartitioned(kafka_bootstrap, [t + suffix for t in READ]) == PARTITIONS
    group = unique_name("placement")
    seen: dict[str, set[str]] = defaultdict(set)  # cluster -> workers that read any of its records
    received: list[str] = []
    workers = {}
    for worker in WORKERS:
        async def record(event, worker=worker) -> None:
            seen[event.cluster].add(worker)
            received.append(event.cluster)

        broker = make_broker(kafka_bootstrap, client_id=f"placement-{worker}")
        assignment = Assignment()
        subscribe(broker, [Route(topics.NODES, NodeEvent, record), Route(topics.PODS, PodEvent, record),
                           Route(topics.PLACEMENTS, PlacementEvent, record)],
                  group_id=group, consumer="placement", suffix=suffix, listener=assignment)
        workers[worker] = (broker, assignment)
    try:
        for broker, _ in workers.values():
            await broker.start()

        async def split() -> bool:
            now = [assignment.now for _, assignment in workers.values()]
            return all(now) and sum(map(len, now)) == len(set().union(*now)) == len(READ) * PARTITIONS

        await eventually(split, timeout_s=60, what="the workers to share the partitions")
        for _, assignment in workers.values():  # the same partition numbers of every topic
            numbers = [{p for t, p in assignment.now if t == topic + suffix} for topic in READ]
            assert numbers[0] and all(n == numbers[0] for n in numbers), assignment.now

        clusters = [f"cluster-{i}" for i in range(12)]
        producer = workers["a"][0]
        for cluster in clusters:
            node, pod = node_event("n1", cluster=cluster), pod_event("p1", cluster=cluster)
            placed = PlacementEvent(cluster=cluster, kind="bound", namespace="robots", pod="p1", node="n1")
            for topic, event in ((topics.NODES, node), (topics.PODS, pod), (topics.PLACEMENTS, placed)):
                await producer.publish(event.model_dump_json(by_alias=True).encode(), topic=topic + suffix,
                                       key=event.kafka_key())

        async def all_read() -> bool:
            return len(received) >= len(clusters) * len(READ)

        await eventually(all_read, timeout_s=60, what="every record to be read")
        await asyncio.sleep(1)  # a duplicate delivery to the other worker would arrive now
        assert {cluster: len(by) for cluster, by in seen.items()} == dict.fromkeys(clusters, 1)
        assert len(set().union(*seen.values())) > 1  # and the clusters are split between the workers
        for worker, (_, assignment) in workers.items():  # ownership as placement computes it (partition_of)
            pods = {p for t, p in assignment.now if t == topics.PODS + suffix}
            assert {c for c in clusters if partition_of(c, PARTITIONS) in pods} == \
                {c for c, by in seen.items() if by == {worker}}
    finally:
        for broker, _ in workers.values():
            await broker.stop()


async def test_topics_with_different_partition_counts_are_refused(kafka_bootstrap: str) -> None:
    suffix = "." + unique_name("uneven")
    await ensure_topics(kafka_bootstrap, [topics.NODES + suffix], partitions=2)
    await ensure_topics(kafka_bootstrap, [topics.PODS + suffix], partitions=3)
    with pytest.raises(ValueError, match="same partition count"):
        await check_copartitioned(kafka_bootstrap, [t + suffix for t in READ])  # placements: not created, skipped


async def test_created_topics_are_visible_as_soon_as_ensure_topics_returns(kafka_bootstrap: str) -> None:
    """CreateTopics returns before the broker's metadata cache shows the topics; a check (or a subscriber)
    right after it once saw none of them (CI, stop 23). ensure_topics now waits until they are listed."""
    for round_ in range(5):
        names = [t + "." + unique_name(f"visible{round_}") for t in READ]
        await ensure_topics(kafka_bootstrap, names, partitions=PARTITIONS)
        assert names[0] in await list_topics(kafka_bootstrap)
        assert await check_copartitioned(kafka_bootstrap, names) == PARTITIONS


async def test_a_topic_the_broker_refuses_is_an_error_not_a_silent_skip(kafka_bootstrap: str) -> None:
    with pytest.raises(RuntimeError, match="refused to create topics.*bad name"):
        await ensure_topics(kafka_bootstrap, ["bad name with spaces"])


async def test_services_create_the_topics_they_read_together_with_one_count(kafka_bootstrap: str) -> None:
    """cluster-watcher and placement start with ensure_copartitioned: missing topics take the count the existing
    ones have, and two services starting at once on no topics agree on one count."""
    suffix = "." + unique_name("copart")
    names = [t + suffix for t in READ]
    await ensure_topics(kafka_bootstrap, [names[0]], partitions=2)
    assert await ensure_copartitioned(kafka_bootstrap, names) == 2
    assert await check_copartitioned(kafka_bootstrap, names) == 2
    fresh = [t + "." + unique_name("copart-race") for t in READ]
    counts = await asyncio.gather(*(ensure_copartitioned(kafka_bootstrap, fresh) for _ in range(3)))
    assert counts == [PARTITIONS] * 3
    assert await check_copartitioned(kafka_bootstrap, fresh) == PARTITIONS
