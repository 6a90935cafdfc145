"""Turn one cluster's watched pods and nodes into pods.v1 / nodes.v1 events.

Publishes only what changed for gpuplace: a pod's status heartbeat or a node's lease renewal translate to
the same event as before and are dropped here, so the topics carry decisions' inputs, not API noise.
A re-list (start-up, or after 410 Gone) publishes every object again; consumers are idempotent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from gpuplace.adapters.kube import translate
from gpuplace.contracts.envelope import Envelope

log = logging.getLogger(__name__)

Publish = Callable[[str, Envelope], Awaitable[None]]
Stream = AsyncIterator[tuple[str, dict[str, Any]]]

_VOLATILE = {"event_id", "occurred_at"}


class ChangeFilter:
    """Remembers the last event content per entity and passes only changes (and every deletion)."""

    def __init__(self) -> None:
        self._last: dict[str, dict[str, Any]] = {}

    def changed(self, event: Envelope) -> bool:
        key = event.entity()
        content = event.model_dump(exclude=_VOLATILE)
        if getattr(event, "kind", None) == "deleted":
            self._last.pop(key, None)
            return True
        if self._last.get(key) == content:
            return False
        self._last[key] = content
        return True


async def pump_pods(stream: Stream, publish: Publish, *, topic: str, cluster: str, region: str,
                    scheduler_name: str = "gpuplace") -> None:
    """Every pod of gpuplace's, and every pod of another scheduler once it is bound to a node: the whole node
    counts (DESIGN §3). Another scheduler's pod that is still pending is none of gpuplace's business."""
    changes = ChangeFilter()
    async for kind, obj in stream:
        try:
            event = translate.pod_event(obj, cluster=cluster, region=region, deleted=kind == "DELETED",
                                        scheduler_name=scheduler_name)
        except (KeyError, ValueError) as exc:  # an object the API should never send; log, do not stall
            log.error("cannot translate pod %s: %s", obj.get("metadata", {}).get("name"), exc)
            continue
        if not event.managed and event.node_name is None:
            continue
        if changes.changed(event):
            await publish(topic, event)


async def pump_nodes(stream: Stream, publish: Publish, *, topic: str, cluster: str, region: str) -> None:
    changes = ChangeFilter()
    async for kind, obj in stream:
        try:
            event = translate.node_event(obj, cluster=cluster, region=region, deleted=kind == "DELETED")
        except (KeyError, ValueError) as exc:
            log.error("cannot translate node %s: %s", obj.get("metadata", {}).get("name"), exc)
            continue
        if changes.changed(event):
            await publish(topic, event)


async def run_until(stop: asyncio.Event, *pumps: Awaitable[None]) -> None:
    tasks = [asyncio.ensure_future(p) for p in pumps]
    stopper = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper and task.exception():
                raise task.exception()  # type: ignore[misc]
    finally:
        for task in [*tasks, stopper]:
            task.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)


__all__ = ["ChangeFilter", "pump_pods", "pump_nodes", "run_until"]
