"""What the outbox must do for its relay (OutboxStore, usecases/ports.py); subclassed once per implementation.

`TestFakeOutbox` (tests/unit) and `TestPostgresOutbox` (tests/integration) only say how to build a fresh store,
as for the unit-of-work contract. The relay publishes what take_unpublished returns and marks it published
only once Kafka acknowledged it (adapters/postgres/outbox_relay.py): these cases are what makes that
at-least-once, and never twice at once.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

from tests.contract.covers import covers

TOPIC = "gpuplace.placements.v1"


class OutboxContract:
    """Subclasses define `make_uow_factory()` (sync or async): a fresh, empty store's unit-of-work factory."""

    def make_uow_factory(self) -> Any:
        raise NotImplementedError

    async def _with_rows(self, n: int) -> Any:
        factory = self.make_uow_factory()
        uow_factory = await factory if inspect.isawaitable(factory) else factory
        async with uow_factory() as uow:
            for i in range(n):
                await uow.outbox.add_outbox(TOPIC, f"east/pod-{i % 2}", json.dumps({"n": i}))
            await uow.commit()
        return uow_factory

    @covers("outbox", "take_unpublished", "commit")
    async def test_committed_rows_are_taken_lowest_id_first_up_to_the_limit(self) -> None:
        uow_factory = await self._with_rows(3)
        async with uow_factory() as uow:
            first = await uow.outbox.take_unpublished(2)
            assert [(r["topic"], r["key"], r["payload"]) for r in first] == \
                [(TOPIC, "east/pod-0", {"n": 0}), (TOPIC, "east/pod-1", {"n": 1})]
            assert first[0]["id"] < first[1]["id"]
            every = await uow.outbox.take_unpublished(10)  # this unit of work's own locks do not hide rows from it
            assert [r["payload"]["n"] for r in every] == [0, 1, 2]

    @covers("mark_published", "commit")
    async def test_rows_marked_published_are_not_taken_again_and_rows_not_marked_are(self) -> None:
        uow_factory = await self._with_rows(3)
        async with uow_factory() as uow:
            rows = await uow.outbox.take_unpublished(10)
            await uow.outbox.mark_published([r["id"] for r in rows[:2]])
            await uow.commit()
        async with uow_factory() as uow:
            left = await uow.outbox.take_unpublished(10)
            assert [r["payload"]["n"] for r in left] == [2]
            await uow.outbox.mark_published([left[0]["id"]])  # a relay that dies before its commit:
        async with uow_factory() as uow:
            assert [r["payload"]["n"] for r in await uow.outbox.take_unpublished(10)] == [2]  # taken again

    @covers("take_unpublished")
    async def test_two_relays_at_once_never_take_the_same_row(self) -> None:
        uow_factory = await self._with_rows(4)

        async def relay() -> list[int]:
            async with uow_factory() as uow:
                ids = [r["id"] for r in await uow.outbox.take_unpublished(10)]
                await asyncio.sleep(0.05)  # publishing, while the other relay takes its batch
                await uow.outbox.mark_published(ids)
                await uow.commit()
                return ids

        first, second = await asyncio.gather(relay(), relay())
        assert not set(first) & set(second)
        assert len(first) + len(second) == 4
        async with uow_factory() as uow:
            assert await uow.outbox.take_unpublished(10) == []

    @covers("count_unpublished")
    async def test_the_backlog_counts_committed_rows_not_yet_published(self) -> None:
        uow_factory = await self._with_rows(3)
        async with uow_factory() as uow:
            assert await uow.outbox.count_unpublished() == 3
            rows = await uow.outbox.take_unpublished(2)
            await uow.outbox.mark_published([r["id"] for r in rows])
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.outbox.count_unpublished() == 1
            await uow.outbox.add_outbox(TOPIC, "east/pod-9", json.dumps({"n": 9}))  # never committed
        async with uow_factory() as uow:
            assert await uow.outbox.count_unpublished() == 1
