"""telemetry-ingest service."""

from __future__ import annotations

import asyncio
import functools

from gpuplace.adapters.kafka import make_broker
from gpuplace.bootstrap import database
from gpuplace.contracts import topics
from gpuplace.contracts.events import GpuTelemetry
from gpuplace.settings import Settings
from gpuplace.usecases.ingest import ingest_telemetry
from services.consumer import Route, run_broker, wire

NAME = "telemetry-ingest"


async def run(settings: Settings, stop: asyncio.Event) -> None:
    async with database(settings) as uow_factory:
        broker = make_broker(settings.kafka, client_id=NAME)
        handler = functools.partial(ingest_telemetry, uow_factory, consumer=NAME)
        wire(broker, settings, NAME, [Route(topics.TELEMETRY, GpuTelemetry, handler)])
        await run_broker(broker, settings, stop)
