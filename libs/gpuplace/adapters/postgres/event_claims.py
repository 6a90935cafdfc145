"""Which events each consumer processed (processed_events): a redelivery is claimed once.

Every method runs inside the caller's transaction (unit_of_work.py); the port is usecases.repositories.EventClaims.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert

from gpuplace.adapters.postgres.repository import PostgresRepository
from gpuplace.adapters.postgres.tables import processed_events
from gpuplace.contracts.rejected import Rejected, reused_id


class EventClaimRepository(PostgresRepository):
    """usecases.repositories.EventClaims on the unit of work's connection."""

    async def claim_event(self, consumer: str, event_id: str, digest: str | None = None) -> bool:
        """Record `event_id` as processed by `consumer`; False if it already was (skip the event). Raises
        Rejected when it was, with another content `digest` (Envelope.digest): not a redelivery but a reused id."""
        stmt = insert(processed_events).values(consumer=consumer, event_id=event_id, digest=digest)
        result = await self._conn.execute(stmt.on_conflict_do_nothing().returning(processed_events.c.event_id))
        if result.first() is not None:
            return True
        if digest is not None:
            stored = (await self._conn.execute(select(processed_events.c.digest).where(
                processed_events.c.consumer == consumer, processed_events.c.event_id == event_id))).scalar()
            if stored is not None and stored != digest:
                raise Rejected(reused_id(event_id, stored, digest))
        return False

    async def claim_events(self, consumer: str, claims: Sequence[tuple[str, str | None]]) -> set[str]:
        if not claims:
            return set()
        claimed = set((await self._conn.execute(
            insert(processed_events).on_conflict_do_nothing().returning(processed_events.c.event_id),
            [{"consumer": consumer, "event_id": event_id, "digest": digest} for event_id, digest in claims],
        )).scalars())
        digests = {event_id: digest for event_id, digest in claims if event_id not in claimed and digest is not None}
        if digests:
            stored = await self._conn.execute(select(processed_events.c.event_id, processed_events.c.digest).where(
                processed_events.c.consumer == consumer, processed_events.c.event_id.in_(digests)))
            for event_id, digest in stored:
                if digest is not None and digest != digests[event_id]:
                    raise Rejected(reused_id(event_id, digest, digests[event_id]))
        return claimed


__all__ = ["EventClaimRepository"]
