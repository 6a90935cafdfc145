"""What every UnitOfWork + StateRepository must do (usecases/ports.py); subclassed once per implementation.

`TestFakeUnitOfWork` (tests/unit) and `TestPostgresUnitOfWork` (tests/integration) only say how to build
one; the assertions live here, so the fake cannot drift from PostgreSQL unnoticed. Each case names the port
methods it checks (`@covers`), and tests/unit/test_port_contracts.py fails when a method has none.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuplace.contracts.rejected import Rejected
from gpuplace.usecases.pod_states import IllegalTransition, PodState
from gpuplace.usecases.ports import (
    AllocationRow,
    DecisionRow,
    DefragPlanRecord,
    GpuGrant,
    GpuRow,
    NodeRow,
    PlannedMove,
    PlanState,
    PodRow,
    Reservation,
    Retained,
)
from tests.contract.covers import covers

CLUSTER = "contract"

def node_row(name: str = "n1", gpus: int = 2, gpu_memory_mib: int = 16384) -> dict[str, Any]:
    return {"cluster": CLUSTER, "name": name, "region": "local", "cpu_milli": 64000, "memory_mib": 262144,
            "gpu_model": "V100", "gpu_count": gpus, "gpu_memory_mib": gpu_memory_mib, "ready": True,
            "unschedulable": False, "labels": {}, "taints": []}


def pod_row(uid: str, name: str | None = None) -> dict[str, Any]:
    return {"cluster": CLUSTER, "uid": uid, "namespace": "ns", "name": name or f"pod-{uid}", "state": "pending",
            "priority": 0, "request": {"gpu_count": 1, "memory_mib_per_gpu": 9420}, "cpu_milli": 1000,
            "memory_mib": 1024, "deadline_ms": 80.0, "frame_rate_hz": 12.5, "workload": "slam", "owner": None}


def decision_row(decision_id: str, pod_uid: str, kind: str, reasons: dict[str, str] | None = None) -> dict[str, Any]:
    return {"id": decision_id, "cluster": CLUSTER, "namespace": "ns", "pod": f"pod-{pod_uid}", "pod_uid": pod_uid,
            "kind": kind, "node": "n1", "gpus": [], "policy": "bestfit", "reasons": reasons or {}}


def plan_record(plan_id: str, beneficiary: str, *victims: str) -> DefragPlanRecord:
    return DefragPlanRecord(CLUSTER, plan_id, beneficiary, tuple(
        PlannedMove(uid=v, namespace="ns", name=f"pod-{v}", from_node="n1", from_gpu_indices=(1, 0), share_milli=250,
                    memory_mib=4096, cpu_milli=500, pod_memory_mib=1024, promise=f"promise-{plan_id}-{i}")
        for i, v in enumerate(victims)))


def window_row(pod: str) -> dict[str, Any]:
    return {"cluster": CLUSTER, "namespace": "ns", "pod": pod, "workload": "slam", "node": "n1", "gpu_index": 0,
            "window_end": datetime(2026, 1, 1, tzinfo=UTC), "window_s": 10.0, "frames": 125, "p50_ms": 40.0,
            "p95_ms": 70.0, "p99_ms": 90.0, "deadline_ms": 80.0, "deadline_misses": 1}


class UnitOfWorkContract:
    """Subclasses define `make_uow_factory()` (sync or async): a fresh, empty store's unit-of-work factory, and
    `latency_windows(uow_factory)`: the windows it stores (which no port method reads back)."""

    def make_uow_factory(self) -> Any:
        raise NotImplementedError

    async def latency_windows(self, uow_factory: Any) -> list[Any]:
        raise NotImplementedError

    async def _fresh(self) -> Any:
        factory = self.make_uow_factory()
        return await factory if inspect.isawaitable(factory) else factory

    async def _seeded(self) -> Any:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.state.upsert_node(node_row())
            for uid in ("a", "b"):
                await uow.state.upsert_pod(pod_row(uid))
            await uow.commit()
        return uow_factory

    @covers("claim_event", "state", "commit")
    async def test_an_event_is_claimed_once(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            assert await uow.state.claim_event("placement", "e1")
            assert not await uow.state.claim_event("placement", "e1")
            assert await uow.state.claim_event("ingest", "e1")  # per consumer
            await uow.commit()

    @covers("claim_event")
    async def test_an_event_id_reused_for_other_content_is_refused(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            assert await uow.state.claim_event("placement", "e3", "digest-a")
            await uow.commit()
        async with uow_factory() as uow:
            assert not await uow.state.claim_event("placement", "e3", "digest-a")  # a redelivery: skipped
            assert not await uow.state.claim_event("placement", "e3")  # no digest to compare: skipped
            with pytest.raises(Rejected, match="reused id"):
                await uow.state.claim_event("placement", "e3", "digest-b")

    @covers("claim_events")
    async def test_events_are_claimed_in_a_batch_once_and_a_reused_id_is_refused(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            assert await uow.state.claim_events("placement", [("b1", "x"), ("b2", None)]) == {"b1", "b2"}
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.state.claim_events("placement", [("b1", "x"), ("b3", "y")]) == {"b3"}
            assert await uow.state.claim_events("ingest", [("b1", "x")]) == {"b1"}  # per consumer
        async with uow_factory() as uow:
            with pytest.raises(Rejected, match="reused id"):
                await uow.state.claim_events("placement", [("b4", None), ("b1", "other content")])

    @covers("upsert_pods", "reserve_many", "mark_bound", "add_decisions", "add_outbox_many")
    async def test_a_batch_of_pods_is_recorded_reserved_and_bound_together(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.state.upsert_node(node_row())
            rows = await uow.state.upsert_pods([pod_row("a"), pod_row("b"), pod_row("c")])
            assert [r["uid"] for r in rows] == ["a", "b", "c"] and {r["state"] for r in rows} == {"pending"}
            refused = await uow.state.reserve_many(CLUSTER, [
                Reservation("a", "n1", (GpuGrant(0, 9420, 575),), 1000, 1024, "da"),
                Reservation("b", "n1", (GpuGrant(1, 9420, 575),), 1000, 1024, "db"),
                Reservation("c", "n1", (GpuGrant(1, 6000, 366),), 1000, 1024, "dc")])
            assert refused is None
            await uow.state.add_decisions([decision_row("d1", "a", "decided"), decision_row("d2", "b", "decided")])
            await uow.state.add_outbox_many([("t", "east/a", json.dumps({"n": 1})),
                                             ("t", "east/b", json.dumps({"n": 2}))])
            await uow.commit()
        async with uow_factory() as uow:
            assert {(g["index"], g["memory_assigned_mib"], g["share_assigned_milli"])
                    for g in await uow.state.load_gpus(CLUSTER)} == {(0, 9420, 575), (1, 15420, 941)}
            assert (await uow.state.load_nodes(CLUSTER))[0]["cpu_assigned_milli"] == 3000
            assert {(p["uid"], p["state"], p["node"]) for p in await uow.state.pods_in_state(CLUSTER, ("reserved",))} \
                == {("a", "reserved", "n1"), ("b", "reserved", "n1"), ("c", "reserved", "n1")}
            assert len(await uow.state.load_allocations(CLUSTER)) == 3
            assert [d["id"] for d in await uow.state.decisions_of(CLUSTER, "a")] == ["d1"]
            assert [r["payload"] for r in await uow.state.take_unpublished(10)] == [{"n": 1}, {"n": 2}]
            assert sorted(await uow.state.mark_bound(CLUSTER, ["a", "b", "zz"])) == ["a", "b"]
            assert await uow.state.mark_bound(CLUSTER, ["a"]) == []  # bound already: not moved twice
            await uow.commit()

    @covers("reserve_many")
    async def test_a_batch_that_would_overcommit_a_gpu_is_refused_whole(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            # 9420 + 9420 MiB on GPU 0 > 16384 MiB: each pod alone fits, the two together do not
            refused = await uow.state.reserve_many(CLUSTER, [
                Reservation("a", "n1", (GpuGrant(0, 9420, 575),), 0, 0, "da"),
                Reservation("b", "n1", (GpuGrant(0, 9420, 575),), 0, 0, "db")])
            assert refused is not None and "GPU 0" in refused
        async with uow_factory() as uow:  # not committed: nothing kept
            assert await uow.state.load_allocations(CLUSTER) == []
            refused = await uow.state.reserve_many(CLUSTER, [
                Reservation("a", "n1", (), 70000, 0, "da")])  # CPU past the node's 64000 m
            assert refused is not None and "CPU" in refused

    @covers("reserve_many")
    async def test_a_batch_with_a_pod_reserved_meanwhile_is_refused_whole(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:  # another worker reserved b first
            assert await uow.state.reserve_many(CLUSTER, [Reservation("b", "n1", (GpuGrant(1, 100, 10),), 0, 0, "d0")
                                                          ]) is None
            await uow.commit()
        async with uow_factory() as uow:
            refused = await uow.state.reserve_many(CLUSTER, [
                Reservation("a", "n1", (GpuGrant(0, 100, 10),), 0, 0, "da"),
                Reservation("b", "n1", (GpuGrant(0, 100, 10),), 0, 0, "db")])
            assert refused == "pod b is no longer waiting"

    @covers("set_pod_state", "upsert_pod", "get_pod")
    async def test_a_move_the_pod_lifecycle_does_not_name_is_refused_and_nothing_written(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.state.set_pod_state(CLUSTER, "a", PodState.DELETED)
            with pytest.raises(IllegalTransition, match="a pod deleted cannot become reserved"):
                await uow.state.set_pod_state(CLUSTER, "a", PodState.RESERVED, node="n1")
            with pytest.raises(IllegalTransition, match="cannot become promised"):
                await uow.state.set_pod_state(CLUSTER, "b", PodState.PROMISED)
            with pytest.raises(IllegalTransition, match="not recorded reserved when first seen"):
                await uow.state.upsert_pod({**pod_row("c"), "state": PodState.RESERVED})
            await uow.state.set_pod_state(CLUSTER, "zz", PodState.BOUND)  # no such pod: nothing to move
            await uow.commit()
        async with uow_factory() as uow:
            a, b = await uow.state.get_pod(CLUSTER, "a"), await uow.state.get_pod(CLUSTER, "b")
            assert (a["state"], a["node"]) == ("deleted", None) and b["state"] == "pending"
            assert await uow.state.get_pod(CLUSTER, "c") is None and await uow.state.get_pod(CLUSTER, "zz") is None

    @covers("commit", "reserve", "load_allocations", "load_gpus")
    async def test_without_commit_nothing_is_kept(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.state.claim_event("placement", "e2")
            await uow.state.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(0, 9420, 575)],
                                    cpu_milli=1000, memory_mib=1024, decision_id="d1")
        async with uow_factory() as uow:
            assert await uow.state.claim_event("placement", "e2")
            assert await uow.state.load_allocations(CLUSTER) == []
            assert [g["memory_assigned_mib"] for g in await uow.state.load_gpus(CLUSTER)] == [0, 0]

    @covers("reserve", "release", "load_gpus", "load_nodes")
    async def test_reserve_charges_and_release_refunds(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            refusal = await uow.state.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(1, 9420, 575)],
                                              cpu_milli=1000, memory_mib=1024, decision_id="d1")
            assert refusal is None
            await uow.commit()
        async with uow_factory() as uow:
            gpus = await uow.state.load_gpus(CLUSTER)
            assert [(g["index"], g["memory_assigned_mib"], g["share_assigned_milli"]) for g in gpus] == \
                [(0, 0, 0), (1, 9420, 575)]
            assert (await uow.state.load_nodes(CLUSTER))[0]["cpu_assigned_milli"] == 1000
            assert await uow.state.release(CLUSTER, "a", cpu_milli=1000, memory_mib=1024) == "n1"
            await uow.commit()
        async with uow_factory() as uow:
            assert [g["memory_assigned_mib"] for g in await uow.state.load_gpus(CLUSTER)] == [0, 0]
            assert (await uow.state.load_nodes(CLUSTER))[0]["cpu_assigned_milli"] == 0

    @covers("reserve", "release", "set_pod_state")
    async def test_a_pod_without_gpus_holds_and_gives_back_cpu(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.state.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[], cpu_milli=3000,
                                           memory_mib=2048, decision_id="d1") is None
            await uow.state.set_pod_state(CLUSTER, "a", "reserved", node="n1")
            await uow.commit()
        async with uow_factory() as uow:
            assert (await uow.state.load_nodes(CLUSTER))[0]["cpu_assigned_milli"] == 3000
            assert await uow.state.load_allocations(CLUSTER) == []
            # no allocation row says where: the pod's own row does
            assert await uow.state.release(CLUSTER, "a", cpu_milli=3000, memory_mib=2048) == "n1"
            await uow.commit()
        async with uow_factory() as uow:
            node = (await uow.state.load_nodes(CLUSTER))[0]
            assert (node["cpu_assigned_milli"], node["memory_assigned_mib"]) == (0, 0)

    @covers("charge_bound")
    async def test_a_pod_bound_elsewhere_is_charged_even_past_capacity(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.state.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(0, 9420, 575)],
                                           cpu_milli=60000, memory_mib=0, decision_id="d1") is None
            await uow.commit()
        async with uow_factory() as uow:
            # Another scheduler bound b there: its 8 cores are charged although only 4 are left (the node runs
            # it); of its two whole GPUs, GPU 0 has no room and is refused, GPU 1 is charged.
            refused = await uow.state.charge_bound(
                cluster=CLUSTER, pod_uid="b", node="n1", grants=[GpuGrant(0, 16384, 1000), GpuGrant(1, 16384, 1000)],
                cpu_milli=8000, memory_mib=0, decision_id="d2")
            await uow.commit()
        assert refused == [0]
        async with uow_factory() as uow:
            assert (await uow.state.load_nodes(CLUSTER))[0]["cpu_assigned_milli"] == 68000
            assert sorted((a["pod_uid"], a["gpu_index"]) for a in await uow.state.load_allocations(CLUSTER)) == \
                [("a", 0), ("b", 1)]

    @covers("count_pods_by_state")
    async def test_pods_are_counted_by_state_only_if_gpuplace_places_them(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.state.upsert_pod({**pod_row("c"), "state": "bound", "managed": False})
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.state.count_pods_by_state([CLUSTER]) == {"pending": 2}

    @covers("reserve")
    async def test_a_gpu_is_never_overcommitted(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.state.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(0, 9420, 575)],
                                           cpu_milli=0, memory_mib=0, decision_id="d1") is None
            await uow.commit()
        async with uow_factory() as uow:
            # 9420 + 9420 = 18840 MiB > 16384 MiB: refused, with the reason
            refusal = await uow.state.reserve(cluster=CLUSTER, pod_uid="b", node="n1", grants=[GpuGrant(0, 9420, 575)],
                                              cpu_milli=0, memory_mib=0, decision_id="d2")
            assert refusal is not None and "GPU 0" in refusal

    @covers("reserve")
    async def test_two_concurrent_placements_on_one_gpu_exactly_one_wins(self) -> None:
        uow_factory = await self._seeded()

        async def place(uid: str) -> bool:
            async with uow_factory() as uow:
                refusal = await uow.state.reserve(cluster=CLUSTER, pod_uid=uid, node="n1",
                                                  grants=[GpuGrant(0, 9420, 575)], cpu_milli=0, memory_mib=0,
                                                  decision_id=f"d-{uid}")
                await asyncio.sleep(0.05)  # hold the transaction open while the other one tries
                if refusal is None:
                    await uow.commit()
                return refusal is None

        assert sorted(await asyncio.gather(place("a"), place("b"))) == [False, True]
        async with uow_factory() as uow:
            gpu0 = (await uow.state.load_gpus(CLUSTER))[0]
            assert gpu0["memory_assigned_mib"] == 9420
            assert len(await uow.state.load_allocations(CLUSTER)) == 1

    @covers("upsert_pod", "get_pod", "set_pod_state", "pods_in_state")
    async def test_pod_state_moves_and_first_seen_is_kept(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            first = await uow.state.get_pod(CLUSTER, "a")
            await uow.state.set_pod_state(CLUSTER, "a", "bound", node="n1", mark_bound=True)
            again = await uow.state.upsert_pod({**pod_row("a"), "priority": 5})
            assert again["state"] == "bound" and again["priority"] == 5
            assert again["first_seen_at"] == first["first_seen_at"]
            assert again["bound_at"] is not None
            assert [p["uid"] for p in await uow.state.pods_in_state(CLUSTER, ("pending",))] == ["b"]
            await uow.commit()

    @covers("delete_node")
    async def test_removing_a_node_no_pod_holds_drops_it_with_its_gpus(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.state.delete_node(CLUSTER, "n1") == []
            assert await uow.state.load_nodes(CLUSTER) == [] and await uow.state.load_gpus(CLUSTER) == []
            assert await uow.state.delete_node(CLUSTER, "n1") == []  # not there: nothing to do
            await uow.commit()

    @covers("delete_node", "release", "upsert_node")
    async def test_a_node_that_leaves_while_pods_hold_it_stays_absent_until_they_go(self) -> None:
        # Pods are the truth: a node deleted and registered again under its name (kubelet re-registration, a
        # repair) while its pods still run must come back charged with them, on the GPUs they hold.
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.state.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(0, 100, 10)],
                                    cpu_milli=500, memory_mib=64, decision_id="d1")
            assert await uow.state.delete_node(CLUSTER, "n1") == ["a"]
            [node] = await uow.state.load_nodes(CLUSTER)
            assert node["absent_since"] is not None and node["cpu_assigned_milli"] == 500
            assert [(a["pod_uid"], a["gpu_index"]) for a in await uow.state.load_allocations(CLUSTER)] == [("a", 0)]
            await uow.state.upsert_node(node_row("n1"))  # back under the same name
            [node] = await uow.state.load_nodes(CLUSTER)
            assert node["absent_since"] is None and node["cpu_assigned_milli"] == 500
            assert [g["memory_assigned_mib"] for g in await uow.state.load_gpus(CLUSTER)] == [100, 0]
            assert await uow.state.delete_node(CLUSTER, "n1") == ["a"]  # gone again, still held
            assert await uow.state.release(CLUSTER, "a", cpu_milli=500, memory_mib=64) == "n1"
            assert await uow.state.load_nodes(CLUSTER) == []  # its last holder went: the absent node goes too
            await uow.commit()

    @covers("upsert_node", "release")
    async def test_a_gpu_that_reports_less_than_its_pods_hold_stays_full_until_they_go(self) -> None:
        # issue 40: the watcher's correct, smaller value used to fail the CHECK and be dead-lettered
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.state.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(0, 12000, 750)],
                                    cpu_milli=0, memory_mib=0, decision_id="d1")
            assert await uow.state.upsert_node(node_row("n1", gpu_memory_mib=8192)) == [0]
            gpus = {g["index"]: g for g in await uow.state.load_gpus(CLUSTER)}
            assert (gpus[0]["memory_total_mib"], gpus[0]["memory_reported_mib"]) == (12000, 8192)
            assert gpus[1]["memory_total_mib"] == 8192
            assert await uow.state.reserve(cluster=CLUSTER, pod_uid="b", node="n1", grants=[GpuGrant(0, 100, 10)],
                                           cpu_milli=0, memory_mib=0, decision_id="d2") is not None  # full
            await uow.state.release(CLUSTER, "a", cpu_milli=0, memory_mib=0)
            assert [g["memory_total_mib"] for g in await uow.state.load_gpus(CLUSTER)] == [8192, 8192]
            assert await uow.state.upsert_node(node_row("n1", gpu_memory_mib=8192)) == []
            await uow.commit()

    @covers("load_latency_model", "save_latency_model", "co_runners")
    async def test_latency_model_state_and_co_runners(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.state.load_latency_model("fleet") is None
            await uow.state.save_latency_model("fleet", {"classes": {"slam": [1.0, 0.5]}})
            await uow.state.save_latency_model("fleet", {"classes": {"slam": [2.0, 0.5]}})
            for uid in ("a", "b"):
                await uow.state.reserve(cluster=CLUSTER, pod_uid=uid, node="n1", grants=[GpuGrant(0, 100, 10)],
                                        cpu_milli=0, memory_mib=0, decision_id=f"d-{uid}")
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.state.load_latency_model("fleet", for_update=True) == {"classes": {"slam": [2.0, 0.5]}}
            others = await uow.state.co_runners(CLUSTER, "n1", 0, exclude_uid="a")
            assert [(r["uid"], r["frame_rate_hz"], r["workload"]) for r in others] == [("b", 12.5, "slam")]

    @covers("load_nodes", "load_gpus", "load_allocations", "get_pod", "decisions_of")
    async def test_rows_carry_exactly_the_columns_their_port_types_name(self) -> None:
        """ports.py types the rows (NodeRow, ...) beside tables.py's columns: a column added to one only fails here."""
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.state.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(0, 100, 10)],
                                           cpu_milli=0, memory_mib=0, decision_id="d-a") is None
            await uow.state.add_decisions([decision_row("d1", "a", "decided")])
            await uow.commit()
        async with uow_factory() as uow:
            rows = {NodeRow: (await uow.state.load_nodes(CLUSTER))[0], GpuRow: (await uow.state.load_gpus(CLUSTER))[0],
                    AllocationRow: (await uow.state.load_allocations(CLUSTER))[0],
                    PodRow: await uow.state.get_pod(CLUSTER, "a"),
                    DecisionRow: (await uow.state.decisions_of(CLUSTER, "a"))[0]}
        for row_type, row in rows.items():
            assert row is not None
            columns = set(row_type.__annotations__)
            assert set(row) == columns, (row_type.__name__, set(row) ^ columns)

    @covers("add_plan", "open_plans", "plan_state", "plan_moving")
    async def test_plans_are_kept_with_their_moves_in_order(self) -> None:
        uow_factory = await self._fresh()
        first, second = plan_record("p1", "b1", "v1", "v2"), plan_record("p2", "b2", "v3", "v1")
        for plan in (first, second):
            async with uow_factory() as uow:  # one transaction each, as the defragmenter plans them
                await uow.state.add_plan(plan)
                await uow.commit()
        async with uow_factory() as uow:
            assert await uow.state.open_plans(CLUSTER) == [first, second]
            assert await uow.state.open_plans("elsewhere") == []
            assert await uow.state.plan_state(CLUSTER, "p1") is PlanState.PLANNED
            assert await uow.state.plan_state(CLUSTER, "p9") is None
            assert await uow.state.plan_moving(CLUSTER, "v1") == second  # moved again: the later plan
            assert await uow.state.plan_moving(CLUSTER, "v2") == first
            assert await uow.state.plan_moving(CLUSTER, "b1") is None  # a beneficiary is not moved

    @covers("settle_plan")
    async def test_a_plan_is_settled_once(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.state.add_plan(plan_record("p1", "b1", "v1"))
            await uow.state.add_plan(plan_record("p2", "b2", "v2"))
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.state.settle_plan(CLUSTER, "p1", PlanState.ABORTED, "refused")
            assert not await uow.state.settle_plan(CLUSTER, "p1", PlanState.COMPLETED)
            assert not await uow.state.settle_plan(CLUSTER, "p9", PlanState.COMPLETED)
            await uow.commit()
        async with uow_factory() as uow:
            assert [p.plan_id for p in await uow.state.open_plans(CLUSTER)] == ["p2"]
            settled = await uow.state.plan_moving(CLUSTER, "v1")
            assert settled is not None and (settled.state, settled.reason) == (PlanState.ABORTED, "refused")

        async def settle(state: PlanState) -> bool:
            async with uow_factory() as uow:
                won = await uow.state.settle_plan(CLUSTER, "p2", state)
                await asyncio.sleep(0.05)  # hold the transaction open while the other one tries
                await uow.commit()
                return won

        assert sorted(await asyncio.gather(settle(PlanState.COMPLETED), settle(PlanState.ABORTED))) == [False, True]

    @covers("decisions_of", "decisions_with_reason")
    async def test_a_pods_decisions_oldest_first_and_decisions_found_by_a_reason(self) -> None:
        uow_factory = await self._seeded()
        for i, (uid, kind, reasons) in enumerate([
                ("a", "unschedulable", {"V100": "2 node(s): full (GpuFit)"}), ("b", "decided", {"score": "90"}),
                ("a", "decided", {"defrag": "place promised as promise-p1-0"}), ("a", "bound", {}),
                ("b", "decided", {"defrag": "place promised as promise-p1-0x"})]):
            async with uow_factory() as uow:  # one transaction each, as their writers do
                await uow.state.add_decisions([decision_row(f"d{i}", uid, kind, reasons)])
                await uow.commit()
        async with uow_factory() as uow:
            history = await uow.state.decisions_of(CLUSTER, "a")
            assert [(d["id"], d["kind"]) for d in history] == [("d0", "unschedulable"), ("d2", "decided"),
                                                               ("d3", "bound")]
            assert history[0]["reasons"] == {"V100": "2 node(s): full (GpuFit)"}
            assert history[0]["created_at"] < history[1]["created_at"] < history[2]["created_at"]
            assert await uow.state.decisions_of(CLUSTER, "c") == []
            adopted = await uow.state.decisions_with_reason(CLUSTER, "decided", "defrag",
                                                            "place promised as promise-p1-0")
            assert [(d["id"], d["pod_uid"]) for d in adopted] == [("d2", "a")]
            assert await uow.state.decisions_with_reason(CLUSTER, "bound", "defrag",
                                                         "place promised as promise-p1-0") == []
            assert await uow.state.decisions_with_reason("elsewhere", "decided", "score", "90") == []

    @covers("find_pods")
    async def test_pods_are_found_by_name_newest_first_in_any_state(self) -> None:
        uow_factory = await self._fresh()
        for uid, namespace, cluster in [("old", "ns", CLUSTER), ("new", "ns", CLUSTER), ("other-ns", "team", CLUSTER),
                                        ("west", "ns", "west")]:
            async with uow_factory() as uow:  # one each: first_seen_at is the transaction's time
                await uow.state.upsert_pod({**pod_row(uid, "slam"), "namespace": namespace, "cluster": cluster})
                await uow.commit()
        async with uow_factory() as uow:
            await uow.state.set_pod_state(CLUSTER, "old", "deleted")
            await uow.commit()
        async with uow_factory() as uow:
            assert [p["uid"] for p in await uow.state.find_pods("slam", namespace="ns", cluster=CLUSTER)] == \
                ["new", "old"]
            assert [(p["cluster"], p["uid"]) for p in await uow.state.find_pods("slam", namespace="ns")] == \
                [("west", "west"), (CLUSTER, "new"), (CLUSTER, "old")]
            assert {p["uid"] for p in await uow.state.find_pods("slam")} == {"old", "new", "other-ns", "west"}
            assert [p["state"] for p in await uow.state.find_pods("slam", cluster=CLUSTER, namespace="ns")] == \
                ["pending", "deleted"]
            assert await uow.state.find_pods("nobody") == []

    @covers("upsert_node", "load_nodes", "load_gpus")
    async def test_a_node_refreshed_keeps_what_it_holds_and_drops_gpus_past_its_count(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.state.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(1, 9420, 575)],
                                    cpu_milli=1000, memory_mib=1024, decision_id="d1")
            await uow.commit()
        async with uow_factory() as uow:
            await uow.state.upsert_node({**node_row(gpus=3), "ready": False})
            (node,) = await uow.state.load_nodes(CLUSTER)
            assert (node["ready"], node["gpu_count"], node["cpu_assigned_milli"]) == (False, 3, 1000)
            assert [(g["index"], g["memory_assigned_mib"]) for g in await uow.state.load_gpus(CLUSTER)] == \
                [(0, 0), (1, 9420), (2, 0)]
            await uow.state.upsert_node(node_row(gpus=1))  # GPU 1 goes, and the grant on it
            assert [g["index"] for g in await uow.state.load_gpus(CLUSTER)] == [0]
            assert await uow.state.load_allocations(CLUSTER) == []
            await uow.commit()

    @covers("upsert_node", "load_gpus")
    async def test_a_nodes_gpu_topology_is_stored_per_gpu_and_cleared_when_no_longer_described(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.state.upsert_node({**node_row(gpus=4), "gpu_numa": [0, 0, 1, 1], "gpu_nvlink": [0, 0, 0, 0]})
            await uow.commit()
        async with uow_factory() as uow:
            topology = [(g["numa_node"], g["nvlink_domain"]) for g in await uow.state.load_gpus(CLUSTER)]
            assert topology == [(0, 0), (0, 0), (1, 0), (1, 0)]
            await uow.state.upsert_node({**node_row(gpus=4), "gpu_numa": [], "gpu_nvlink": []})  # labels removed
            await uow.commit()
        async with uow_factory() as uow:
            topology = [(g["numa_node"], g["nvlink_domain"]) for g in await uow.state.load_gpus(CLUSTER)]
            assert topology == [(None, None)] * 4

    @covers("record_telemetry")
    async def test_telemetry_is_stored_only_for_gpus_in_the_inventory(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.state.record_telemetry(CLUSTER, "n1", 1, uuid="GPU-1", memory_observed_mib=5000,
                                                    utilization_pct=42.5, healthy=False)
            assert not await uow.state.record_telemetry(CLUSTER, "n1", 7, memory_observed_mib=1)
            assert not await uow.state.record_telemetry(CLUSTER, "n9", 0, memory_observed_mib=1)
            await uow.commit()
        async with uow_factory() as uow:
            gpus = await uow.state.load_gpus(CLUSTER)
            assert [(g["uuid"], g["memory_observed_mib"], g["utilization_pct"], g["healthy"]) for g in gpus] == \
                [(None, None, None, True), ("GPU-1", 5000, 42.5, False)]
            assert gpus[0]["telemetry_at"] is None and gpus[1]["telemetry_at"] is not None

    @covers("find_promise", "transfer_allocations")
    async def test_a_promised_place_is_adopted_by_one_replacement(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            for uid, owner in (("p1", "rs-1"), ("p2", "rs-1"), ("q1", "rs-2")):
                await uow.state.upsert_pod({**pod_row(uid), "state": "promised", "owner": owner})
            await uow.state.reserve(cluster=CLUSTER, pod_uid="p1", node="n1", grants=[GpuGrant(0, 100, 10)],
                                    cpu_milli=500, memory_mib=256, decision_id="d1")
            await uow.commit()
        async with uow_factory() as uow:
            promise = await uow.state.find_promise(CLUSTER, "ns", "rs-1")
            assert promise is not None and promise["uid"] == "p1"  # the oldest (first seen, then uid)
            assert await uow.state.find_promise(CLUSTER, "ns", "rs-9") is None
            assert await uow.state.find_promise(CLUSTER, "elsewhere", "rs-1") is None
            moved = await uow.state.transfer_allocations(CLUSTER, "p1", "a")
            assert [(m["node"], m["gpu_index"], m["memory_mib"], m["share_milli"]) for m in moved] == \
                [("n1", 0, 100, 10)]
            await uow.state.delete_pod(CLUSTER, "p1")
            await uow.commit()
        async with uow_factory() as uow:
            assert [(a["pod_uid"], a["gpu_index"]) for a in await uow.state.load_allocations(CLUSTER)] == [("a", 0)]
            assert (await uow.state.load_gpus(CLUSTER))[0]["memory_assigned_mib"] == 100  # moved, not refunded
            second = await uow.state.find_promise(CLUSTER, "ns", "rs-1")
            assert second is not None and second["uid"] == "p2"

    @covers("delete_pod")
    async def test_a_pod_deleted_goes_with_its_grants_unrefunded(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.state.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(0, 9420, 575)],
                                    cpu_milli=0, memory_mib=0, decision_id="d1")
            await uow.state.delete_pod(CLUSTER, "a")
            await uow.state.delete_pod(CLUSTER, "never-there")  # no error
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.state.get_pod(CLUSTER, "a") is None
            assert await uow.state.load_allocations(CLUSTER) == []
            assert (await uow.state.load_gpus(CLUSTER))[0]["memory_assigned_mib"] == 9420  # release() first

    @covers("add_outbox")
    async def test_an_event_queued_in_the_outbox_is_there_only_once_committed(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.state.add_outbox("gpuplace.placements.v1", "east/a", json.dumps({"kind": "decided"}))
        async with uow_factory() as uow:
            assert await uow.state.take_unpublished(10) == []  # rolled back: never relayed
            await uow.state.add_outbox("gpuplace.placements.v1", "east/a", json.dumps({"kind": "bound"}))
            await uow.commit()
        async with uow_factory() as uow:
            rows = await uow.state.take_unpublished(10)
            assert [(r["topic"], r["key"], r["payload"]) for r in rows] == \
                [("gpuplace.placements.v1", "east/a", {"kind": "bound"})]

    @covers("count_bound_twice")
    async def test_pods_bound_twice_are_counted(self) -> None:
        uow_factory = await self._seeded()
        for i, (uid, kind) in enumerate([("a", "bound"), ("a", "bound"), ("b", "decided"), ("b", "bound")]):
            async with uow_factory() as uow:
                await uow.state.add_decisions([decision_row(f"d{i}", uid, kind)])
                await uow.commit()
        async with uow_factory() as uow:
            assert await uow.state.count_bound_twice(CLUSTER) == 1
            assert await uow.state.count_bound_twice("elsewhere") == 0

    @covers("retention")
    async def test_pruning_is_part_of_the_transaction_and_undone_without_commit(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.state.add_decisions([decision_row("d1", "a", "decided")])
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.retention.prune(Retained.DECISIONS, 0, 10) == 1
            assert await uow.state.decisions_of(CLUSTER, "a") == []  # its own transaction sees the rows gone
        async with uow_factory() as uow:  # not committed: still there
            assert [d["id"] for d in await uow.state.decisions_of(CLUSTER, "a")] == ["d1"]

    @covers("add_latency_window")
    async def test_latency_windows_are_kept_once_committed(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.state.add_latency_window(window_row("pod-a"))
            await uow.commit()
        async with uow_factory() as uow:
            await uow.state.add_latency_window(window_row("pod-b"))  # rolled back
        stored = await self.latency_windows(uow_factory)
        assert [(w["pod"], w["p95_ms"], w["deadline_misses"]) for w in stored] == [("pod-a", 70.0, 1)]

    @covers("flag_slo_violation")
    async def test_an_slo_violation_is_flagged_once_per_gpu_and_pod(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.state.flag_slo_violation(CLUSTER, "a", "n1", 0)
            assert not await uow.state.flag_slo_violation(CLUSTER, "a", "n1", 0)  # both were so already
            assert await uow.state.flag_slo_violation(CLUSTER, "b", "n1", 0)  # GPU 0 closed, b newly marked
            assert await uow.state.flag_slo_violation(CLUSTER, "a", "n1", 1)  # a marked, GPU 1 newly closed
            await uow.commit()
        async with uow_factory() as uow:
            assert [g["slo_blocked_at"] is not None for g in await uow.state.load_gpus(CLUSTER)] == [True, True]
            for uid in ("a", "b"):
                pod = await uow.state.get_pod(CLUSTER, uid)
                assert pod is not None and pod["move_requested_at"] is not None

    @covers("gpu_of_pod")
    async def test_where_a_placed_pod_runs_with_what_the_latency_model_needs(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.state.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(1, 9420, 575)],
                                    cpu_milli=0, memory_mib=0, decision_id="d1")
            await uow.state.set_pod_state(CLUSTER, "a", "reserved", node="n1")
            await uow.commit()
        async with uow_factory() as uow:
            held = await uow.state.gpu_of_pod(CLUSTER, "ns", "pod-a")
            fields = ("node", "gpu_index", "uid", "deadline_ms", "frame_rate_hz", "workload", "model")
            assert held is not None and {k: held[k] for k in fields} == {
                "node": "n1", "gpu_index": 1, "uid": "a", "deadline_ms": 80.0, "frame_rate_hz": 12.5,
                "workload": "slam", "model": "V100"}
            assert await uow.state.gpu_of_pod(CLUSTER, "ns", "pod-b") is None  # holds no GPU
            await uow.state.set_pod_state(CLUSTER, "a", "deleted")
            assert await uow.state.gpu_of_pod(CLUSTER, "ns", "pod-a") is None  # holds one, but is not placed

    @covers("cluster_names")
    async def test_the_clusters_known_by_a_node_or_a_pod(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.state.upsert_pod({**pod_row("z"), "cluster": "another"})  # a pod, no node yet
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.state.cluster_names() == ["another", CLUSTER]

    @covers("latency_by_workload")
    async def test_latency_windows_summed_per_workload_with_the_p95_of_their_p95(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            for i, p95 in enumerate((10.0, 20.0, 30.0, 40.0, 50.0)):  # slam: 5 windows
                await uow.state.add_latency_window({**window_row(f"s{i}"), "p95_ms": p95, "frames": 100 + i,
                                                    "deadline_misses": i, "deadline_ms": 80.0 - i})
            await uow.state.add_latency_window({**window_row("d"), "workload": "detect", "deadline_ms": None})
            await uow.state.add_latency_window({**window_row("x"), "cluster": "elsewhere"})
            await uow.commit()
        async with uow_factory() as uow:
            found = [dict(r) for r in await uow.state.latency_by_workload(CLUSTER)]
        assert [r["workload"] for r in found] == ["detect", "slam"]
        detect, slam = found
        assert (detect["windows"], detect["frames"], detect["deadline_misses"], detect["deadline_ms"]) == \
            (1, 125, 1, None)
        assert detect["p95_ms"] == pytest.approx(70.0) and detect["worst_p95_ms"] == pytest.approx(70.0)
        assert (slam["windows"], slam["frames"], slam["deadline_misses"]) == (5, 510, 10)
        assert slam["p95_ms"] == pytest.approx(48.0)  # 40 + 0.8 * (50 - 40): rank 0.95 * 4 = 3.8
        assert slam["worst_p95_ms"] == pytest.approx(50.0) and slam["deadline_ms"] == pytest.approx(76.0)
