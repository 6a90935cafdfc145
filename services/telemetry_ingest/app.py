"""telemetry-ingest service."""

from __future__ import annotations

import asyncio
import functools

from gpuplace.adapters.kafka import check_broker, make_broker
from gpuplace.bootstrap import database
from gpuplace.contracts import topics
from gpuplace.contracts.events import GpuTelemetry
from gpuplace.settings import Settings
from gpuplace.usecases.ingest import ingest_telemetry
from services.consumer import Route, run_broker, wire
from services.telemetry import Telemetry

NAME = "telemetry-ingest"


async def run(settings: Settings, stop: asyncio.Event, *, telemetry: Telemetry | None = None) -> None:
    telemetry = telemetry or Telemetry()
    async with database(settings) as uow_factory:
        broker = make_broker(settings.kafka, client_id=NAME)
        handler = functools.partial(ingest_telemetry, uow_factory, consumer=NAME)
        wire(broker, settings, NAME, [Route(topics.TELEMETRY, GpuTelemetry, handler)], metrics=telemetry.metrics)
        running = telemetry.health.running(NAME, postgres=uow_factory.check,
                                           kafka=functools.partial(check_broker, broker))
        await run_broker(broker, settings, stop, running)
