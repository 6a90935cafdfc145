"""PostgreSQL's pruning passes the shared contract (tests/contract/retention_contract.py), on a fresh schema each,
and keeps out of placement's way: one pruner at a time, and never waiting on a row a placement holds."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select

from gpuplace.adapters.postgres.tables import latency_windows
from gpuplace.adapters.postgres.unit_of_work import PostgresUnitOfWorkFactory
from gpuplace.usecases.ports import Retained
from gpuplace.usecases.repositories import UnitOfWorkFactory
from tests.contract.retention_contract import RetentionContract
from tests.contract.store_contract import decision_row
from tests.integration.test_postgres_unit_of_work import OnFreshSchemas

pytestmark = pytest.mark.integration


class TestPostgresRetention(OnFreshSchemas, RetentionContract):
    async def make_uow_factory(self) -> UnitOfWorkFactory:
        return PostgresUnitOfWorkFactory(await self.schemas.engine())  # typed: the adapter satisfies the port

    async def latency_window_pods(self, uow_factory: PostgresUnitOfWorkFactory) -> list[str]:
        async with uow_factory.engine.connect() as conn:
            return sorted((await conn.execute(select(latency_windows.c.pod))).scalars())

    async def test_a_second_pruner_does_not_get_the_turn_while_the_first_holds_it(self) -> None:
        uow_factory = PostgresUnitOfWorkFactory(await self.schemas.engine())
        async with uow_factory() as first, uow_factory() as second:
            assert await first.retention.take_pruning_turn() is True
            assert await second.retention.take_pruning_turn() is False  # answered at once: it does not wait

    async def test_a_row_a_placement_holds_is_skipped_not_waited_for(self) -> None:
        uow_factory = PostgresUnitOfWorkFactory(await self.schemas.engine())
        async with uow_factory() as uow:
            await uow.decisions.add_decisions([decision_row("held", "a", "decided"),
                                               decision_row("free", "b", "decided")])
            await uow.commit()
        async with uow_factory() as placement:
            await placement.events.claim_event("placement", "x")  # any open transaction; then a lock on one row:
            await placement.decisions.decisions_of("contract", "a")
            conn = placement.pods._conn  # noqa: SLF001 - the test takes a row lock no port method takes
            await conn.exec_driver_sql("SELECT 1 FROM decisions WHERE id = 'held' FOR UPDATE")
            async with asyncio.timeout(5), uow_factory() as pruner:
                assert await pruner.retention.prune(Retained.DECISIONS, 0, 10) == 1  # `free` only, at once
                await pruner.commit()
