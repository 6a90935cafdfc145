"""PostgreSQL's unit of work and its repositories pass the shared contract slices, each test on its own freshly
migrated schema."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gpuplace.adapters.postgres import migrate
from gpuplace.adapters.postgres.tables import latency_windows
from gpuplace.adapters.postgres.unit_of_work import PostgresUnitOfWorkFactory
from gpuplace.usecases.repositories import UnitOfWorkFactory
from tests.contract.allocations_contract import AllocationsContract
from tests.contract.decisions_contract import DecisionsContract
from tests.contract.event_claims_contract import EventClaimsContract
from tests.contract.latency_contract import LatencyContract
from tests.contract.nodes_contract import NodesContract
from tests.contract.plans_contract import PlansContract
from tests.contract.pods_contract import PodsContract
from tests.contract.queued_outbox_contract import QueuedOutboxContract
from tests.contract.unit_of_work_contract import UnitOfWorkContract

pytestmark = pytest.mark.integration


class Schemas:
    """Fresh schemas, each migrated to head with an engine of its own; dropped, with all in them, by close()."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._made: list[tuple[AsyncEngine, str]] = []

    async def engine(self) -> AsyncEngine:
        schema = f"contract_{uuid.uuid4().hex[:10]}"
        await migrate.upgrade_async(self.database_url, schema=schema)
        engine = create_async_engine(self.database_url, connect_args={"server_settings": {"search_path": schema}})
        self._made.append((engine, schema))
        return engine

    async def close(self) -> None:
        for engine, schema in self._made:
            async with engine.begin() as conn:
                await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            await engine.dispose()


class OnFreshSchemas:
    """For a contract suite on PostgreSQL: `self.schemas` makes each test's schemas, dropped when it ends."""

    schemas: Schemas

    @pytest.fixture(autouse=True)
    async def _database(self, database_url: str):
        self.schemas = Schemas(database_url)
        yield
        await self.schemas.close()


class OnPostgres(OnFreshSchemas):
    """How a slice gets a fresh PostgreSQL store (StoreContract): a schema of its own, migrated to head."""

    async def make_uow_factory(self) -> UnitOfWorkFactory:
        return PostgresUnitOfWorkFactory(await self.schemas.engine())  # typed: the adapter satisfies the port

    async def latency_windows(self, uow_factory: PostgresUnitOfWorkFactory) -> list[Any]:
        async with uow_factory.engine.connect() as conn:
            result = await conn.execute(select(latency_windows).order_by(latency_windows.c.id))
            return [row._mapping for row in result]


class TestPostgresUnitOfWork(OnPostgres, UnitOfWorkContract):
    pass


class TestPostgresEventClaims(OnPostgres, EventClaimsContract):
    pass


class TestPostgresNodes(OnPostgres, NodesContract):
    pass


class TestPostgresPods(OnPostgres, PodsContract):
    pass


class TestPostgresAllocations(OnPostgres, AllocationsContract):
    pass


class TestPostgresDecisions(OnPostgres, DecisionsContract):
    pass


class TestPostgresPlans(OnPostgres, PlansContract):
    pass


class TestPostgresQueuedOutbox(OnPostgres, QueuedOutboxContract):
    pass


class TestPostgresLatency(OnPostgres, LatencyContract):
    pass
