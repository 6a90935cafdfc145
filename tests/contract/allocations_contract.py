"""The contract slice of repositories.Allocations: what its fake (tests/fakes.py) and its PostgreSQL adapter
must both do; store_contract.py says how the slices run and what they share."""

from __future__ import annotations

import asyncio
import json

from gpuplace.usecases.ports import GpuGrant, Reservation
from tests.contract.covers import covers
from tests.contract.store_contract import CLUSTER, StoreContract, decision_row, node_row, pod_row


class AllocationsContract(StoreContract):
    @covers("upsert_pods", "reserve_many", "mark_bound", "add_decisions", "add_outbox_many")
    async def test_a_batch_of_pods_is_recorded_reserved_and_bound_together(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.nodes.upsert_node(node_row())
            rows = await uow.pods.upsert_pods([pod_row("a"), pod_row("b"), pod_row("c")])
            assert [r["uid"] for r in rows] == ["a", "b", "c"] and {r["state"] for r in rows} == {"pending"}
            refused = await uow.allocations.reserve_many(CLUSTER, [
                Reservation("a", "n1", (GpuGrant(0, 9420, 575),), 1000, 1024, "da"),
                Reservation("b", "n1", (GpuGrant(1, 9420, 575),), 1000, 1024, "db"),
                Reservation("c", "n1", (GpuGrant(1, 6000, 366),), 1000, 1024, "dc")])
            assert refused is None
            await uow.decisions.add_decisions([decision_row("d1", "a", "decided"), decision_row("d2", "b", "decided")])
            await uow.outbox.add_outbox_many([("t", "east/a", json.dumps({"n": 1})),
                                             ("t", "east/b", json.dumps({"n": 2}))])
            await uow.commit()
        async with uow_factory() as uow:
            assert {(g["index"], g["memory_assigned_mib"], g["share_assigned_milli"])
                    for g in await uow.nodes.load_gpus(CLUSTER)} == {(0, 9420, 575), (1, 15420, 941)}
            assert (await uow.nodes.load_nodes(CLUSTER))[0]["cpu_assigned_milli"] == 3000
            assert {(p["uid"], p["state"], p["node"]) for p in await uow.pods.pods_in_state(CLUSTER, ("reserved",))} \
                == {("a", "reserved", "n1"), ("b", "reserved", "n1"), ("c", "reserved", "n1")}
            assert len(await uow.allocations.load_allocations(CLUSTER)) == 3
            assert [d["id"] for d in await uow.decisions.decisions_of(CLUSTER, "a")] == ["d1"]
            assert [r["payload"] for r in await uow.outbox.take_unpublished(10)] == [{"n": 1}, {"n": 2}]
            assert sorted(await uow.pods.mark_bound(CLUSTER, ["a", "b", "zz"])) == ["a", "b"]
            assert await uow.pods.mark_bound(CLUSTER, ["a"]) == []  # bound already: not moved twice
            await uow.commit()

    @covers("reserve_many")
    async def test_a_batch_that_would_overcommit_a_gpu_is_refused_whole(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            # 9420 + 9420 MiB on GPU 0 > 16384 MiB: each pod alone fits, the two together do not
            refused = await uow.allocations.reserve_many(CLUSTER, [
                Reservation("a", "n1", (GpuGrant(0, 9420, 575),), 0, 0, "da"),
                Reservation("b", "n1", (GpuGrant(0, 9420, 575),), 0, 0, "db")])
            assert refused is not None and "GPU 0" in refused
        async with uow_factory() as uow:  # not committed: nothing kept
            assert await uow.allocations.load_allocations(CLUSTER) == []
            refused = await uow.allocations.reserve_many(CLUSTER, [
                Reservation("a", "n1", (), 70000, 0, "da")])  # CPU past the node's 64000 m
            assert refused is not None and "CPU" in refused

    @covers("reserve_many")
    async def test_a_batch_with_a_pod_reserved_meanwhile_is_refused_whole(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:  # another worker reserved b first
            assert await uow.allocations.reserve_many(
                CLUSTER, [Reservation("b", "n1", (GpuGrant(1, 100, 10),), 0, 0, "d0")]) is None
            await uow.commit()
        async with uow_factory() as uow:
            refused = await uow.allocations.reserve_many(CLUSTER, [
                Reservation("a", "n1", (GpuGrant(0, 100, 10),), 0, 0, "da"),
                Reservation("b", "n1", (GpuGrant(0, 100, 10),), 0, 0, "db")])
            assert refused == "pod b is no longer waiting"

    @covers("reserve", "release", "load_gpus", "load_nodes")
    async def test_reserve_charges_and_release_refunds(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            refusal = await uow.allocations.reserve(cluster=CLUSTER, pod_uid="a", node="n1",
                                                    grants=[GpuGrant(1, 9420, 575)], cpu_milli=1000, memory_mib=1024,
                                                    decision_id="d1")
            assert refusal is None
            await uow.commit()
        async with uow_factory() as uow:
            gpus = await uow.nodes.load_gpus(CLUSTER)
            assert [(g["index"], g["memory_assigned_mib"], g["share_assigned_milli"]) for g in gpus] == \
                [(0, 0, 0), (1, 9420, 575)]
            assert (await uow.nodes.load_nodes(CLUSTER))[0]["cpu_assigned_milli"] == 1000
            assert await uow.allocations.release(CLUSTER, "a", cpu_milli=1000, memory_mib=1024) == "n1"
            await uow.commit()
        async with uow_factory() as uow:
            assert [g["memory_assigned_mib"] for g in await uow.nodes.load_gpus(CLUSTER)] == [0, 0]
            assert (await uow.nodes.load_nodes(CLUSTER))[0]["cpu_assigned_milli"] == 0

    @covers("reserve", "release", "set_pod_state")
    async def test_a_pod_without_gpus_holds_and_gives_back_cpu(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.allocations.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[], cpu_milli=3000,
                                                 memory_mib=2048, decision_id="d1") is None
            await uow.pods.set_pod_state(CLUSTER, "a", "reserved", node="n1")
            await uow.commit()
        async with uow_factory() as uow:
            assert (await uow.nodes.load_nodes(CLUSTER))[0]["cpu_assigned_milli"] == 3000
            assert await uow.allocations.load_allocations(CLUSTER) == []
            # no allocation row says where: the pod's own row does
            assert await uow.allocations.release(CLUSTER, "a", cpu_milli=3000, memory_mib=2048) == "n1"
            await uow.commit()
        async with uow_factory() as uow:
            node = (await uow.nodes.load_nodes(CLUSTER))[0]
            assert (node["cpu_assigned_milli"], node["memory_assigned_mib"]) == (0, 0)

    @covers("charge_bound")
    async def test_a_pod_bound_elsewhere_is_charged_even_past_capacity(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.allocations.reserve(cluster=CLUSTER, pod_uid="a", node="n1",
                                                 grants=[GpuGrant(0, 9420, 575)], cpu_milli=60000, memory_mib=0,
                                                 decision_id="d1") is None
            await uow.commit()
        async with uow_factory() as uow:
            # Another scheduler bound b there: its 8 cores are charged although only 4 are left (the node runs
            # it); of its two whole GPUs, GPU 0 has no room and is refused, GPU 1 is charged.
            refused = await uow.allocations.charge_bound(
                cluster=CLUSTER, pod_uid="b", node="n1", grants=[GpuGrant(0, 16384, 1000), GpuGrant(1, 16384, 1000)],
                cpu_milli=8000, memory_mib=0, decision_id="d2")
            await uow.commit()
        assert refused == [0]
        async with uow_factory() as uow:
            assert (await uow.nodes.load_nodes(CLUSTER))[0]["cpu_assigned_milli"] == 68000
            assert sorted((a["pod_uid"], a["gpu_index"]) for a in await uow.allocations.load_allocations(CLUSTER)) == \
                [("a", 0), ("b", 1)]

    @covers("reserve")
    async def test_a_gpu_is_never_overcommitted(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.allocations.reserve(cluster=CLUSTER, pod_uid="a", node="n1",
                                                 grants=[GpuGrant(0, 9420, 575)], cpu_milli=0, memory_mib=0,
                                                 decision_id="d1") is None
            await uow.commit()
        async with uow_factory() as uow:
            # 9420 + 9420 = 18840 MiB > 16384 MiB: refused, with the reason
            refusal = await uow.allocations.reserve(cluster=CLUSTER, pod_uid="b", node="n1",
                                                    grants=[GpuGrant(0, 9420, 575)], cpu_milli=0, memory_mib=0,
                                                    decision_id="d2")
            assert refusal is not None and "GPU 0" in refusal

    @covers("reserve")
    async def test_two_concurrent_placements_on_one_gpu_exactly_one_wins(self) -> None:
        uow_factory = await self._seeded()

        async def place(uid: str) -> bool:
            async with uow_factory() as uow:
                refusal = await uow.allocations.reserve(cluster=CLUSTER, pod_uid=uid, node="n1",
                                                        grants=[GpuGrant(0, 9420, 575)], cpu_milli=0, memory_mib=0,
                                                        decision_id=f"d-{uid}")
                await asyncio.sleep(0.05)  # hold the transaction open while the other one tries
                if refusal is None:
                    await uow.commit()
                return refusal is None

        assert sorted(await asyncio.gather(place("a"), place("b"))) == [False, True]
        async with uow_factory() as uow:
            gpu0 = (await uow.nodes.load_gpus(CLUSTER))[0]
            assert gpu0["memory_assigned_mib"] == 9420
            assert len(await uow.allocations.load_allocations(CLUSTER)) == 1

    @covers("find_promise", "transfer_allocations")
    async def test_a_promised_place_is_adopted_by_one_replacement(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            for uid, owner in (("p1", "rs-1"), ("p2", "rs-1"), ("q1", "rs-2")):
                await uow.pods.upsert_pod({**pod_row(uid), "state": "promised", "owner": owner})
            await uow.allocations.reserve(cluster=CLUSTER, pod_uid="p1", node="n1", grants=[GpuGrant(0, 100, 10)],
                                          cpu_milli=500, memory_mib=256, decision_id="d1")
            await uow.commit()
        async with uow_factory() as uow:
            promise = await uow.pods.find_promise(CLUSTER, "ns", "rs-1")
            assert promise is not None and promise["uid"] == "p1"  # the oldest (first seen, then uid)
            assert await uow.pods.find_promise(CLUSTER, "ns", "rs-9") is None
            assert await uow.pods.find_promise(CLUSTER, "elsewhere", "rs-1") is None
            moved = await uow.allocations.transfer_allocations(CLUSTER, "p1", "a")
            assert [(m["node"], m["gpu_index"], m["memory_mib"], m["share_milli"]) for m in moved] == \
                [("n1", 0, 100, 10)]
            await uow.pods.delete_pod(CLUSTER, "p1")
            await uow.commit()
        async with uow_factory() as uow:
            held = await uow.allocations.load_allocations(CLUSTER)
            assert [(a["pod_uid"], a["gpu_index"]) for a in held] == [("a", 0)]
            assert (await uow.nodes.load_gpus(CLUSTER))[0]["memory_assigned_mib"] == 100  # moved, not refunded
            second = await uow.pods.find_promise(CLUSTER, "ns", "rs-1")
            assert second is not None and second["uid"] == "p2"

