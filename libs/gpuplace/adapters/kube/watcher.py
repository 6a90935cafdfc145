"""Turn one cluster's watched pods and nodes into pods.v1 / nodes.v1 events.

Publishes only what changed for gpuplace: a pod's status heartbeat or a node's lease renewal translate to
the same event as before and are dropped here, so the topics carry decisions' inputs, not API noise.
A re-list (start-up, or after 410 Gone) publishes every object again; consumers are idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from gpuplace.adapters.kube import dra, translate
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


class DraCache:
    """What the watcher has seen of DRA: ResourceClaims by namespace/name, gpu.nvidia.com ResourceSlices by name.

    Pods are translated with their claims and nodes with their slices (translate.py): a claim or slice that
    changes re-translates the pods or node that use it. A node's inventory reads its own slices only (a re-list
    would otherwise cost nodes x slices). A refused slice is logged once per node and reason."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self._by_node: dict[str, dict[str, dict[str, Any]]] = {}  # node -> its slices by name (inventory)
        self._refused: dict[str, str] = {}

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claims.get((namespace, name))

    def saw_claim(self, kind: str, obj: dict[str, Any]) -> tuple[str, str]:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if kind == "DELETED":
            self.claims.pop(key, None)
        else:
            self.claims[key] = obj
        return key

    def saw_slice(self, kind: str, obj: dict[str, Any]) -> str | None:
        """Record a slice; returns its node (None for a slice of another driver or of no node)."""
        if (obj.get("spec") or {}).get("driver") != dra.DRIVER:
            return None
        name = obj["metadata"]["name"]
        before = self.slices.pop(name, None)
        if before is not None:
            self._by_node.get(_slice_node(before), {}).pop(name, None)
        node = _slice_node(obj)
        if kind != "DELETED":
            self.slices[name] = obj
            self._by_node.setdefault(node, {})[name] = obj
        return node or None

    def inventory(self, node: str) -> dra.SliceInventory | None:
        mine = list(self._by_node.get(node, {}).values())
        if not mine:
            return None
        try:
            inventory = dra.slice_inventory(node, mine)
        except (dra.SliceError, KeyError, TypeError, ValueError) as exc:
            if self._refused.get(node) != str(exc):
                self._refused[node] = str(exc)
                log.error("node %s: its %s ResourceSlices are not used, the node has no DRA GPUs: %s",
                          node, dra.DRIVER, exc)
            return None
        self._refused.pop(node, None)
        return inventory


def _slice_node(obj: dict[str, Any]) -> str:
    """The node a slice publishes devices of: spec.nodeName, else its pool's name (the NVIDIA driver names the
    pool after the node)."""
    spec = obj.get("spec") or {}
    return str(spec.get("nodeName") or (spec.get("pool") or {}).get("name") or "")


async def _merged(*sources: tuple[str, Stream | None]) -> AsyncGenerator[tuple[str, str, dict[str, Any]], None]:
    """(source, kind, object) from several list-and-watch streams as they come, until they all end; a failing
    stream fails it."""
    queue: asyncio.Queue[tuple[str, str, dict[str, Any]] | BaseException | None] = asyncio.Queue(maxsize=1024)

    async def drain(tag: str, stream: Stream) -> None:
        try:
            async for kind, obj in stream:
                await queue.put((tag, kind, obj))
            await queue.put(None)
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            await queue.put(exc)

    tasks = [asyncio.ensure_future(drain(tag, stream)) for tag, stream in sources if stream is not None]
    running = len(tasks)
    try:
        while running:
            item = await queue.get()
            if item is None:
                running -= 1
                continue
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def pump_pods(stream: Stream, publish: Publish, *, topic: str, cluster: str, region: str,
                    scheduler_name: str = "gpuplace", namespace: str | None = None,
                    gate: NodeGate | None = None, claims: Stream | None = None,
                    cache: DraCache | None = None, unenforced_sharing: bool = False) -> None:
    """gpuplace's pods (of `namespace`, when set) to place, and every other pod bound to (or nominated for) a node
    of this watcher's, to charge: the whole node counts (DESIGN §3). Other pending pods are none of its business.

    With `claims` (ResourceClaims, DRA), a pod with spec.resourceClaims is published once its claims exist, with
    them (translate.pod_event); a claim that changes publishes its pods again. A pod gone whose allocated claim
    is still reserved for it is published deleted only once the resourceclaim controller released the claim:
    until then the claim's devices are taken, and gpuplace must not give them to another pod.

    `unenforced_sharing` (GPUPLACE_ALLOW_UNENFORCED_SHARING) lets GPU shares go where nothing enforces them
    (adapters/kube/enforcement.py)."""
    pump = _PodPump(publish, topic=topic, cluster=cluster, region=region, scheduler_name=scheduler_name,
                    namespace=namespace, gate=gate or NodeGate(), cache=cache or DraCache(),
                    with_claims=claims is not None, unenforced_sharing=unenforced_sharing)
    # closed when the pump ends or is cancelled (a term of leadership over): its watches stop with it
    async with contextlib.aclosing(_merged(("pod", stream), ("claim", claims))) as events:
        async for source, kind, obj in events:
            if source == "pod":
                await pump.pod(kind, obj)
            else:
                await pump.claim(kind, obj)


