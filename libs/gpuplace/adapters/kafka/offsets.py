"""Where a subscriber stands on each partition: the offsets it has finished with, committed in batches
(OffsetCommits), and its lag behind each partition's end (ConsumerLag).

Acknowledgement is explicit (FastStream's Kafka default, ACK_FIRST, commits before the handler runs, which
loses the record a crash interrupts): the offset of a record is committed only after its handler returned or it
was dead-lettered, and a transient failure seeks back to it, so it is read again instead of lost. Commits are
batched: one per COMMIT_INTERVAL_S of the offsets processed so far, not one per record, which halved a worker's
throughput; a worker killed meanwhile has its last fraction of a second read again by its successor, which the
consumers' idempotence by event id makes harmless.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from typing import Any

from aiokafka import ConsumerRebalanceListener
from aiokafka.structs import TopicPartition
from faststream.kafka.annotations import KafkaMessage
from faststream.kafka.message import FakeConsumer

log = logging.getLogger(__name__)

COMMIT_INTERVAL_S = 0.25
COMMIT_TIMEOUT_S = 10.0


def records_of(msg: KafkaMessage) -> tuple[Any, ...]:
    """The record(s) a message carries: a batch subscriber's tuple (a list on the in-memory test broker), or one."""
    raw = msg.raw_message
    return tuple(raw) if isinstance(raw, tuple | list) else (raw,)


class OffsetCommits:
    """The offsets a subscriber has finished with, committed in the background at most every COMMIT_INTERVAL_S.

    Only offsets of records whose handling ended are recorded, so a commit at any moment (even while the next
    record is being handled) never covers a record that may still fail. Handling never waits for a commit:
    after Kafka restarts, a commit can take the coordinator's whole reload, and a handler waiting on it stalls
    its partitions. One flusher task commits what has been recorded, then what was recorded meanwhile, until
    nothing is left, so the last records of a burst are committed too (and not only when the next record
    comes). A commit that fails or takes longer than COMMIT_TIMEOUT_S is tried again with the next one, for the
    partitions the consumer still holds; those it lost are read again by their new owner."""

    def __init__(self, interval_s: float = COMMIT_INTERVAL_S, timeout_s: float = COMMIT_TIMEOUT_S) -> None:
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._done: dict[TopicPartition, int] = {}
        self._last = -math.inf
        self._flusher: asyncio.Task[None] | None = None
        self._consumer: Any = None
        self._failing = False

    async def done(self, msg: KafkaMessage) -> None:
        """`msg` (one record, or a batch of them) is handled: commit past it."""
        consumer = getattr(msg, "consumer", None)
        if consumer is None or isinstance(consumer, FakeConsumer):  # the in-memory test broker: nothing to commit
            await msg.ack()
            return
        self._consumer = consumer
        for record in records_of(msg):
            tp = TopicPartition(record.topic, record.partition)
            self._done[tp] = max(self._done.get(tp, 0), record.offset + 1)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._done:
            await asyncio.sleep(max(0.0, self._last + self._interval_s - loop.time()))
            self._last = loop.time()
            offsets, self._done = self._done, {}
            await self._commit(offsets)

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        try:
            await asyncio.wait_for(self._consumer.commit(offsets), self._timeout_s)
        except Exception as exc:  # noqa: BLE001 - Kafka away, the group reloading, the partition reassigned
            held = self._consumer.assignment()
            for tp, offset in offsets.items():
                if tp in held:
                    self._done.setdefault(tp, offset)  # a later offset recorded meanwhile supersedes it
            if not self._failing:
                log.warning("committing %d partition offset(s) failed (%r); trying again with the next commit",
                            len(offsets), exc)
            self._failing = True
        else:
            if self._failing:
                log.info("offset commits succeed again")
            self._failing = False


# The ignore: aiokafka ships no types, so its listener ABC is Any to mypy; subclassing it is not optional, since
# aiokafka's subscribe refuses a listener that is not an instance of it.
class ConsumerLag(ConsumerRebalanceListener):  # type: ignore[misc]
    """One subscriber's lag, per partition it holds: the partition's highwater (from the consumer's last fetch)
    less the offset of the next record to handle. That is the offset after the last record this member handled
    (or dead-lettered) on it, else the consumer's position, which is where it resumed: the position alone runs
    ahead of the handler by what the fetcher buffered, and would hide a slow handler.

    It is the subscriber's rebalance listener too (wrapping the caller's), to forget what it handled on a
    partition it loses: the partition's next owner moves it on."""

    def __init__(self, inner: ConsumerRebalanceListener | None) -> None:
        self._inner = inner
        self._next: dict[TopicPartition, int] = {}
        self.subscriber: Any = None  # FastStream's subscriber; its `consumer` is the started AIOKafkaConsumer

    def handled(self, record: Any) -> None:
        topic, partition, offset = (getattr(record, a, None) for a in ("topic", "partition", "offset"))
        if topic is not None and partition is not None and offset is not None:  # not the in-memory test broker's
            self._next[TopicPartition(topic, partition)] = offset + 1

    async def on_partitions_revoked(self, revoked: Any) -> None:
        for tp in revoked:
            self._next.pop(tp, None)
        if self._inner is not None:
            await _maybe_await(self._inner.on_partitions_revoked(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        if self._inner is not None:
            await _maybe_await(self._inner.on_partitions_assigned(assigned))

    async def lags(self) -> dict[tuple[str, int], int]:
        consumer = getattr(self.subscriber, "consumer", None)
        if consumer is None:  # not started, or stopped
            return {}
        lags = {}
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            if high is None:  # nothing fetched from it yet
                continue
            position = self._next.get(tp)
            if position is None:
                position = await consumer.position(tp)
            lags[(tp.topic, tp.partition)] = max(0, high - position)
        return lags


async def _maybe_await(result: Any) -> None:
    if inspect.isawaitable(result):
        await result


__all__ = ["COMMIT_INTERVAL_S", "COMMIT_TIMEOUT_S", "ConsumerLag", "OffsetCommits", "records_of"]
