"""Publishes committed outbox rows to Kafka, so subscribers never see a decision that was rolled back.

At-least-once: a row is marked published only after Kafka acknowledged it, so a crash between the two
publishes it again; subscribers deduplicate by the event's `event_id`.

Order, exactly: a batch is the lowest-id unpublished rows no other relay holds, sent in id order, and all are
acknowledged before the next batch is taken. So one relay publishes the rows of a key in id order, except a
row whose transaction commits only after a later row of its key went out (ids are drawn at insert, not at
commit): it goes out after that row. Several relays may run at once (one per placement process): SKIP LOCKED
hands each a disjoint batch, so two relays never send the same row, but nothing orders their batches against
each other, and a key's later row in one relay's batch can reach Kafka before its earlier row in another's.
Per-key order holds with one relay only.

No row goes out over `max_event_bytes` (Kafka's default message limit is 1 MB): one that would is sent to the
dead-letter topic instead (truncated, with its size and digest) and marked published, so one oversize
decision never stops the relay.

The relay reports its backlog (rows committed, not yet published) to `metrics` after every batch and while idle,
at most every BACKLOG_EVERY_S: a backlog that only grows is a relay that cannot reach Kafka.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from faststream.kafka import KafkaBroker

from gpuplace.adapters.kafka import publish_json
from gpuplace.adapters.metrics import PrometheusMetrics
from gpuplace.contracts import topics
from gpuplace.contracts.events import DeadLetter
from gpuplace.usecases.ports import OutboxUnitOfWork, Row

log = logging.getLogger(__name__)
BACKLOG_EVERY_S = 2.0


class OutboxRelay:
    """Reads the outbox through the OutboxStore port (PostgreSQL's unit of work, or the fake one in tests)."""

    def __init__(self, uow_factory: Callable[[], OutboxUnitOfWork], broker: KafkaBroker, *,
                 batch_size: int = 500, idle_poll_s: float = 1.0, max_event_bytes: int = 900_000,
                 deadletter_topic: str = topics.DEADLETTER, metrics: PrometheusMetrics | None = None) -> None:
        self._uow_factory = uow_factory
        self._broker = broker
        self._batch_size = batch_size
        self._idle_poll_s = idle_poll_s
        self._wake = asyncio.Event()
        self._max_event_bytes = max_event_bytes
        self._deadletter_topic = deadletter_topic
        self.published = 0
        self._metrics = metrics
        self._backlog_at = -BACKLOG_EVERY_S  # loop time of the last backlog count

    def wake(self) -> None:
        """Called after a commit that wrote outbox rows; without it the relay still polls every idle_poll_s."""
        self._wake.set()

    async def run_once(self) -> int:
        """Publish one batch; returns how many rows went out."""
        async with self._uow_factory() as uow:
            rows = await uow.outbox.take_unpublished(self._batch_size)
            if not rows:
                return 0
            sends = [await self._send(row) for row in rows]
            await asyncio.gather(*sends)  # wait for every acknowledgement before marking published
            await uow.outbox.mark_published([row["id"] for row in rows])
            await uow.commit()
        self.published += len(rows)
        return len(rows)

    async def _send(self, row: Row) -> Any:
        """Start sending one row (FastStream's no_confirm future), or its dead letter when it is oversize."""
        body, topic, key = json.dumps(row["payload"]).encode(), row["topic"], row["key"].encode()
        if len(body) > self._max_event_bytes:
            log.error("outbox row %s for %s is %d bytes, over %d: dead-lettered", row["id"], topic, len(body),
                      self._max_event_bytes)
            cluster = str(row["payload"].get("cluster") or "unknown")
            letter = DeadLetter.of(cluster=cluster, source_topic=topic, consumer="outbox-relay", value=body, key=key,
                                   reason=f"event of {len(body)} bytes exceeds the {self._max_event_bytes}-byte limit")
            if self._metrics is not None:
                self._metrics.dead_lettered(topic)
            body, topic, key = (letter.model_dump_json(by_alias=True).encode(), self._deadletter_topic,
                                letter.kafka_key())
        return await publish_json(self._broker, body, topic=topic, key=key, no_confirm=True)

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until `stop` is set; errors are logged and retried after a pause, never fatal."""
        while not stop.is_set():
            try:
                sent = await self.run_once()
                await self._report_backlog()
            except Exception:  # noqa: BLE001 - the relay must outlive a broker or database restart
                log.exception("outbox relay failed; retrying")
                sent = 0
                await asyncio.sleep(1.0)
            if sent == 0:
                await self._idle(stop)

    async def _report_backlog(self) -> None:
        now = asyncio.get_running_loop().time()
        if self._metrics is None or now - self._backlog_at < BACKLOG_EVERY_S:
            return
        self._backlog_at = now
        async with self._uow_factory() as uow:
            self._metrics.outbox_backlog(await uow.outbox.count_unpublished())

    async def _idle(self, stop: asyncio.Event) -> None:
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
        await asyncio.wait(waiters, timeout=self._idle_poll_s, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
        self._wake.clear()


__all__ = ["OutboxRelay"]
