"""Fold inventory, telemetry and latency events into the fleet state, idempotently by event_id.

Each function is one transaction: claim the event id, apply it, commit. A redelivered event finds its id
claimed and changes nothing.
"""

from __future__ import annotations

import logging

from gpuplace.contracts import topics
from gpuplace.contracts.events import GpuTelemetry, LatencyWindow, NodeEvent, PlacementEvent
from gpuplace.usecases import latency_learning
from gpuplace.usecases.event_rules import node_record
from gpuplace.usecases.ports import NO_METRICS, Metrics, Row
from gpuplace.usecases.repositories import UnitOfWork, UnitOfWorkFactory

log = logging.getLogger(__name__)


async def ingest_node(uow_factory: UnitOfWorkFactory, event: NodeEvent, *, consumer: str) -> bool:
    """Apply a node inventory event; returns False if it was a duplicate."""
    async with uow_factory() as uow:
        if not await uow.events.claim_event(consumer, event.event_id, event.digest()):
            return False
        if event.kind == "deleted":
            await uow.nodes.delete_node(event.cluster, event.name)
        else:
            short = await uow.nodes.upsert_node(node_record(event))  # the record replay keeps too
            if short:  # a fact, not an error: the GPU stays full until its pods go (repositories.Nodes.upsert_node)
                log.warning("node %s/%s reports %d MiB on GPU(s) %s, less than its pods hold: nothing new goes "
                            "there until they go", event.cluster, event.name, event.gpu_memory_mib, short)
        await uow.commit()
    return True


async def ingest_telemetry(uow_factory: UnitOfWorkFactory, event: GpuTelemetry, *, consumer: str) -> bool:
    """Store what a GPU reports about itself; samples for GPUs not in the inventory are ignored."""
    async with uow_factory() as uow:
        if not await uow.events.claim_event(consumer, event.event_id, event.digest()):
            return False
        await uow.nodes.record_telemetry(
            event.cluster, event.node, event.gpu_index, uuid=event.gpu_uuid,
            memory_observed_mib=event.memory_used_mib, utilization_pct=event.utilization_pct, healthy=event.healthy,
        )
        await uow.commit()
    return True


async def ingest_latency(uow_factory: UnitOfWorkFactory, event: LatencyWindow, *, consumer: str,
                         placements_topic: str = topics.PLACEMENTS, margin: float = 0.0,
                         metrics: Metrics = NO_METRICS) -> bool:
    """Store a latency window; a pod whose observed p95 is past its deadline raises an SLO violation.

    The window also refits the fleet's latency model (usecases/latency_learning.py).
    The violation closes the pod's GPU to new pods and marks the pod for a move, in the same transaction
    as the window, and publishes `slo_violation` through the outbox (once per GPU and pod, not per window).
    Once committed, its frames and deadline misses are counted (SLO attainment per cluster and workload): a
    redelivered window is not counted twice.
    """
    async with uow_factory() as uow:
        if not await uow.events.claim_event(consumer, event.event_id, event.digest()):
            return False
        await uow.latency.add_latency_window({
            "cluster": event.cluster, "namespace": event.namespace, "pod": event.pod, "workload": event.workload,
            "node": event.node, "gpu_index": event.gpu_index, "window_end": event.occurred_at,
            "window_s": event.window_s, "frames": event.frames, "p50_ms": event.p50_ms, "p95_ms": event.p95_ms,
            "p99_ms": event.p99_ms, "deadline_ms": event.deadline_ms, "deadline_misses": event.deadline_misses,
        })
        held = await uow.latency.gpu_of_pod(event.cluster, event.namespace, event.pod)
        if held is not None:
            await latency_learning.learn(uow, event, held)
            await _check_slo(uow, event, held, placements_topic, margin)
        await uow.commit()
    metrics.latency_window(event.cluster, event.workload, event.frames, event.deadline_misses)
    return True


async def _check_slo(uow: UnitOfWork, event: LatencyWindow, held: Row, placements_topic: str,
                     margin: float) -> None:
    deadline_ms = event.deadline_ms or held["deadline_ms"]
    if deadline_ms is None or event.p95_ms <= deadline_ms * (1.0 - margin):
        return
    if not await uow.latency.flag_slo_violation(event.cluster, held["uid"], held["node"], held["gpu_index"]):
        return
    violation = PlacementEvent(
        cluster=event.cluster, region=event.region, kind="slo_violation", namespace=event.namespace,
        pod=event.pod, pod_uid=held["uid"], node=held["node"],
        reasons={"latency": f"observed p95 {event.p95_ms:.1f} ms > deadline {deadline_ms:.1f} ms "
                            f"on GPU {held['gpu_index']}; GPU closed to new pods, pod marked for a move",
                 "gpu_index": str(held["gpu_index"])},
    )
    await uow.outbox.add_outbox(placements_topic, violation.kafka_key().decode(),
                                violation.model_dump_json(by_alias=True))


__all__ = ["ingest_node", "ingest_telemetry", "ingest_latency"]
