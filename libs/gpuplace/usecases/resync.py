"""Reconciling with the apiserver what the event stream missed (usecases/reconcile finds it, this applies it):
when a cluster is loaded, every `resync_s`, and soon after a burst of node events (a restarted watcher re-lists
every node), at most every RELIST_RECONCILE_S. Pods gone are released as a deletion releases them, pods bound
elsewhere are charged where they run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from gpuplace.usecases.bound_news import BoundNews
from gpuplace.usecases.clusters import Clusters
from gpuplace.usecases.deciding import Deciding
from gpuplace.usecases.pod_rows import event_of
from gpuplace.usecases.pod_states import TRACKED
from gpuplace.usecases.ports import ClusterApi
from gpuplace.usecases.reconcile import Drift, find_drift
from gpuplace.usecases.repositories import UnitOfWorkFactory

log = logging.getLogger(__name__)
# A burst of node events is also what cluster-watcher's re-list after a restart sends (it publishes every node
# again): the cluster is reconciled then, at most this often, so a pod deleted while no watcher ran is freed
# within seconds of its restart rather than at the next periodic reconcile (issue 40: up to 5 minutes).
RELIST_RECONCILE_S = 15.0


class Resync:
    def __init__(self, uow_factory: UnitOfWorkFactory, cluster_apis: Mapping[str, ClusterApi], clusters: Clusters,
                 news: BoundNews, deciding: Deciding, resync_s: float | None) -> None:
        self._uow_factory = uow_factory
        self._apis = cluster_apis
        self._clusters = clusters
        self._news = news
        self._deciding = deciding
        self.every_s = resync_s  # reconcile with the apiserver on taking a cluster and this often; None: never
        self._relisted: set[str] = set()  # clusters to reconcile after a burst of node events (resync)
        self._relist_wake = asyncio.Event()

    def relisted(self, cluster: str) -> None:
        """A burst of node events in `cluster` ended: reconcile it soon (run), if reconciling at all."""
        if self.every_s:
            self._relisted.add(cluster)
            self._relist_wake.set()

    async def reconcile(self, cluster: str) -> Drift:
        """Apply what the event stream missed in `cluster` (usecases/reconcile): pods gone are released as a
        deletion releases them, pods bound elsewhere are charged where they run."""
        async with self._uow_factory() as uow:
            rows = await uow.pods.pods_in_state(cluster, TRACKED)
        drift = await find_drift(self._apis[cluster], rows)
        if not drift:
            return drift
        log.warning("reconciling %s with its apiserver: %s", cluster, drift.summary())
        async with self._clusters.held(cluster) as state:
            if state.stale:
                await self._clusters.reread(state)
            freed: set[str | None] = set()
            for row in drift.gone:
                freed.add(await self._news.forget(state, event_of(row, "deleted")))
            for row, node in drift.bound_elsewhere:
                await self._news.confirm_bound(state, event_of(row, "bound", node_name=node))
            await self._deciding.retry_for_nodes(state, {node for node in freed if node is not None})
        return drift

    async def run(self, stop: asyncio.Event) -> None:
        """Reconcile every cluster this worker holds each `resync_s`, and a cluster whose burst of node events
        ended (_retry_after_nodes) at once, at most every RELIST_RECONCILE_S, until `stop`; a failure (the
        apiserver away) is logged and tried again next round."""
        if not self.every_s:
            return
        loop = asyncio.get_running_loop()
        every_cluster_at, relist_at = loop.time() + self.every_s, loop.time()
        while not stop.is_set():
            now = loop.time()
            if self._relisted and now < relist_at:  # a re-list is waiting out the last one's reconcile
                await _first_of(stop, timeout_s=min(every_cluster_at, relist_at) - now)
            else:
                await _first_of(stop, self._relist_wake, timeout_s=every_cluster_at - now)
            self._relist_wake.clear()
            now = loop.time()
            if now >= every_cluster_at:
                every_cluster_at, due = now + self.every_s, self._clusters.known()
            elif self._relisted and now >= relist_at:
                relist_at, due = now + RELIST_RECONCILE_S, set(self._relisted)
            else:
                continue
            self._relisted -= due
            for cluster in [c for c in due if self._clusters.loaded(c) is not None]:
                if not stop.is_set():
                    await self.reconcile_logged(cluster)

    async def reconcile_logged(self, cluster: str) -> None:
        try:
            await self.reconcile(cluster)
        except Exception:  # noqa: BLE001 - the next round tries again; placement goes on meanwhile
            log.warning("reconciling %s failed", cluster, exc_info=True)


async def _first_of(*events: asyncio.Event, timeout_s: float) -> None:
    """Wait until one of `events` is set, or `timeout_s` passed."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=max(0.0, timeout_s), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


__all__ = ["RELIST_RECONCILE_S", "Resync"]
