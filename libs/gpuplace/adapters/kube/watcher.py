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
from gpuplace.contracts.events import PodEvent

log = logging.getLogger(__name__)

Publish = Callable[[str, Envelope], Awaitable[None]]
Stream = AsyncIterator[tuple[str, dict[str, Any]]]

_VOLATILE = {"event_id", "occurred_at"}


class ChangeFilter:
    """Remembers the last event content per entity and passes only changes (and every deletion)."""

    def __init__(self) -> None:
        self._last: dict[str, dict[str, Any]] = {}

    def published(self, event: Envelope) -> bool:
        """Whether an event about this entity went out and was not deleted since."""
        return event.entity() in self._last

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


class NodeGate:
    """Pods of other schedulers, held back until their node is one this watcher publishes.

    They count only on nodes gpuplace manages (the node selector narrows them), and a pod may be listed
    before its node at start-up: held here, it is published as soon as the node is, so placement never
    charges a pod to a node it does not know.
    """

    def __init__(self) -> None:
        self.known: set[str] = set()
        self._held: dict[str, dict[str, Envelope]] = {}  # node -> pod entity -> latest event
        self.pod_changes = ChangeFilter()  # what went out on the pods topic, from either pump

    def admit(self, event: PodEvent) -> bool:
        """True to publish now; False when held (node not seen yet)."""
        node = event.node_name or event.nominated_node_name or ""
        if node in self.known:
            return True
        self._held.setdefault(node, {})[event.entity()] = event
        return False

    def forget(self, event: PodEvent) -> None:
        self._held.get(event.node_name or event.nominated_node_name or "", {}).pop(event.entity(), None)

    def node_seen(self, name: str, *, deleted: bool) -> list[Envelope]:
        """Record a node; returns the pods held for it (to publish now)."""
        if deleted:
            self.known.discard(name)
            return []
        self.known.add(name)
        return list(self._held.pop(name, {}).values())


async def pump_pods(stream: Stream, publish: Publish, *, topic: str, cluster: str, region: str,
                    scheduler_name: str = "gpuplace", namespace: str | None = None,
                    gate: NodeGate | None = None) -> None:
    """gpuplace's pods (of `namespace`, when set) to place, and every other pod bound to (or nominated for) a node
    of this watcher's, to charge: the whole node counts (DESIGN §3). Other pending pods are none of its business."""
    gate = gate or NodeGate()
    changes = gate.pod_changes
    async for kind, obj in stream:
        try:
            event = translate.pod_event(obj, cluster=cluster, region=region, deleted=kind == "DELETED",
                                        scheduler_name=scheduler_name)
        except (KeyError, ValueError) as exc:  # an object the API should never send; log, do not stall
            log.error("cannot translate pod %s: %s", obj.get("metadata", {}).get("name"), exc)
            continue
        if event.managed and namespace and event.namespace != namespace:
            event = event.model_copy(update={"managed": False})  # another gpuplace's pod: charged, not placed
        if not event.managed:
            if event.kind == "deleted":
                gate.forget(event)
                if not changes.published(event):
                    continue
            elif not (event.node_name or event.nominated_node_name) or not gate.admit(event):
                continue
        if changes.changed(event):
            await publish(topic, event)


async def pump_nodes(stream: Stream, publish: Publish, *, topic: str, cluster: str, region: str,
                     gate: NodeGate | None = None, pods_topic: str = "") -> None:
    """Nodes; a node first seen releases the other schedulers' pods held for it (NodeGate) to `pods_topic`."""
    changes = ChangeFilter()
    gate = gate or NodeGate()
    async for kind, obj in stream:
        try:
            event = translate.node_event(obj, cluster=cluster, region=region, deleted=kind == "DELETED")
        except (KeyError, ValueError) as exc:
            log.error("cannot translate node %s: %s", obj.get("metadata", {}).get("name"), exc)
            continue
        if changes.changed(event):
            await publish(topic, event)
        for held in gate.node_seen(event.name, deleted=event.kind == "deleted"):
            if gate.pod_changes.changed(held):
                await publish(pods_topic, held)


async def run_until(stop: asyncio.Event, *pumps: Awaitable[None]) -> None:
    tasks = [asyncio.ensure_future(p) for p in pumps]
    stopper = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is stopper:
                continue
            failure = task.exception()
            if failure is not None:
                raise failure
    finally:
        for task in [*tasks, stopper]:
            task.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)


__all__ = ["ChangeFilter", "NodeGate", "pump_pods", "pump_nodes", "run_until"]
