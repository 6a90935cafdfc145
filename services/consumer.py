"""The shape every consuming service shares: a broker, typed subscribers, run until stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from faststream.kafka import KafkaBroker

from gpuplace.adapters.kafka import subscribe
from gpuplace.settings import Settings


@dataclass(frozen=True)
class Subscription:
    topic: str
    model: type[Any]
    handler: Callable[[Any], Awaitable[None]]


def group_id(settings: Settings, service: str, topic: str) -> str:
    """One consumer group per service and topic: a rebalance on one topic never pauses another."""
    return f"{settings.consumer_group_prefix}.{service}.{topic}{settings.topic_suffix}"


def wire(broker: KafkaBroker, settings: Settings, service: str, subscriptions: list[Subscription]) -> None:
    for sub in subscriptions:
        subscribe(broker, topic=sub.topic, group_id=group_id(settings, service, sub.topic), model=sub.model,
                  handler=sub.handler, consumer=service, suffix=settings.topic_suffix)


async def run_broker(broker: KafkaBroker, stop: asyncio.Event) -> None:
    async with broker:
        await broker.start()
        await stop.wait()


__all__ = ["Subscription", "group_id", "wire", "run_broker"]
