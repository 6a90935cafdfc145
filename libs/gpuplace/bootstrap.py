"""Composition root: settings -> engine, unit-of-work factory, broker, cluster API clients.

Services, the CLI and the integration tests all build their dependencies here, so there is one place
where a client is created and one place where it is closed. Nothing is created at import time.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from faststream.kafka import KafkaBroker

from gpuplace.adapters import dependencies
from gpuplace.adapters.kafka import make_broker
from gpuplace.adapters.kube.cluster_api import KubeClusterApi, connect
from gpuplace.adapters.postgres import migrate
from gpuplace.adapters.postgres.unit_of_work import PostgresUnitOfWorkFactory, make_engine
from gpuplace.settings import Settings


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


__all__ = ["Resources", "resources", "database", "cluster_api"]
