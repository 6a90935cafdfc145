"""Alembic environment: async (asyncpg), URL from GPUPLACE_DATABASE_URL or the caller's config.

Run through `gpuplace migrate` (or `alembic -c libs/gpuplace/adapters/postgres/alembic.ini upgrade head`).
An optional `version_table_schema`/`schema` attribute on the config lets tests migrate an isolated schema.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import pool, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from gpuplace.adapters.postgres.tables import metadata

config = context.config
target_metadata = metadata


def _url() -> str:
    url = config.attributes.get("database_url") or os.environ.get("GPUPLACE_DATABASE_URL")
    if not url:
        raise RuntimeError("set GPUPLACE_DATABASE_URL (postgresql+asyncpg://...) to run migrations")
    return url


def _run(connection: Connection) -> None:
    schema = config.attributes.get("schema")
    if schema:
        connection.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
        connection.execute(text(f'SET search_path TO "{schema}"'))
        if config.attributes.get("connection") is None:
            connection.commit()  # a connection the caller lent us stays in the caller's transaction
    context.configure(connection=connection, target_metadata=target_metadata, version_table_schema=schema)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_async_engine(_url(), poolclass=pool.NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    existing = config.attributes.get("connection")
    if existing is not None:
        _run(existing)
    else:
        asyncio.run(_run_async())
