"""The contract slice of repositories.Plans: what its fake (tests/fakes.py) and its PostgreSQL adapter
must both do; store_contract.py says how the slices run and what they share."""

from __future__ import annotations

import asyncio

from gpuplace.usecases.ports import PlanState
from tests.contract.covers import covers
from tests.contract.store_contract import CLUSTER, StoreContract, plan_record


class PlansContract(StoreContract):
    @covers("add_plan", "open_plans", "plan_state", "plan_moving")
    async def test_plans_are_kept_with_their_moves_in_order(self) -> None:
        uow_factory = await self._fresh()
        first, second = plan_record("p1", "b1", "v1", "v2"), plan_record("p2", "b2", "v3", "v1")
        for plan in (first, second):
            async with uow_factory() as uow:  # one transaction each, as the defragmenter plans them
                await uow.plans.add_plan(plan)
                await uow.commit()
        async with uow_factory() as uow:
            assert await uow.plans.open_plans(CLUSTER) == [first, second]
            assert await uow.plans.open_plans("elsewhere") == []
            assert await uow.plans.plan_state(CLUSTER, "p1") is PlanState.PLANNED
            assert await uow.plans.plan_state(CLUSTER, "p9") is None
            assert await uow.plans.plan_moving(CLUSTER, "v1") == second  # moved again: the later plan
            assert await uow.plans.plan_moving(CLUSTER, "v2") == first
            assert await uow.plans.plan_moving(CLUSTER, "b1") is None  # a beneficiary is not moved

    @covers("settle_plan")
    async def test_a_plan_is_settled_once(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.plans.add_plan(plan_record("p1", "b1", "v1"))
            await uow.plans.add_plan(plan_record("p2", "b2", "v2"))
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.plans.settle_plan(CLUSTER, "p1", PlanState.ABORTED, "refused")
            assert not await uow.plans.settle_plan(CLUSTER, "p1", PlanState.COMPLETED)
            assert not await uow.plans.settle_plan(CLUSTER, "p9", PlanState.COMPLETED)
            await uow.commit()
        async with uow_factory() as uow:
            assert [p.plan_id for p in await uow.plans.open_plans(CLUSTER)] == ["p2"]
            settled = await uow.plans.plan_moving(CLUSTER, "v1")
            assert settled is not None and (settled.state, settled.reason) == (PlanState.ABORTED, "refused")

        async def settle(state: PlanState) -> bool:
            async with uow_factory() as uow:
                won = await uow.plans.settle_plan(CLUSTER, "p2", state)
                await asyncio.sleep(0.05)  # hold the transaction open while the other one tries
                await uow.commit()
                return won

        assert sorted(await asyncio.gather(settle(PlanState.COMPLETED), settle(PlanState.ABORTED))) == [False, True]

