"""placement service: consumes pods.v1 and nodes.v1, binds pods, relays the outbox to placements.v1.

Records are partitioned by cluster and the three topics are read by one consumer, so several placement
workers in one consumer group split the clusters between them (adapters/kafka); each worker holds the state
of the clusters whose partitions it owns, and reads them again when its partitions change (ownership.py).
"""

from __future__ import annotations

import asyncio
import functools
import re
from typing import get_args

from gpuplace.adapters.kafka import check_broker, ensure_copartitioned, start_broker
from gpuplace.adapters.kube.api_health import ApiHealth
from gpuplace.adapters.postgres.outbox_relay import OutboxRelay
from gpuplace.bootstrap import placement_worker, resources
from gpuplace.contracts import topics
from gpuplace.contracts.events import NodeEvent, PlacementEvent, PlacementKind, PodEvent
from gpuplace.settings import ConfigurationError, Settings
from gpuplace.usecases.decide import decider, policy_options
from gpuplace.usecases.defrag import DefragSettings
from gpuplace.usecases.repositories import UnitOfWorkFactory
from gpuplace.usecases.retention import Pruner, RetentionPolicy
from gpuplace.usecases.scale_hints import HintSettings, parse_shapes
from services.consumer import Route, wire
from services.placement.ownership import ClusterOwnership
from services.telemetry import Telemetry

NAME = "placement"
BATCH_RECORDS = 256  # records read at once: a burst of pending pods is decided in batches of up to this many


_KIND = re.compile(rb'"kind"\s*:\s*"([a-z_]+)"')
_NOT_VIOLATIONS = frozenset(k.encode() for k in get_args(PlacementKind) if k != "slo_violation")


def may_close_a_gpu(body: bytes) -> bool:
    """Whether a placements record may be an SLO violation, the one kind placement acts on (on_placement): its
    own decided and bound events, two a pod, are skipped without being parsed. Only a record that names another
    kind of the contract is skipped: one whose kind cannot be read is parsed, and dead-lettered if malformed."""
    found = _KIND.search(body)
    return found is None or found.group(1) not in _NOT_VIOLATIONS


async def run(settings: Settings, stop: asyncio.Event, *, telemetry: Telemetry | None = None) -> None:
    telemetry = telemetry or Telemetry()
    metrics = telemetry.metrics
    kubeconfigs = settings.cluster_kubeconfigs()
    if not kubeconfigs:
        raise ConfigurationError("placement needs KUBECONFIG or GPUPLACE_KUBECONFIGS for the clusters it binds in")
    try:
        options = policy_options(settings.expected_shapes, settings.whole_gpu_reserve)
    except ValueError as error:
        raise ConfigurationError(f"GPUPLACE_EXPECTED_SHAPES: {error}") from None
    async with resources(settings, kubeconfigs=kubeconfigs, client_id=NAME) as res:
        relay = OutboxRelay(res.uow_factory, res.broker, max_event_bytes=settings.max_event_bytes,
                            deadletter_topic=settings.topic(topics.DEADLETTER), metrics=metrics)
        decide = decider(settings.policy, latency_margin=settings.latency_margin, options=options)
        hints = None
        if settings.scale_hints_enabled:
            try:
                declared = parse_shapes(settings.scale_hint_shapes)
            except ValueError as exc:
                raise ConfigurationError(f"GPUPLACE_SCALE_HINT_SHAPES: {exc}") from None
            hints = HintSettings(min_wait_s=settings.scale_hint_min_wait_s, interval_s=settings.scale_hint_interval_s,
                                 shapes=declared)
        defrag = DefragSettings(min_priority=settings.defrag_min_priority) if settings.defrag_enabled else None
        worker = placement_worker(res.uow_factory, res.cluster_apis, decide, policy=settings.policy,
                                  topic_suffix=settings.topic_suffix, outbox_written=relay.wake, defrag=defrag,
                                  hints=hints, resync_s=settings.reconcile_interval_s or None, metrics=metrics,
                                  bind_concurrency=settings.bind_concurrency)
        service = worker.service
        routes = [Route(topics.NODES, NodeEvent, service.on_node),
                  Route(topics.PODS, PodEvent, service.on_pod, batch=service.on_pods),
                  Route(topics.PLACEMENTS, PlacementEvent, service.on_placement, wants=may_close_a_gpu)]
        try:
            partitions = await ensure_copartitioned(settings.kafka, [settings.topic(r.topic) for r in routes],
                                                    replication_factor=settings.topic_replication_factor)
        except ValueError as exc:
            raise ConfigurationError(f"placement: {exc}") from None
        ownership = ClusterOwnership(service, res.cluster_apis, settings.topic(topics.PODS), partitions)
        wire(res.broker, settings, NAME, routes, listener=ownership, partitions=partitions, metrics=metrics,
             batch_records=BATCH_RECORDS)
        async with res.broker:
            await start_broker(res.broker, settings.kafka)
            # each cluster's apiserver must accept the credentials (a revoked or expired token: not ready)
            apiservers = {f"cluster {name}": functools.partial(
                ApiHealth(name, report=metrics.kube_api_failure).check, api) for name, api in res.cluster_apis.items()}
            with metrics.watching(service.cluster_gauges), telemetry.health.running(
                    NAME, postgres=res.uow_factory.check, kafka=functools.partial(check_broker, res.broker),
                    **apiservers):
                await asyncio.gather(relay.run(stop), service.resync(stop), pruner(settings, res.uow_factory).run(stop))
            await service.drain()
            if worker.hints is not None:
                await worker.hints.drain()
            await relay.run_once()


def pruner(settings: Settings, uow_factory: UnitOfWorkFactory) -> Pruner:
    """Retention (usecases/retention.py): every placement replica runs one; the one holding the store's pruning turn
    prunes, so several replicas never prune at once."""
    policy = RetentionPolicy.in_days(
        processed_events=settings.retention_processed_events_days, outbox=settings.retention_outbox_days,
        decisions=settings.retention_decisions_days, latency_windows=settings.retention_latency_windows_days,
        interval_s=settings.retention_interval_s, batch_rows=settings.retention_batch_rows)
    return Pruner(uow_factory, policy)
