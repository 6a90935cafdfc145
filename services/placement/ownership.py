"""Which clusters this placement worker owns, from the partitions Kafka assigns it.

Records are partitioned by cluster (adapters/kafka), so owning partition p of the pods topic means owning
every cluster that hashes to p, on every topic placement reads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from aiokafka import ConsumerRebalanceListener

from gpuplace.adapters.kafka import partition_of
from gpuplace.usecases.placement import PlacementService

log = logging.getLogger(__name__)


class ClusterOwnership(ConsumerRebalanceListener):
    """On each assignment, first forget what may be stale (PlacementService.reload_clusters): another worker may
    have placed pods in these clusters meanwhile. Then load each configured cluster this worker now owns, at
    once rather than on the cluster's next event, so that pods the last owner reserved but did not bind (it
    crashed, or lost the partition) are bound even in a quiet cluster."""

    def __init__(self, service: PlacementService, clusters: Iterable[str], topic: str, partitions: int | None):
        self._service = service
        self._clusters = tuple(clusters)
        self._topic = topic
        self._partitions = partitions  # the topics' count; None: not created yet, ownership unknown
        self._loads: set[asyncio.Task[None]] = set()

    def owned(self, assigned: Iterable[int]) -> list[str]:
        """The configured clusters whose partition is among `assigned`."""
        if self._partitions is None:
            return []
        assigned = set(assigned)
        return [c for c in self._clusters if partition_of(c, self._partitions) in assigned]

    async def on_partitions_revoked(self, revoked) -> None:
        pass

    async def on_partitions_assigned(self, assigned) -> None:
        self._service.reload_clusters()
        for cluster in self.owned(tp.partition for tp in assigned if tp.topic == self._topic):
            # not awaited here: the rebalance waits for this callback
            task = asyncio.create_task(self._service.load(cluster), name=f"load {cluster}")
            self._loads.add(task)
            task.add_done_callback(self._loaded)

    def _loaded(self, task: asyncio.Task[None]) -> None:
        self._loads.discard(task)
        if not task.cancelled() and task.exception() is not None:  # the next event of the cluster tries again
            log.warning("loading %s failed", task.get_name(), exc_info=task.exception())


__all__ = ["ClusterOwnership"]
