"""The contract slice of repositories.UnitOfWork: what its fake (tests/fakes.py) and its PostgreSQL adapter
must both do; store_contract.py says how the slices run and what they share."""

from __future__ import annotations

import json

from gpuplace.usecases.ports import AllocationRow, DecisionRow, GpuGrant, GpuRow, NodeRow, PodRow, Retained
from tests.contract.covers import covers
from tests.contract.store_contract import CLUSTER, StoreContract, decision_row, node_row, plan_record, pod_row


class UnitOfWorkContract(StoreContract):
    @covers("events", "nodes", "pods", "allocations", "decisions", "plans", "outbox", "latency", "commit")
    async def test_every_repository_writes_in_the_one_transaction(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:  # a write through each repository, not committed
            assert await uow.events.claim_event("placement", "e1")
            await uow.nodes.upsert_node(node_row())
            await uow.pods.upsert_pod(pod_row("a"))
            assert await uow.allocations.reserve(cluster=CLUSTER, pod_uid="a", node="n1",
                                                 grants=[GpuGrant(0, 9420, 575)], cpu_milli=1000, memory_mib=1024,
                                                 decision_id="d1") is None
            await uow.decisions.add_decisions([decision_row("d1", "a", "decided")])
            await uow.plans.add_plan(plan_record("p1", "a"))
            await uow.outbox.add_outbox("gpuplace.placements.v1", "contract/pod-a", json.dumps({"n": 1}))
            await uow.latency.save_latency_model("model", {"windows": 1})
        async with uow_factory() as uow:  # all of it undone together: one transaction, not one per repository
            assert await uow.events.claim_event("placement", "e1")
            assert await uow.nodes.load_nodes(CLUSTER) == []
            assert await uow.pods.get_pod(CLUSTER, "a") is None
            assert await uow.allocations.load_allocations(CLUSTER) == []
            assert await uow.decisions.decisions_of(CLUSTER, "a") == []
            assert await uow.plans.plan_state(CLUSTER, "p1") is None
            assert await uow.outbox.count_unpublished() == 0
            assert await uow.latency.load_latency_model("model") is None

    @covers("commit", "reserve", "load_allocations", "load_gpus")
    async def test_without_commit_nothing_is_kept(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.events.claim_event("placement", "e2")
            await uow.allocations.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(0, 9420, 575)],
                                          cpu_milli=1000, memory_mib=1024, decision_id="d1")
        async with uow_factory() as uow:
            assert await uow.events.claim_event("placement", "e2")
            assert await uow.allocations.load_allocations(CLUSTER) == []
            assert [g["memory_assigned_mib"] for g in await uow.nodes.load_gpus(CLUSTER)] == [0, 0]

    @covers("retention")
    async def test_pruning_is_part_of_the_transaction_and_undone_without_commit(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.decisions.add_decisions([decision_row("d1", "a", "decided")])
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.retention.prune(Retained.DECISIONS, 0, 10) == 1
            assert await uow.decisions.decisions_of(CLUSTER, "a") == []  # its own transaction sees the rows gone
        async with uow_factory() as uow:  # not committed: still there
            assert [d["id"] for d in await uow.decisions.decisions_of(CLUSTER, "a")] == ["d1"]

    @covers("load_nodes", "load_gpus", "load_allocations", "get_pod", "decisions_of")
    async def test_rows_carry_exactly_the_columns_their_port_types_name(self) -> None:
        """ports.py types the rows (NodeRow, ...) beside tables.py's columns: a column added to one only fails here."""
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.allocations.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(0, 100, 10)],
                                                 cpu_milli=0, memory_mib=0, decision_id="d-a") is None
            await uow.decisions.add_decisions([decision_row("d1", "a", "decided")])
            await uow.commit()
        async with uow_factory() as uow:
            rows = {NodeRow: (await uow.nodes.load_nodes(CLUSTER))[0], GpuRow: (await uow.nodes.load_gpus(CLUSTER))[0],
                    AllocationRow: (await uow.allocations.load_allocations(CLUSTER))[0],
                    PodRow: await uow.pods.get_pod(CLUSTER, "a"),
                    DecisionRow: (await uow.decisions.decisions_of(CLUSTER, "a"))[0]}
        for row_type, row in rows.items():
            assert row is not None
            columns = set(row_type.__annotations__)
            assert set(row) == columns, (row_type.__name__, set(row) ^ columns)

