"""The shape every consuming service shares: a broker, typed routes, run until stopped."""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager

from aiokafka import ConsumerRebalanceListener
from faststream.kafka import KafkaBroker

from gpuplace.adapters.kafka import Route, start_broker, subscribe
from gpuplace.adapters.metrics import PrometheusMetrics
from gpuplace.settings import Settings


def group_id(settings: Settings, service: str) -> str:
    """One consumer group per service: its members split the clusters between them (adapters/kafka)."""
    return f"{settings.consumer_group_prefix}.{service}{settings.topic_suffix}"


def wire(broker: KafkaBroker, settings: Settings, service: str, routes: list[Route],
         listener: ConsumerRebalanceListener | None = None, partitions: int | None = None,
         metrics: PrometheusMetrics | None = None, batch_records: int | None = None) -> None:
    subscribe(broker, routes, group_id=group_id(settings, service), consumer=service, suffix=settings.topic_suffix,
              listener=listener, attempts=settings.handler_attempts, partitions=partitions,
              instance_id=settings.instance_id, metrics=metrics, batch_records=batch_records)


async def run_broker(broker: KafkaBroker, settings: Settings, stop: asyncio.Event,
                     running: AbstractContextManager[None]) -> None:
    """Consume until `stop`; `running` (Health.running) is entered once the broker started."""
    async with broker:
        await start_broker(broker, settings.kafka)
        with running:
            await stop.wait()


__all__ = ["Route", "group_id", "wire", "run_broker"]
