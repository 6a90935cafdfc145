"""The contract slice of repositories.Decisions: what its fake (tests/fakes.py) and its PostgreSQL adapter
must both do; store_contract.py says how the slices run and what they share."""

from __future__ import annotations

from tests.contract.covers import covers
from tests.contract.store_contract import CLUSTER, StoreContract, decision_row


class DecisionsContract(StoreContract):
    @covers("decisions_of", "decisions_with_reason")
    async def test_a_pods_decisions_oldest_first_and_decisions_found_by_a_reason(self) -> None:
        uow_factory = await self._seeded()
        for i, (uid, kind, reasons) in enumerate([
                ("a", "unschedulable", {"V100": "2 node(s): full (GpuFit)"}), ("b", "decided", {"score": "90"}),
                ("a", "decided", {"defrag": "place promised as promise-p1-0"}), ("a", "bound", {}),
                ("b", "decided", {"defrag": "place promised as promise-p1-0x"})]):
            async with uow_factory() as uow:  # one transaction each, as their writers do
                await uow.decisions.add_decisions([decision_row(f"d{i}", uid, kind, reasons)])
                await uow.commit()
        async with uow_factory() as uow:
            history = await uow.decisions.decisions_of(CLUSTER, "a")
            assert [(d["id"], d["kind"]) for d in history] == [("d0", "unschedulable"), ("d2", "decided"),
                                                               ("d3", "bound")]
            assert history[0]["reasons"] == {"V100": "2 node(s): full (GpuFit)"}
            assert history[0]["created_at"] < history[1]["created_at"] < history[2]["created_at"]
            assert await uow.decisions.decisions_of(CLUSTER, "c") == []
            adopted = await uow.decisions.decisions_with_reason(CLUSTER, "decided", "defrag",
                                                                "place promised as promise-p1-0")
            assert [(d["id"], d["pod_uid"]) for d in adopted] == [("d2", "a")]
            assert await uow.decisions.decisions_with_reason(CLUSTER, "bound", "defrag",
                                                             "place promised as promise-p1-0") == []
            assert await uow.decisions.decisions_with_reason("elsewhere", "decided", "score", "90") == []

    @covers("count_bound_twice")
    async def test_pods_bound_twice_are_counted(self) -> None:
        uow_factory = await self._seeded()
        for i, (uid, kind) in enumerate([("a", "bound"), ("a", "bound"), ("b", "decided"), ("b", "bound")]):
            async with uow_factory() as uow:
                await uow.decisions.add_decisions([decision_row(f"d{i}", uid, kind)])
                await uow.commit()
        async with uow_factory() as uow:
            assert await uow.decisions.count_bound_twice(CLUSTER) == 1
            assert await uow.decisions.count_bound_twice("elsewhere") == 0

