"""Run the schema migrations programmatically (what `gpuplace migrate` and the test fixtures call)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import pool
from sqlalchemy.ext.asyncio import create_async_engine

_INI = Path(__file__).with_name("alembic.ini")


def alembic_config(database_url: str, *, schema: str | None = None) -> Config:
    config = Config(str(_INI))
    config.attributes["database_url"] = database_url
    if schema:
        config.attributes["schema"] = schema
    return config


def upgrade(database_url: str, revision: str = "head", *, schema: str | None = None) -> None:
    command.upgrade(alembic_config(database_url, schema=schema), revision)


def downgrade(database_url: str, revision: str = "base", *, schema: str | None = None) -> None:
    command.downgrade(alembic_config(database_url, schema=schema), revision)


async def upgrade_async(database_url: str, revision: str = "head", *, schema: str | None = None) -> None:
    """`upgrade` from inside a running event loop (services, the demo, async tests)."""
    engine = create_async_engine(database_url, poolclass=pool.NullPool)
    try:
        async with engine.begin() as connection:
            def _upgrade(sync_connection: object) -> None:
                config = alembic_config(database_url, schema=schema)
                config.attributes["connection"] = sync_connection
                command.upgrade(config, revision)

            await connection.run_sync(_upgrade)
    finally:
        await engine.dispose()


class SchemaOutOfDate(RuntimeError):
    """The database is not at the revision this code was written for."""


async def require_current(database_url: str) -> None:
    """Refuse to run services on a schema that `gpuplace migrate` has not brought to head."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()
    engine = create_async_engine(database_url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            current = await connection.run_sync(
                lambda sync: MigrationContext.configure(sync).get_current_revision())
    finally:
        await engine.dispose()
    if current != head:
        raise SchemaOutOfDate(f"database schema is at {current or 'nothing'}, this gpuplace needs {head}: "
                              "run `gpuplace migrate`")


__all__ = ["alembic_config", "upgrade", "downgrade", "upgrade_async", "require_current", "SchemaOutOfDate"]
