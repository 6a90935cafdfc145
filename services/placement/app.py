"""placement service: consumes pods.v1 and nodes.v1, binds pods, relays the outbox to placements.v1.

Topics are keyed by cluster, so several placement workers in one consumer group split the clusters
between them; each worker holds the state of the clusters whose partitions it owns.
"""

from __future__ import annotations

import asyncio

from gpuplace.adapters.postgres.outbox_relay import OutboxRelay
from gpuplace.bootstrap import resources
from gpuplace.contracts import topics
from gpuplace.contracts.events import NodeEvent, PlacementEvent, PodEvent
from gpuplace.settings import Settings
from gpuplace.usecases.decide import decider
from gpuplace.usecases.defrag import Defragmenter, DefragSettings
from gpuplace.usecases.placement import PlacementService
from services.consumer import Subscription, wire

NAME = "placement"


async def run(settings: Settings, stop: asyncio.Event) -> None:
    kubeconfigs = settings.cluster_kubeconfigs()
    if not kubeconfigs:
        raise SystemExit("placement needs KUBECONFIG or GPUPLACE_KUBECONFIGS for the clusters it binds in")
    async with resources(settings, kubeconfigs=kubeconfigs, client_id=NAME) as res:
        relay = OutboxRelay(res.uow_factory, res.broker)
        decide = decider(settings.policy, latency_margin=settings.latency_margin)
        defrag = None
        if settings.defrag_enabled:
            def defrag(host: PlacementService) -> Defragmenter:
                return Defragmenter(res.uow_factory, res.cluster_apis, host, decide.planner_policy,
                                    settings=DefragSettings(min_priority=settings.defrag_min_priority))
        service = PlacementService(res.uow_factory, res.cluster_apis, decide, policy=settings.policy,
                                   topic_suffix=settings.topic_suffix, outbox_written=relay.wake, defrag=defrag)
        wire(res.broker, settings, NAME, [
            Subscription(topics.NODES, NodeEvent, service.on_node),
            Subscription(topics.PODS, PodEvent, service.on_pod),
            Subscription(topics.PLACEMENTS, PlacementEvent, service.on_placement),
        ])
        async with res.broker:
            await res.broker.start()
            await relay.run(stop)
            await service.drain()
            await relay.run_once()
