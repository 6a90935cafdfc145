"""Composition root: settings -> engine, unit-of-work factory, broker, cluster API clients; and the placement
worker's handlers wired on their message bus (placement_worker).

Services, the CLI and the integration tests all build their dependencies here, so there is one place
where a client is created and one place where it is closed. Nothing is created at import time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

from faststream.kafka import KafkaBroker

from gpuplace.adapters import dependencies
from gpuplace.adapters.kafka import make_broker
from gpuplace.adapters.kube.cluster_api import KubeClusterApi, connect
from gpuplace.adapters.postgres import migrate
from gpuplace.adapters.postgres.unit_of_work import PostgresUnitOfWorkFactory, make_engine
from gpuplace.settings import Settings
from gpuplace.usecases.background import Background
from gpuplace.usecases.binder import BIND_CONCURRENCY
from gpuplace.usecases.clusters import Clusters
from gpuplace.usecases.decide import Decider
from gpuplace.usecases.decision_log import DecisionLog
from gpuplace.usecases.defrag import Defragmenter, DefragSettings
from gpuplace.usecases.messages import ClusterLoaded, MessageBus, PodWaits
from gpuplace.usecases.placement import PlacementService
from gpuplace.usecases.ports import NO_METRICS, ClusterApi, Metrics
from gpuplace.usecases.repositories import UnitOfWorkFactory
from gpuplace.usecases.scale_hints import HintSettings, ScaleHinter


@dataclass
class Resources:
    settings: Settings
    uow_factory: PostgresUnitOfWorkFactory
    broker: KafkaBroker
    cluster_apis: dict[str, KubeClusterApi] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def database(settings: Settings, *, check_schema: bool = True) -> AsyncIterator[PostgresUnitOfWorkFactory]:
    """The unit-of-work factory; refuses a schema behind the code's migrations (SchemaOutOfDate) and says which
    database it could not reach (dependencies.Unreachable)."""
    if check_schema:
        url = settings.database_url.get_secret_value()
        with dependencies.reaching(dependencies.postgres(url)):
            await migrate.require_current(url)
    engine = make_engine(settings.database_url.get_secret_value())
    try:
        yield PostgresUnitOfWorkFactory(engine)
    finally:
        await engine.dispose()


@contextlib.asynccontextmanager
async def cluster_api(kubeconfig: str) -> AsyncIterator[KubeClusterApi]:
    api_client = await connect(kubeconfig)
    try:
        yield KubeClusterApi(api_client)
    finally:
        await api_client.close()


@contextlib.asynccontextmanager
async def resources(settings: Settings, *, kubeconfigs: dict[str, str] | None = None,
                    client_id: str = "gpuplace") -> AsyncIterator[Resources]:
    """Everything a service needs, opened together and closed in reverse order."""
    async with contextlib.AsyncExitStack() as stack:
        uow_factory = await stack.enter_async_context(database(settings))
        broker = make_broker(settings.kafka, client_id=client_id)
        apis = {}
        for cluster, path in (kubeconfigs or {}).items():
            apis[cluster] = await stack.enter_async_context(cluster_api(path))
        yield Resources(settings=settings, uow_factory=uow_factory, broker=broker, cluster_apis=apis)


@dataclass(frozen=True)
class PlacementWorker:
    """A placement worker's handlers: the service (its entry points), and the defragmenter and scale hinter
    when enabled (None otherwise), wired on one message bus."""

    service: PlacementService
    defrag: Defragmenter | None
    hints: ScaleHinter | None


def placement_worker(uow_factory: UnitOfWorkFactory, cluster_apis: Mapping[str, ClusterApi], decide: Decider, *,
                     policy: str, topic_suffix: str = "",
                     outbox_written: Callable[[], None] = lambda: None, metrics: Metrics = NO_METRICS,
                     resync_s: float | None = None, bind_concurrency: int = BIND_CONCURRENCY,
                     defrag: DefragSettings | None = None, hints: HintSettings | None = None,
                     clock: Callable[[], float] = time.monotonic) -> PlacementWorker:
    """Build the clusters, the decision log, the defragmenter (with `defrag`) and the scale hinter (with `hints`)
    from the ports they need, and subscribe them: the defragmenter's handlers before placement's, so a loaded
    cluster's half-done plans are settled before its reserved pods are bound (usecases/messages.py).
    Plans and hints are computed with the decider's planner_policy."""
    bus, background = MessageBus(), Background()
    clusters = Clusters(uow_factory, bus)
    decisions = DecisionLog(policy, topic_suffix, outbox_written)
    planner = decide.planner_policy
    defragmenter = None
    if defrag is not None:
        defragmenter = Defragmenter(uow_factory, cluster_apis, clusters, decisions, bus, background, planner,
                                    settings=defrag, clock=clock, metrics=metrics)
        bus.subscribe(ClusterLoaded, defragmenter.on_cluster_loaded)
        bus.subscribe(PodWaits, defragmenter.on_pod_waits)
    hinter = None
    if hints is not None:
        hinter = ScaleHinter(uow_factory, clusters, planner, policy_name=policy, topic_suffix=topic_suffix,
                             settings=hints, metrics=metrics, outbox_written=outbox_written)
        bus.subscribe(PodWaits, hinter.on_pod_waits)
    service = PlacementService(uow_factory, cluster_apis, decide, policy=policy, bind_concurrency=bind_concurrency,
                               resync_s=resync_s, metrics=metrics, bus=bus, clusters=clusters, decisions=decisions,
                               background=background)
    return PlacementWorker(service, defragmenter, hinter)


__all__ = ["PlacementWorker", "Resources", "resources", "database", "cluster_api", "placement_worker"]
