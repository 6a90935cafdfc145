"""Publishes committed outbox rows to Kafka, so subscribers never see a decision that was rolled back.

At-least-once: a row is marked published only after Kafka acknowledged it, so a crash between the two
publishes it again; subscribers deduplicate by the event's `event_id`. Several relays may run at once
(SKIP LOCKED hands each a disjoint batch); order within a key is kept because rows go out in id order.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from faststream.kafka import KafkaBroker

from gpuplace.adapters.postgres.unit_of_work import PostgresUnitOfWork

log = logging.getLogger(__name__)


class OutboxRelay:
    def __init__(self, uow_factory: Callable[[], PostgresUnitOfWork], broker: KafkaBroker, *,
                 batch_size: int = 500, idle_poll_s: float = 1.0) -> None:
        self._uow_factory = uow_factory
        self._broker = broker
        self._batch_size = batch_size
        self._idle_poll_s = idle_poll_s
        self._wake = asyncio.Event()
        self.published = 0

    def wake(self) -> None:
        """Called after a commit that wrote outbox rows; without it the relay still polls every idle_poll_s."""
        self._wake.set()

    async def run_once(self) -> int:
        """Publish one batch; returns how many rows went out."""
        async with self._uow_factory() as uow:
            rows = await uow.state.take_unpublished(self._batch_size)
            if not rows:
                return 0
            sends = [
                await self._broker.publish(json.dumps(row["payload"]).encode(), topic=row["topic"],
                                           key=row["key"].encode(), headers={"content-type": "application/json"},
                                           no_confirm=True)
                for row in rows
            ]
            await asyncio.gather(*sends)  # wait for every acknowledgement before marking published
            await uow.state.mark_published([row["id"] for row in rows])
            await uow.commit()
        self.published += len(rows)
        return len(rows)

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until `stop` is set; errors are logged and retried after a pause, never fatal."""
        while not stop.is_set():
            try:
                sent = await self.run_once()
            except Exception:  # noqa: BLE001 - the relay must outlive a broker or database restart
                log.exception("outbox relay failed; retrying")
                sent = 0
                await asyncio.sleep(1.0)
            if sent == 0:
                await self._idle(stop)

    async def _idle(self, stop: asyncio.Event) -> None:
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
        await asyncio.wait(waiters, timeout=self._idle_poll_s, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
        self._wake.clear()


__all__ = ["OutboxRelay"]
