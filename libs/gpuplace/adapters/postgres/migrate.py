"""Run the schema migrations programmatically (what `gpuplace migrate` and the test fixtures call)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

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


__all__ = ["alembic_config", "upgrade", "downgrade"]
