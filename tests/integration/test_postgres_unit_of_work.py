"""PostgreSQL's unit of work passes the shared contract, each test on its own freshly migrated schema."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from gpuplace.adapters.postgres import migrate
from gpuplace.adapters.postgres.unit_of_work import PostgresUnitOfWorkFactory
from tests.contract.unit_of_work_contract import UnitOfWorkContract

pytestmark = pytest.mark.integration


class TestPostgresUnitOfWork(UnitOfWorkContract):
    @pytest.fixture(autouse=True)
    async def _database(self, database_url: str):
        self.database_url = database_url
        self.engines = []
        yield
        for engine in self.engines:
            await engine.dispose()

    async def make_uow_factory(self) -> PostgresUnitOfWorkFactory:
        schema = f"contract_{uuid.uuid4().hex[:10]}"
        await migrate.upgrade_async(self.database_url, schema=schema)
        engine = create_async_engine(self.database_url, connect_args={"server_settings": {"search_path": schema}})
        self.engines.append(engine)
        return PostgresUnitOfWorkFactory(engine)
