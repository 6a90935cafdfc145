"""cluster-watcher service: list+watch one cluster, publish pods.v1 and nodes.v1.

Runs per cluster (`GPUPLACE_CLUSTER`, `KUBECONFIG`). It only produces, so it needs no consumer group. Several
replicas of one cluster's watcher elect one publisher with a Lease in that cluster (`GPUPLACE_LEADER_ELECTION`,
adapters/kube/leader_election.py); the others stand by and take over within the lease's duration when it dies.
A new leader lists every pod and node again, so a takeover loses no object's state (consumers are idempotent);
what a list cannot show, a pod deleted while no one watched, placement's reconciliation finds.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
from typing import Any

from faststream import FastStream
from faststream.kafka import KafkaBroker
from faststream.specification import AsyncAPI
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.dependencies import Dependency, Misconfigured
from gpuplace.adapters.kafka import (
    Acknowledgements,
    check_broker,
    ensure_copartitioned,
    make_broker,
    publish_json,
    start_broker,
)
from gpuplace.adapters.kube import discovery, dra
from gpuplace.adapters.kube.api_health import ApiHealth, ApiNotReady
from gpuplace.adapters.kube.cluster_api import KubeClusterApi
from gpuplace.adapters.kube.informer import list_and_watch
from gpuplace.adapters.kube.leader_election import ElectionTiming, KubeLeases, LeaseElector, LeaseUnusable, lease_name
from gpuplace.adapters.kube.watcher import DraCache, NodeGate, Publish, pump_nodes, pump_pods, run_until
from gpuplace.bootstrap import cluster_api
from gpuplace.contracts import topics
from gpuplace.contracts.envelope import Envelope
from gpuplace.contracts.events import EventTooLarge, NodeEvent, PodEvent, encode_within
from gpuplace.settings import ConfigurationError, Settings
from services.telemetry import Telemetry

NAME = "cluster-watcher"
COPARTITIONED = (topics.PODS, topics.NODES, topics.PLACEMENTS)  # what placement reads together
log = logging.getLogger(__name__)


def election_lease(settings: Settings) -> str:
    """The Lease of one cluster's watchers: the topic suffix in it keeps runs that share an apiserver (tests,
    benchmarks, each with its own topics) from electing one leader between them."""
    return lease_name("gpuplace-cluster-watcher", settings.cluster, settings.topic_suffix)


def election_identity(settings: Settings) -> str:
    """GPUPLACE_INSTANCE_ID (the pod name: a container restarted in its pod takes its lease back at once), else
    hostname_pid. Must differ between replicas: two with one identity would both lead."""
    return settings.instance_id or f"{socket.gethostname()}_{os.getpid()}"


async def run(settings: Settings, stop: asyncio.Event, *, kubeconfig: str | None = None,
              telemetry: Telemetry | None = None) -> None:
    telemetry = telemetry or Telemetry()
    path = kubeconfig or settings.kubeconfig
    if not path:
        raise ConfigurationError("cluster-watcher needs KUBECONFIG (or GPUPLACE_KUBECONFIG) for its cluster")
    broker = make_broker(settings.kafka, client_id=f"cluster-watcher-{settings.cluster}")
    async with cluster_api(path) as api, broker:
        await start_broker(broker, settings.kafka)
        # the topics placement reads together, created before the first send rather than by it (auto-created
        # topics can misroute a cluster's first records: adapters/kafka.ensure_copartitioned)
        await ensure_copartitioned(settings.kafka, [settings.topic(t) for t in COPARTITIONED],
                                   replication_factor=settings.topic_replication_factor)
        health = ApiHealth(settings.cluster, report=telemetry.metrics.kube_api_failure)
        watcher = _ClusterWatch(settings, stop, api, broker, health, telemetry)
        # a standby is ready: it takes over within the lease's duration
        with telemetry.health.running(NAME, kafka=functools.partial(check_broker, broker),
                                      **{f"cluster {settings.cluster}": watcher.apiserver}), \
                telemetry.health.noting(lambda: list(health.notes.values())):
            if settings.leader_election:
                await watcher.elect()
            else:
                await watcher.watch()


class _ClusterWatch:
    """One cluster's list+watch, published to Kafka: run at once, or only while this replica leads (elect)."""

    def __init__(self, settings: Settings, stop: asyncio.Event, api: KubeClusterApi, broker: KafkaBroker,
                 health: ApiHealth, telemetry: Telemetry) -> None:
        self._settings, self._stop, self._api, self._broker = settings, stop, api, broker
        self._health, self._telemetry = health, telemetry
        self._elector: LeaseElector | None = None

    def _publisher(self, acks: Acknowledgements) -> Publish:
        settings = self._settings

        async def publish(topic: str, event: Envelope) -> None:
            if self._elector is not None and not self._elector.leading:  # the term ended: the elector is stopping
                return  # the pumps (the next leader lists everything again)
            try:  # an oversize pod event goes out as a small one carrying request_error (encode_within)
                body = encode_within(event, settings.max_event_bytes)
            except EventTooLarge as exc:  # never crash-loop on one object: say so and go on
                log.error("not published: %s", exc)
                return
            await acks.sent(await publish_json(self._broker, body, topic=settings.topic(topic),
                                               key=event.kafka_key(), no_confirm=True))
        return publish

    async def watch(self) -> None:
        """List and watch until `stop` (or, under election, until the term ends): fresh state each time. What
        the cluster serves is asked first, and again when a DRA watch answers 404 (discovery.py)."""
        settings = self._settings
        while not self._stop.is_set():
            served = await discovery.discover(self._api, self._health, dra_wanted=settings.dra_enabled,
                                              stop=self._stop)
            if served is None:
                return
            self._telemetry.metrics.kube_api_served(settings.cluster, discovery.DRA_API, served.dra)
            try:
                await self._pumps(served.dra)
                return
            except ApiException as exc:
                if exc.status != 404:
                    raise
                log.warning("cluster %s: an API went away (404); asking the apiserver what it serves now",
                            settings.cluster)

    async def _pumps(self, dra_served: bool) -> None:
        # Every pod of every namespace, whatever its scheduler: other pods use the nodes too (pump_pods).
        settings = self._settings
        node_selector: dict[str, Any] = (
            {"label_selector": settings.node_label_selector} if settings.node_label_selector else {})
        common = {"cluster": settings.cluster, "region": settings.region}
        gate = NodeGate()
        acks = Acknowledgements()  # a send that fails ends the watch: the next one lists everything again
        publish = self._publisher(acks)
        cache = DraCache()
        watched = functools.partial(list_and_watch, self._api, stop=self._stop, health=self._health)
        claims = watched("resourceclaims", not_served=True) if dra_served else None
        slices = watched("resourceslices", synced_marker=True, not_served=True,
                         field_selector=f"spec.driver={dra.DRIVER}") if dra_served else None
        try:
            await run_until(
                self._stop, acks.failed(),
                pump_pods(watched("pods"), publish, topic=topics.PODS,
                          scheduler_name=settings.scheduler_name, namespace=settings.namespace, gate=gate,
                          claims=claims, cache=cache, unenforced_sharing=settings.allow_unenforced_sharing,
                          **common),
                pump_nodes(watched("nodes", **node_selector), publish,
                           topic=topics.NODES, gate=gate, pods_topic=topics.PODS, slices=slices, cache=cache,
                           **common),
            )
        finally:
            self._health.forget_watches()

    async def apiserver(self) -> None:
        """Readiness of the cluster's side: credentials accepted, every watch streaming where this replica
        leads (a standby runs none), and the Lease read and written."""
        await self._health.check(self._api)
        if self._elector is not None and self._elector.failure:
            raise ApiNotReady(f"apiserver of cluster {self._settings.cluster}: lease {self._elector.failure}")

    async def elect(self) -> None:
        """Watch while this replica holds the cluster's Lease; stand by while another does."""
        settings = self._settings
        leases = KubeLeases(self._api.api_client, namespace=settings.leader_election_namespace,
                            name=election_lease(settings))
        timing = ElectionTiming(settings.leader_election_lease_duration_s,
                                settings.leader_election_renew_deadline_s, settings.leader_election_retry_period_s)
        self._elector = LeaseElector(leases, identity=election_identity(settings), timing=timing)
        try:
            await self._elector.run(self._stop, self.watch)
        except LeaseUnusable as exc:  # no namespace, no permission: one line, and the service ends
            where = Dependency("leader election", f"cluster {settings.cluster}",
                               "GPUPLACE_LEADER_ELECTION_NAMESPACE; GPUPLACE_LEADER_ELECTION=false runs one "
                               "replica without a Lease")
            raise Misconfigured(where, str(exc)) from exc


def asyncapi_app(settings: Settings) -> FastStream:
    """The service's AsyncAPI description: what it publishes."""
    broker = make_broker(settings.kafka)
    broker.publisher(topics.PODS, schema=PodEvent, title="cluster-watcher:pods", description=PodEvent.__doc__)
    broker.publisher(topics.NODES, schema=NodeEvent, title="cluster-watcher:nodes", description=NodeEvent.__doc__)
    return FastStream(broker, specification=AsyncAPI(title="gpuplace cluster-watcher"))
