"""Kafka wiring shared by every service: the broker factory and the typed, dead-lettering subscriber.

Why a wrapper instead of annotating handlers with the pydantic model directly: a message that fails
validation must reach `gpuplace.deadletter.v1` with the reason and its original bytes, and its offset
must still be committed so the consumer moves on. Handlers therefore receive the raw record, and
`subscribe()` validates it, dead-letters what is malformed, and calls the handler with the typed event.

Acknowledgement is explicit (FastStream's Kafka default, ACK_FIRST, commits before the handler runs):
NACK_ON_ERROR commits after the handler returns and seeks back on an exception, so a transient failure
(the database restarting) redelivers the event instead of losing it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from pydantic import BaseModel, ValidationError

from gpuplace.contracts import topics
from gpuplace.contracts.events import DeadLetter

log = logging.getLogger(__name__)
_CLUSTER_KEY = re.compile(rb"^([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)/")
E = TypeVar("E", bound=BaseModel)


def make_broker(bootstrap: str, *, client_id: str = "gpuplace") -> KafkaBroker:
    return KafkaBroker(bootstrap, client_id=client_id, enable_idempotence=True, logger=log, log_level=logging.DEBUG)


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


def subscribe(broker: KafkaBroker, *, topic: str, group_id: str, model: type[E],
              handler: Callable[[E], Awaitable[None]], consumer: str, suffix: str = "") -> None:
    """Register `handler` for `topic`: typed events in, malformed records to the dead-letter topic."""
    full_topic = topic + suffix

    @broker.subscriber(full_topic, group_id=group_id, ack_policy=AckPolicy.NACK_ON_ERROR,
                       auto_offset_reset="earliest", title=f"{consumer}:{topic}", description=model.__doc__)
    async def _on_record(msg: KafkaMessage) -> None:
        record = msg.raw_message
        try:
            event = model.model_validate_json(msg.body)
        except ValidationError as exc:
            await dead_letter(broker, topic=full_topic, consumer=consumer, reason=validation_reason(exc),
                              value=msg.body, key=getattr(record, "key", None),
                              partition=getattr(record, "partition", None), offset=getattr(record, "offset", None),
                              suffix=suffix)
            return
        await handler(event)


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


__all__ = ["make_broker", "subscribe", "dead_letter", "validation_reason", "ensure_topics"]
