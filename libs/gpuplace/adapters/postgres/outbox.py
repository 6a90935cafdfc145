"""The outbox: events queued in a unit of work (add_outbox) and read back by the relay (OutboxStore).

Every method runs inside the caller's transaction (unit_of_work.py); the port is usecases.repositories.Outbox.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert

from gpuplace.adapters.postgres.repository import PostgresRepository, as_rows
from gpuplace.adapters.postgres.tables import outbox
from gpuplace.usecases.ports import Row


class OutboxRepository(PostgresRepository):
    """usecases.repositories.Outbox on the unit of work's connection."""

    async def add_outbox(self, topic: str, key: str, payload_json: str) -> None:
        await self._conn.execute(insert(outbox).values(topic=topic, key=key, payload=json.loads(payload_json)))

    async def add_outbox_many(self, entries: Sequence[tuple[str, str, str]]) -> None:
        if entries:
            await self._conn.execute(insert(outbox), [
                {"topic": topic, "key": key, "payload": json.loads(payload)} for topic, key, payload in entries])

    async def take_unpublished(self, limit: int) -> list[Row]:
        """Lock a batch of unpublished outbox rows; other relays skip them (SKIP LOCKED)."""
        result = await self._conn.execute(select(outbox).where(outbox.c.published_at.is_(None))
                                          .order_by(outbox.c.id).limit(limit).with_for_update(skip_locked=True))
        return as_rows(result)

    async def mark_published(self, ids: Sequence[int]) -> None:
        await self._conn.execute(update(outbox).where(outbox.c.id.in_(ids)).values(published_at=func.now()))

    async def count_unpublished(self) -> int:
        """Served by the partial index `outbox_unpublished`: as cheap as the backlog is short."""
        query = select(func.count()).select_from(outbox).where(outbox.c.published_at.is_(None))
        return int((await self._conn.execute(query)).scalar_one())


__all__ = ["OutboxRepository"]
