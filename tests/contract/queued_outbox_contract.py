"""The contract slice of repositories.Outbox: what its fake (tests/fakes.py) and its PostgreSQL adapter
must both do; store_contract.py says how the slices run and what they share."""

from __future__ import annotations

import json

from tests.contract.covers import covers
from tests.contract.store_contract import StoreContract


class QueuedOutboxContract(StoreContract):
    @covers("add_outbox")
    async def test_an_event_queued_in_the_outbox_is_there_only_once_committed(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.outbox.add_outbox("gpuplace.placements.v1", "east/a", json.dumps({"kind": "decided"}))
        async with uow_factory() as uow:
            assert await uow.outbox.take_unpublished(10) == []  # rolled back: never relayed
            await uow.outbox.add_outbox("gpuplace.placements.v1", "east/a", json.dumps({"kind": "bound"}))
            await uow.commit()
        async with uow_factory() as uow:
            rows = await uow.outbox.take_unpublished(10)
            assert [(r["topic"], r["key"], r["payload"]) for r in rows] == \
                [("gpuplace.placements.v1", "east/a", {"kind": "bound"})]

