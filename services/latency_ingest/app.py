"""latency-ingest service."""

from __future__ import annotations

import asyncio
import functools

from gpuplace.adapters.kafka import make_broker
from gpuplace.bootstrap import database
from gpuplace.contracts import topics
from gpuplace.contracts.events import LatencyWindow
from gpuplace.settings import Settings
from gpuplace.usecases.ingest import ingest_latency
from services.consumer import Route, run_broker, wire

NAME = "latency-ingest"


async def run(settings: Settings, stop: asyncio.Event) -> None:
    async with database(settings) as uow_factory:
        broker = make_broker(settings.kafka, client_id=NAME)
        handler = functools.partial(ingest_latency, uow_factory, consumer=NAME,
                                    placements_topic=settings.topic(topics.PLACEMENTS))
        wire(broker, settings, NAME, [Route(topics.LATENCY, LatencyWindow, handler)])
        await run_broker(broker, settings, stop)
