"""PostgreSQL's outbox passes the shared contract (tests/contract/outbox_contract.py), on a fresh schema each."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuplace.adapters.postgres.unit_of_work import PostgresUnitOfWorkFactory
from gpuplace.usecases.ports import OutboxUnitOfWork
from tests.contract.outbox_contract import OutboxContract
from tests.integration.test_postgres_unit_of_work import OnFreshSchemas

pytestmark = pytest.mark.integration


class TestPostgresOutbox(OnFreshSchemas, OutboxContract):
    async def make_uow_factory(self) -> Callable[[], OutboxUnitOfWork]:
        return PostgresUnitOfWorkFactory(await self.schemas.engine())  # typed: the adapter satisfies the port
