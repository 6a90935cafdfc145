"""Kafka wiring shared by every service: the broker factory and the typed, dead-lettering subscriber.

Why a wrapper instead of annotating handlers with the pydantic model directly: a message that fails
validation must reach `gpuplace.deadletter.v1` with the reason and its original bytes, and its offset
must still be committed so the consumer moves on. Handlers therefore receive the raw record, and
`subscribe()` validates it, dead-letters what is malformed, and calls the handler with the typed event.

Every record of one cluster goes to one partition (cluster_partitioner), and a service's topics are read by
one consumer with the range assignor, which hands each member the same partition numbers of every topic: a
placement worker therefore owns whole clusters, their pods, nodes and placements alike (DESIGN §2), as long
as the topics have the same partition count (check_copartitioned).

Acknowledgement is explicit (FastStream's Kafka default, ACK_FIRST, commits before the handler runs):
NACK_ON_ERROR commits after the handler returns and seeks back on an exception, so a transient failure
(the database restarting) redelivers the event instead of losing it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.partitioner import DefaultPartitioner
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from pydantic import BaseModel, ValidationError

from gpuplace.contracts import topics
from gpuplace.contracts.events import DeadLetter

log = logging.getLogger(__name__)
_CLUSTER_KEY = re.compile(rb"^([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)/")
_HASH = DefaultPartitioner()


@dataclass(frozen=True)
class Route:
    """Records of `topic` are validated as `model` and handed to `handler`."""

    topic: str
    model: type[BaseModel]
    handler: Callable[[Any], Awaitable[None]]


def cluster_partitioner(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
    """The partition of the key's cluster (`cluster/<entity>` keys), hashed as Kafka's default partitioner
    hashes a key, so that one consumer sees a cluster's events in the order they were produced."""
    match = _CLUSTER_KEY.match(key or b"")
    return _HASH(match.group(1) if match else key, all_partitions, available)


def partition_of(cluster: str, partitions: int) -> int:
    """The partition every record of `cluster` goes to, on a topic of `partitions` partitions."""
    return cluster_partitioner(f"{cluster}/".encode(), list(range(partitions)), [])


def make_broker(bootstrap: str, *, client_id: str = "gpuplace", by_cluster: bool = True) -> KafkaBroker:
    """A broker whose producer sends every record of a cluster to one partition (what placement needs of the
    pods, nodes and placements topics), or with `by_cluster=False` spreads them by the whole key: telemetry,
    read by stateless ingest workers, should not funnel a large cluster's GPUs through one partition."""
    partitioner = cluster_partitioner if by_cluster else _HASH
    return KafkaBroker(bootstrap, client_id=client_id, enable_idempotence=True, partitioner=partitioner,
                       logger=log, log_level=logging.DEBUG)


def validation_reason(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())


def _cluster_of(key: bytes | None) -> str:
    """The cluster a record belongs to, from its `cluster/<entity>` key; 'unknown' when unreadable."""
    match = _CLUSTER_KEY.match(key or b"")
    return match.group(1).decode() if match else "unknown"


async def dead_letter(broker: KafkaBroker, *, topic: str, consumer: str, reason: str, value: bytes,
                      key: bytes | None, partition: int | None, offset: int | None, suffix: str = "") -> None:
    letter = DeadLetter.of(cluster=_cluster_of(key), source_topic=topic, consumer=consumer, reason=reason,
                           value=value, key=key, partition=partition, offset=offset)
    await broker.publish(letter.model_dump_json(by_alias=True).encode(), topic=topics.DEADLETTER + suffix,
                         key=letter.kafka_key(), headers={"content-type": "application/json"})
    log.warning("dead-lettered %s[%s]@%s: %s", topic, partition, offset, reason)


def subscribe(broker: KafkaBroker, routes: Sequence[Route], *, group_id: str, consumer: str, suffix: str = "",
              listener: ConsumerRebalanceListener | None = None) -> None:
    """One consumer in `group_id` for every route's topic: typed events to its handler, malformed records to
    the dead-letter topic. `listener` hears which partitions this member gains and loses."""
    by_topic = {route.topic + suffix: route for route in routes}

    @broker.subscriber(*by_topic, group_id=group_id, ack_policy=AckPolicy.NACK_ON_ERROR,
                       partition_assignment_strategy=(RangePartitionAssignor,), listener=listener,
                       auto_offset_reset="earliest", title=f"{consumer}:{'+'.join(r.topic for r in routes)}",
                       description="; ".join(f"{r.topic}: {r.model.__name__}" for r in routes))
    async def _on_record(msg: KafkaMessage) -> None:
        record = msg.raw_message
        topic = getattr(record, "topic", None) or routes[0].topic + suffix  # the in-memory test broker has none
        route = by_topic[topic]
        try:
            event = route.model.model_validate_json(msg.body)
        except ValidationError as exc:
            await dead_letter(broker, topic=topic, consumer=consumer, reason=validation_reason(exc),
                              value=msg.body, key=getattr(record, "key", None),
                              partition=getattr(record, "partition", None), offset=getattr(record, "offset", None),
                              suffix=suffix)
            return
        await route.handler(event)


async def check_copartitioned(bootstrap: str, names: Sequence[str]) -> int | None:
    """Refuse to consume `names` together unless the existing ones have one partition count: otherwise a
    cluster's pods and nodes land on partitions that two different workers own. Topics not created yet are
    skipped (the broker creates them with its one default count). Returns the count, None if none exists."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        present = [n for n in names if n in existing]
        described = await admin.describe_topics(present) if present else []  # None or [] describes every topic
    finally:
        await admin.close()
    counts = {t["topic"]: len(t["partitions"]) for t in described}
    if len(set(counts.values())) > 1:
        raise ValueError("topics read together must have the same partition count, so that one worker owns "
                         f"a cluster's records on all of them; found {counts}")
    return next(iter(counts.values()), None)


async def ensure_topics(bootstrap: str, names: list[str], *, partitions: int = 4) -> None:
    """Create missing topics up front (keyed by cluster, so partitions spread clusters over workers).

    Brokers may auto-create topics, but a consumer that subscribes first only sees "topic not found"
    until a producer writes; creating them explicitly keeps start-up quiet and the partition count chosen.
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names if n not in existing]
        if missing:
            await admin.create_topics(missing)
    finally:
        await admin.close()


__all__ = ["Route", "cluster_partitioner", "partition_of", "make_broker", "subscribe", "dead_letter",
           "validation_reason", "check_copartitioned", "ensure_topics"]
