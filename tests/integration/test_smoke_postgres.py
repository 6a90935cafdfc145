"""PostgreSQL smoke tests: asyncpg and SQLAlchemy's async engine round trips, and the Alembic migrations
upgraded to head and downgraded to base on a database created for the test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from gpuplace.adapters.postgres import migrate

from .conftest import asyncpg_dsn, unique_name

pytestmark = pytest.mark.integration

# Tables DESIGN §5 names; the migrations may hold more.
STATE_TABLES = {"nodes", "gpus", "pods", "allocations", "decisions", "outbox", "processed_events"}


async def _tables(dsn: str) -> set[str]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {row["tablename"] for row in rows}
    finally:
        await connection.close()


@pytest.fixture
async def fresh_database(database_url: str) -> AsyncIterator[str]:
    """A new, empty database owned by the stack's role; dropped after the test."""
    name = unique_name("it").replace("-", "_")
    admin = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield make_url(database_url).set(database=name).render_as_string(hide_password=False)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def test_asyncpg_round_trip(database_url: str) -> None:
    connection = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        assert await connection.fetchval("SELECT $1::int + 1", 41) == 42
        assert int(await connection.fetchval("SHOW server_version_num")) >= 140000
    finally:
        await connection.close()


async def test_sqlalchemy_async_round_trip(database_url: str) -> None:
    engine = create_async_engine(database_url)
    try:
        async with engine.begin() as connection:
            await connection.execute(text("CREATE TEMPORARY TABLE smoke (id int PRIMARY KEY, memory_mib int)"))
            await connection.execute(text("INSERT INTO smoke VALUES (1, 9420), (2, 6860)"))
            total = await connection.scalar(text("SELECT sum(memory_mib) FROM smoke"))
        assert total == 9420 + 6860
    finally:
        await engine.dispose()


async def test_migrations_upgrade_to_head_and_downgrade_to_base(fresh_database: str) -> None:
    dsn = asyncpg_dsn(fresh_database)
    # Alembic's env.py runs its own event loop (asyncio.run), so it runs in a worker thread here.
    await asyncio.to_thread(migrate.upgrade, fresh_database, "head")
    after_upgrade = await _tables(dsn)
    assert STATE_TABLES <= after_upgrade, f"missing after upgrade: {STATE_TABLES - after_upgrade}"

    await asyncio.to_thread(migrate.downgrade, fresh_database, "base")
    assert await _tables(dsn) <= {"alembic_version"}

    # And back up: the downgrade left nothing that blocks a second upgrade.
    await asyncio.to_thread(migrate.upgrade, fresh_database, "head")
    assert STATE_TABLES <= await _tables(dsn)
