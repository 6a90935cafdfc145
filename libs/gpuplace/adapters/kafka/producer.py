"""The one JSON publish every gpuplace producer goes through (publish_json, publish_event), and sends kept in
flight without waiting for each acknowledgement (Acknowledgements)."""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Literal, overload

from aiokafka.structs import RecordMetadata
from faststream.kafka import KafkaBroker

from gpuplace.contracts.envelope import Envelope

JSON_HEADERS = {"content-type": "application/json"}
"""The headers of every record gpuplace produces: its bodies are JSON (FastStream decodes by this header)."""


@overload
async def publish_json(broker: KafkaBroker, body: bytes, *, topic: str, key: bytes | None, no_confirm: Literal[True],
                       **options: Any) -> asyncio.Future[RecordMetadata]: ...


@overload
async def publish_json(broker: KafkaBroker, body: bytes, *, topic: str, key: bytes | None,
                       no_confirm: Literal[False] = False, **options: Any) -> RecordMetadata: ...


async def publish_json(broker: KafkaBroker, body: bytes, *, topic: str, key: bytes | None, no_confirm: bool = False,
                       **options: Any) -> asyncio.Future[RecordMetadata] | RecordMetadata:
    """Publish one JSON record with JSON_HEADERS: every gpuplace producer sends through here or publish_event.
    Its acknowledgement, awaited; with `no_confirm`, the acknowledgement as a future, not awaited. `options` go to
    FastStream's publish (partition, timestamp_ms, ...)."""
    return await broker.publish(body, topic=topic, key=key, headers=dict(JSON_HEADERS), no_confirm=no_confirm,
                                **options)


async def publish_event(broker: KafkaBroker, event: Envelope, *, topic: str, **options: Any) -> RecordMetadata:
    """Publish an event as its JSON (by alias), under its `cluster/<entity>` key, and wait for its
    acknowledgement. `options` go to FastStream's publish (partition, timestamp_ms, ...)."""
    return await publish_json(broker, event.model_dump_json(by_alias=True).encode(), topic=topic,
                              key=event.kafka_key(), **options)


class Acknowledgements:
    """Sends kept in flight without waiting for each one's acknowledgement: at most `window` at once, reaped in
    order as they complete.

    A publisher that awaits every acknowledgement sends one record per broker round trip: a watcher did, and
    fell minutes behind a burst of pods. In flight, records accumulate into batches (aiokafka's linger), and
    order is kept (aiokafka has one request in flight per partition). A send that fails makes `failed()`
    raise, ending the publisher as a failed send did; a watcher then lists everything again, so what was never
    acknowledged is published again, not lost."""

    def __init__(self, window: int = 512) -> None:
        self._window = window
        self._in_flight: collections.deque[asyncio.Future[RecordMetadata]] = collections.deque()
        self._failure: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def sent(self, ack: asyncio.Future[RecordMetadata]) -> None:
        """`ack` (FastStream's no_confirm future) is in flight; wait only when `window` are."""
        if self._failure.done():
            self._failure.result()
        ack.add_done_callback(self._check)
        self._in_flight.append(ack)
        while self._in_flight and (len(self._in_flight) > self._window or self._in_flight[0].done()):
            await self._in_flight.popleft()

    def _check(self, ack: asyncio.Future[RecordMetadata]) -> None:
        error = None if ack.cancelled() else ack.exception()
        if error is not None and not self._failure.done():
            self._failure.set_exception(error)

    async def failed(self) -> None:
        """Never returns: raises the first failed send's error."""
        await self._failure


__all__ = ["JSON_HEADERS", "Acknowledgements", "publish_event", "publish_json"]
