"""Kafka smoke test: aiokafka produces and consumes through a consumer group, and the group's committed
offsets are what a restarted member resumes from (the property "commit after the transaction" relies on)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from gpuplace.adapters.kafka import client_options

from .conftest import unique_name

pytestmark = pytest.mark.integration


async def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(**client_options(bootstrap), acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for value in values:
            # Keyed like the pipeline's topics (cluster/<entity>): one key keeps one partition's order.
            await producer.send_and_wait(topic, value, key=b"east/smoke")
    finally:
        await producer.stop()


async def _consume(bootstrap: str, topic: str, group: str, expected: int) -> tuple[list[bytes], int]:
    """Read `expected` records as a member of `group`, commit, and return them with the committed total."""
    consumer = AIOKafkaConsumer(
        topic,
        **client_options(bootstrap),
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        values: list[bytes] = []
        async with asyncio.timeout(60):
            while len(values) < expected:
                batches = await consumer.getmany(timeout_ms=500)
                values += [record.value for records in batches.values() for record in records]
        await consumer.commit()
        committed = [await consumer.committed(partition) or 0 for partition in consumer.assignment()]
        return values, sum(committed)
    finally:
        await consumer.stop()


async def test_consumer_group_resumes_from_committed_offsets(kafka_bootstrap: str) -> None:
    topic, group = unique_name("smoke.kafka"), unique_name("smoke-group")

    await _produce(kafka_bootstrap, topic, [b"a0", b"a1", b"a2"])
    first, committed = await _consume(kafka_bootstrap, topic, group, expected=3)
    assert first == [b"a0", b"a1", b"a2"]
    assert committed == 3

    # A new member of the same group starts after the committed offsets: it sees only what came later.
    await _produce(kafka_bootstrap, topic, [b"b0"])
    second, committed = await _consume(kafka_bootstrap, topic, group, expected=1)
    assert second == [b"b0"]
    assert committed == 4
