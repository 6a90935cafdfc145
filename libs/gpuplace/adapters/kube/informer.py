"""List-then-watch with re-list on 410 Gone, bookmarks and backoff (client-go's reflector, in small).

Yields ("SYNC", obj) for every object of a (re-)list and ("ADDED"|"MODIFIED"|"DELETED", obj) from the
watch; with `synced_marker`, ("SYNCED", {}) after each list (client-go's HasSynced: a consumer that joins two
kinds, nodes with their ResourceSlices, waits for the whole list of one before it trusts what it lacks).
A watch whose resourceVersion was compacted away (410, every 5 minutes on a default etcd) is
answered with a fresh list, so a consumer sees every object again and nothing is lost in between.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.kube.api_health import ApiHealth
from gpuplace.adapters.kube.cluster_api import KubeClusterApi

log = logging.getLogger(__name__)


async def list_and_watch(api: KubeClusterApi, kind: str, *, stop: asyncio.Event, watch_timeout_s: int = 300,
                         max_backoff_s: float = 30.0, synced_marker: bool = False, health: ApiHealth | None = None,
                         not_served: bool = False, **selectors: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The stream described in the module docstring. With `health`, each list and watch reports whether it
    delivers (api_health.ApiHealth: readiness, and the failures' meaning in the log and a metric). With
    `not_served`, a 404 (an API the cluster stopped serving) raises ApiException instead of retrying, for the
    caller to look again at what the cluster serves (cluster-watcher's discovery)."""
    backoff_s = 0.5
    resource_version: str | None = None
    if health is not None:
        health.listing(kind)
    # told when a watch opens (a quiet one may send nothing for minutes): streaming again after a failure
    watch_args: dict[str, Any] = {**selectors, **(
        {"opened": functools.partial(health.streaming, kind)} if health is not None else {})}
    try:
        while not stop.is_set():
            try:
                if resource_version is None:
                    items, resource_version = await api.list(kind, **selectors)
                    if health is not None:
                        health.streaming(kind)
                    for obj in items:
                        yield "SYNC", obj
                    if synced_marker:
                        yield "SYNCED", {}
                async for event in api.watch(kind, resource_version, timeout_s=watch_timeout_s, **watch_args):
                    obj = event["object"]
                    resource_version = obj.get("metadata", {}).get("resourceVersion", resource_version)
                    if event["type"] != "BOOKMARK":
                        yield event["type"], obj
                    if stop.is_set():
                        return
                backoff_s = 0.5  # a watch that timed out normally: resume from the last resourceVersion
            except ApiException as exc:
                if exc.status == 410:
                    log.info("%s watch expired (410 Gone); re-listing", kind)
                    resource_version = None
                    continue
                meaning = health.failed(kind, exc) if health is not None else f"HTTP {exc.status}"
                where = f" in cluster {health.cluster}" if health is not None else ""
                if exc.status == 404 and not_served:
                    log.warning("%s watch%s failed: %s", kind, where, meaning)
                    raise
                log.warning("%s watch%s failed: %s; retrying in %.1fs", kind, where, meaning, backoff_s)
            except (TimeoutError, OSError) as exc:
                if health is not None:
                    health.failed(kind, exc)
                log.warning("%s watch connection lost (%s); retrying in %.1fs", kind, exc, backoff_s)
            await asyncio.sleep(backoff_s * (1 + random.random() / 2))  # jitter spreads reconnecting watchers
            backoff_s = min(backoff_s * 2, max_backoff_s)
    finally:
        if health is not None:
            health.ended(kind)


__all__ = ["list_and_watch"]
