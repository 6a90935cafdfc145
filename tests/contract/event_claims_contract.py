"""The contract slice of repositories.EventClaims: what its fake (tests/fakes.py) and its PostgreSQL adapter
must both do; store_contract.py says how the slices run and what they share."""

from __future__ import annotations

import pytest

from gpuplace.contracts.rejected import Rejected
from tests.contract.covers import covers
from tests.contract.store_contract import StoreContract


class EventClaimsContract(StoreContract):
    @covers("claim_event", "commit")
    async def test_an_event_is_claimed_once(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            assert await uow.events.claim_event("placement", "e1")
            assert not await uow.events.claim_event("placement", "e1")
            assert await uow.events.claim_event("ingest", "e1")  # per consumer
            await uow.commit()

    @covers("claim_event")
    async def test_an_event_id_reused_for_other_content_is_refused(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            assert await uow.events.claim_event("placement", "e3", "digest-a")
            await uow.commit()
        async with uow_factory() as uow:
            assert not await uow.events.claim_event("placement", "e3", "digest-a")  # a redelivery: skipped
            assert not await uow.events.claim_event("placement", "e3")  # no digest to compare: skipped
            with pytest.raises(Rejected, match="reused id"):
                await uow.events.claim_event("placement", "e3", "digest-b")

    @covers("claim_events")
    async def test_events_are_claimed_in_a_batch_once_and_a_reused_id_is_refused(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            assert await uow.events.claim_events("placement", [("b1", "x"), ("b2", None)]) == {"b1", "b2"}
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.events.claim_events("placement", [("b1", "x"), ("b3", "y")]) == {"b3"}
            assert await uow.events.claim_events("ingest", [("b1", "x")]) == {"b1"}  # per consumer
        async with uow_factory() as uow:
            with pytest.raises(Rejected, match="reused id"):
                await uow.events.claim_events("placement", [("b4", None), ("b1", "other content")])

