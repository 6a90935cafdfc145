"""One PostgreSQL transaction as a unit of work: it rolls back unless `commit()` is called.

Usage (Architecture Patterns with Python, ch. 6):

    async with uow_factory() as uow:
        if not await uow.events.claim_event("placement", event.event_id):
            return                      # already processed: idempotent by event_id
        ...                             # repository calls, all in this transaction
        await uow.commit()
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncTransaction, create_async_engine

from gpuplace.adapters.postgres.allocations import AllocationRepository
from gpuplace.adapters.postgres.decisions import DecisionRepository
from gpuplace.adapters.postgres.event_claims import EventClaimRepository
from gpuplace.adapters.postgres.latency import LatencyRepository
from gpuplace.adapters.postgres.nodes import NodeRepository
from gpuplace.adapters.postgres.outbox import OutboxRepository
from gpuplace.adapters.postgres.plans import PlanRepository
from gpuplace.adapters.postgres.pods import PodRepository
from gpuplace.adapters.postgres.retention_repository import RetentionRepository


def make_engine(database_url: str, *, pool_size: int = 5) -> AsyncEngine:
    """The process's one engine; built by the composition root, disposed at shutdown."""
    return create_async_engine(database_url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)


class PostgresUnitOfWork:
    """The UnitOfWork port (and the relay's OutboxUnitOfWork) on one PostgreSQL transaction; tests/contract
    checks it against the same cases as the fake."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._conn: AsyncConnection | None = None
        self._tx: AsyncTransaction | None = None
        self.events: EventClaimRepository
        self.nodes: NodeRepository
        self.pods: PodRepository
        self.allocations: AllocationRepository
        self.decisions: DecisionRepository
        self.plans: PlanRepository
        self.outbox: OutboxRepository
        self.latency: LatencyRepository
        self.retention: RetentionRepository

    async def __aenter__(self) -> PostgresUnitOfWork:
        self._conn = await self._engine.connect()
        self._tx = await self._conn.begin()
        self._open_repositories(self._conn)
        return self

    def _open_repositories(self, conn: AsyncConnection) -> None:
        """One repository per aggregate, all on this transaction's connection (none opens its own)."""
        self.events = EventClaimRepository(conn)
        self.nodes = NodeRepository(conn)
        self.pods = PodRepository(conn)
        self.allocations = AllocationRepository(conn)
        self.decisions = DecisionRepository(conn)
        self.plans = PlanRepository(conn)
        self.outbox = OutboxRepository(conn)
        self.latency = LatencyRepository(conn)
        self.retention = RetentionRepository(conn)

    async def commit(self) -> None:
        assert self._tx is not None, "commit() outside `async with`"
        await self._tx.commit()

    async def rollback(self) -> None:
        if self._tx is not None and self._tx.is_active:
            await self._tx.rollback()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        try:
            await self.rollback()
        finally:
            if self._conn is not None:
                await self._conn.close()
            self._conn = self._tx = None


class PostgresUnitOfWorkFactory:
    """Callable that opens a fresh unit of work on a shared engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    def __call__(self) -> PostgresUnitOfWork:
        return PostgresUnitOfWork(self.engine)

    async def check(self, timeout_s: float = 2.0) -> None:
        """Raise unless PostgreSQL answers `SELECT 1` within `timeout_s` (a readiness check: the pool's pre-ping
        replaces a connection the server dropped, so a failure means no new one could be opened either)."""
        async with asyncio.timeout(timeout_s), self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))


__all__ = ["PostgresUnitOfWork", "PostgresUnitOfWorkFactory", "make_engine"]
