"""List-then-watch with re-list on 410 Gone, bookmarks and backoff (client-go's reflector, in small).

Yields ("SYNC", obj) for every object of a (re-)list and ("ADDED"|"MODIFIED"|"DELETED", obj) from the
watch; with `synced_marker`, ("SYNCED", {}) after each list (client-go's HasSynced: a consumer that joins two
kinds, nodes with their ResourceSlices, waits for the whole list of one before it trusts what it lacks).
A watch whose resourceVersion was compacted away (410, every 5 minutes on a default etcd) is
answered with a fresh list, so a consumer sees every object again and nothing is lost in between.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.kube.cluster_api import KubeClusterApi

log = logging.getLogger(__name__)


async def list_and_watch(api: KubeClusterApi, kind: str, *, stop: asyncio.Event, watch_timeout_s: int = 300,
                         max_backoff_s: float = 30.0, synced_marker: bool = False,
                         **selectors: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    backoff_s = 0.5
    resource_version: str | None = None
    while not stop.is_set():
        try:
            if resource_version is None:
                items, resource_version = await api.list(kind, **selectors)
                for obj in items:
                    yield "SYNC", obj
                if synced_marker:
                    yield "SYNCED", {}
            async for event in api.watch(kind, resource_version, timeout_s=watch_timeout_s, **selectors):
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
            log.warning("%s watch failed (%s); retrying in %.1fs", kind, exc.status, backoff_s)
        except (TimeoutError, OSError) as exc:
            log.warning("%s watch connection lost (%s); retrying in %.1fs", kind, exc, backoff_s)
        await asyncio.sleep(backoff_s * (1 + random.random() / 2))  # jitter spreads reconnecting watchers
        backoff_s = min(backoff_s * 2, max_backoff_s)


__all__ = ["list_and_watch"]