class _PodPump:
    """What pump_pods remembers between events: the pods with DRA claims (their last kind and object) and the pods
    that use each claim, so that a claim that changes publishes its pods again."""

    def __init__(self, publish: Publish, *, topic: str, cluster: str, region: str, scheduler_name: str,
                 namespace: str | None, gate: NodeGate, cache: DraCache, with_claims: bool,
                 unenforced_sharing: bool) -> None:
        self._publish, self._topic, self._cluster, self._region = publish, topic, cluster, region
        self._scheduler_name, self._namespace, self._gate, self._cache = scheduler_name, namespace, gate, cache
        self._with_claims, self._unenforced_sharing = with_claims, unenforced_sharing
        self._changes = gate.pod_changes
        self._pods: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}  # pods with claims: last kind and object
        self._users: dict[tuple[str, str], set[tuple[str, str]]] = {}  # claim -> pods using it
        self._read: dict[tuple[str, str], tuple[Any, ...]] = {}  # pod -> what its last translation read

    async def claim(self, kind: str, obj: dict[str, Any]) -> None:
        """A ResourceClaim changed: its pods again."""
        claim = self._cache.saw_claim(kind, obj)
        for pod in sorted(self._users.get(claim, ())):
            if pod in self._pods:
                await self.pod(*self._pods[pod])

    async def pod(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        read = _translation_inputs(kind, obj)
        if read is not None and self._read.get(key) == read:
            return  # a status heartbeat: nothing translation reads changed, so neither would the event
        names = self._remember(key, kind, obj)
        event = self._translate(kind, obj)
        if event is None:
            return
        if read is None:
            self._read.pop(key, None)
        else:
            self._read[key] = read
        if event.kind == "deleted" and key in self._pods:
            if self._holds_devices(meta.get("uid"), key[0], names):
                return  # still holds its claim's devices: published when the claim is released
            self._pods.pop(key, None)
            for name in names or ():
                self._users.get((key[0], name), set()).discard(key)
        if event.managed and self._namespace and event.namespace != self._namespace:
            event = event.model_copy(update={"managed": False})  # another gpuplace's pod: charged, not placed
        if not event.managed and not self._charged(event):
            return
        if self._changes.changed(event):
            await self._publish(self._topic, event)

    def _remember(self, key: tuple[str, str], kind: str, obj: dict[str, Any]) -> list[str] | None:
        """The names of the pod's claims (None without any), the pod remembered under each of them."""
        if not (obj.get("spec") or {}).get("resourceClaims"):
            return None
        names = translate.claim_names(obj)
        self._pods[key] = (kind, obj)
        for name in names or ():
            self._users.setdefault((key[0], name), set()).add(key)
        return names

    def _translate(self, kind: str, obj: dict[str, Any]) -> PodEvent | None:
        try:
            return translate.pod_event(obj, cluster=self._cluster, region=self._region, deleted=kind == "DELETED",
                                       scheduler_name=self._scheduler_name,
                                       claims=self._cache.claim if self._with_claims else None,
                                       unenforced_sharing=self._unenforced_sharing)
        except translate.ClaimPending as exc:
            log.debug("%s; published when it is", exc)
        except (KeyError, ValueError) as exc:  # an object the API should never send; log, do not stall
            log.error("cannot translate pod %s: %s", obj.get("metadata", {}).get("name"), exc)
        return None

    def _holds_devices(self, uid: str | None, namespace: str, names: list[str] | None) -> bool:
        """Whether one of the pod's allocated claims is still reserved for it."""
        return any(uid in dra.reserved_for(c) for c in
                   (self._cache.claim(namespace, n) for n in names or ()) if c is not None and
                   (c.get("status") or {}).get("allocation"))

    def _charged(self, event: PodEvent) -> bool:
        """Whether another scheduler's pod is published: bound to (or nominated for) a node of this watcher's, or
        deleted after being published."""
        if event.kind == "deleted":
            self._gate.forget(event)
            return self._changes.published(event)
        return bool(event.node_name or event.nominated_node_name) and self._gate.admit(event)


def _translation_inputs(kind: str, obj: dict[str, Any]) -> tuple[Any, ...] | None:
    """Everything translate.pod_event reads of a pod, to compare with its last update (None: always translate,
    for a deletion, and for a pod with ResourceClaims, whose translation also reads its claims).

    Most updates of a pod are its status moving on (the kubelet's, KWOK's: phase Running, conditions, IPs) and
    change nothing translation reads; comparing these parts is two orders of magnitude cheaper than translating
    and filtering the result (ChangeFilter), which gives the same answer. Phase counts only as terminal or not."""
    spec = obj.get("spec") or {}
    if kind == "DELETED" or spec.get("resourceClaims"):
        return None
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    return (meta.get("uid"), meta.get("annotations"), meta.get("ownerReferences"), meta.get("deletionTimestamp"),
            meta.get("creationTimestamp"), spec, status.get("phase") in translate.TERMINAL_PHASES,
            status.get("nominatedNodeName"))


async def pump_nodes(stream: Stream, publish: Publish, *, topic: str, cluster: str, region: str,
                     gate: NodeGate | None = None, pods_topic: str = "", slices: Stream | None = None,
                     cache: DraCache | None = None) -> None:
    """Nodes; a node first seen releases the other schedulers' pods held for it (NodeGate) to `pods_topic`.
    With `slices` (gpu.nvidia.com ResourceSlices, listed with a "SYNCED" marker), a node's GPUs are those its
    slice publishes (dra.py), and a slice that changes publishes its node again."""
    changes = ChangeFilter()
    gate = gate or NodeGate()
    cache = cache or DraCache()
    nodes: dict[str, tuple[str, dict[str, Any]]] = {}  # with slices: each node as last seen, to re-translate

    async def handle(kind: str, obj: dict[str, Any]) -> None:
        name = obj.get("metadata", {}).get("name", "")
        if kind == "DELETED":
            nodes.pop(name, None)
        elif slices is not None:
            nodes[name] = (kind, obj)
        try:
            event = translate.node_event(obj, cluster=cluster, region=region, deleted=kind == "DELETED",
                                         inventory=cache.inventory(name) if slices is not None else None)
        except (KeyError, ValueError) as exc:
            log.error("cannot translate node %s: %s", name, exc)
            return
        if changes.changed(event):
            await publish(topic, event)
        for held in gate.node_seen(event.name, deleted=event.kind == "deleted"):
            if gate.pod_changes.changed(held):
                await publish(pods_topic, held)

    # Nodes wait for the first whole list of slices (its "SYNCED" marker): a node published before its slice
    # is seen has no GPUs, and the other schedulers' pods it releases would be charged on none.
    waiting: list[tuple[str, dict[str, Any]]] | None = [] if slices is not None else None
    async with contextlib.aclosing(_merged(("node", stream), ("slice", slices))) as events:
        async for source, kind, obj in events:
            if source == "node":
                if waiting is None:
                    await handle(kind, obj)
                else:
                    waiting.append((kind, obj))
                continue
            if kind == "SYNCED":
                for held in waiting or ():
                    await handle(*held)
                waiting = None
                continue
            node = cache.saw_slice(kind, obj)
            if node is not None and node in nodes:
                await handle(*nodes[node])


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


__all__ = ["ChangeFilter", "NodeGate", "DraCache", "pump_pods", "pump_nodes", "run_until"]
