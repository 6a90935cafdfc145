"""latency-ingest service."""

from __future__ import annotations

import asyncio
import functools

from gpuplace.adapters.kafka import check_broker, make_broker
from gpuplace.bootstrap import database
from gpuplace.contracts import topics
from gpuplace.contracts.events import LatencyWindow
from gpuplace.settings import Settings
from gpuplace.usecases.ingest import ingest_latency
from services.consumer import Route, run_broker, wire
from services.telemetry import Telemetry

NAME = "latency-ingest"


async def run(settings: Settings, stop: asyncio.Event, *, telemetry: Telemetry | None = None) -> None:
    telemetry = telemetry or Telemetry()
    async with database(settings) as uow_factory:
        broker = make_broker(settings.kafka, client_id=NAME)
        handler = functools.partial(ingest_latency, uow_factory, consumer=NAME,
                                    placements_topic=settings.topic(topics.PLACEMENTS), metrics=telemetry.metrics)
        wire(broker, settings, NAME, [Route(topics.LATENCY, LatencyWindow, handler)], metrics=telemetry.metrics)
        running = telemetry.health.running(NAME, postgres=uow_factory.check,
                                           kafka=functools.partial(check_broker, broker))
        await run_broker(broker, settings, stop, running)
