"""cluster-watcher service: list+watch one cluster, publish pods.v1 and nodes.v1.

Runs one per cluster (`GPUPLACE_CLUSTER`, `KUBECONFIG`). It only produces, so it needs no consumer group.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from faststream import FastStream
from faststream.specification import AsyncAPI

from gpuplace.adapters.kafka import check_broker, make_broker, publish_json, start_broker
from gpuplace.adapters.kube.informer import list_and_watch
from gpuplace.adapters.kube.watcher import NodeGate, pump_nodes, pump_pods, run_until
from gpuplace.bootstrap import cluster_api
from gpuplace.contracts import topics
from gpuplace.contracts.envelope import Envelope
from gpuplace.contracts.events import EventTooLarge, NodeEvent, PodEvent, encode_within
from gpuplace.settings import Settings
from services.telemetry import Telemetry

NAME = "cluster-watcher"
log = logging.getLogger(__name__)


async def run(settings: Settings, stop: asyncio.Event, *, kubeconfig: str | None = None,
              telemetry: Telemetry | None = None) -> None:
    telemetry = telemetry or Telemetry()
    path = kubeconfig or settings.kubeconfig
    if not path:
        raise SystemExit("cluster-watcher needs KUBECONFIG (or GPUPLACE_KUBECONFIG) for its cluster")
    broker = make_broker(settings.kafka, client_id=f"cluster-watcher-{settings.cluster}")

    async def publish(topic: str, event: Envelope) -> None:
        try:  # an oversize pod event goes out as a small one carrying request_error (encode_within)
            body = encode_within(event, settings.max_event_bytes)
        except EventTooLarge as exc:  # never crash-loop on one object: say so and go on
            log.error("not published: %s", exc)
            return
        await publish_json(broker, body, topic=settings.topic(topic), key=event.kafka_key())

    async with cluster_api(path) as api, broker:
        await start_broker(broker, settings.kafka)
        # Every pod of every namespace, whatever its scheduler: other pods use the nodes too (pump_pods).
        node_selector: dict[str, Any] = (
            {"label_selector": settings.node_label_selector} if settings.node_label_selector else {})
        common = {"cluster": settings.cluster, "region": settings.region}
        gate = NodeGate()
        with telemetry.health.running(NAME, kafka=functools.partial(check_broker, broker)):
            await run_until(
                stop,
                pump_pods(list_and_watch(api, "pods", stop=stop), publish, topic=topics.PODS,
                          scheduler_name=settings.scheduler_name, namespace=settings.namespace, gate=gate, **common),
                pump_nodes(list_and_watch(api, "nodes", stop=stop, **node_selector), publish,
                           topic=topics.NODES, gate=gate, pods_topic=topics.PODS, **common),
            )


def asyncapi_app(settings: Settings) -> FastStream:
    """The service's AsyncAPI description: what it publishes."""
    broker = make_broker(settings.kafka)
    broker.publisher(topics.PODS, schema=PodEvent, title="cluster-watcher:pods", description=PodEvent.__doc__)
    broker.publisher(topics.NODES, schema=NodeEvent, title="cluster-watcher:nodes", description=NodeEvent.__doc__)
    return FastStream(broker, specification=AsyncAPI(title="gpuplace cluster-watcher"))
