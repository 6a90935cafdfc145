"""The contract slice of repositories.Pods: what its fake (tests/fakes.py) and its PostgreSQL adapter
must both do; store_contract.py says how the slices run and what they share."""

from __future__ import annotations

import pytest

from gpuplace.usecases.pod_states import IllegalTransition, PodState
from gpuplace.usecases.ports import GpuGrant
from tests.contract.covers import covers
from tests.contract.store_contract import CLUSTER, StoreContract, pod_row


class PodsContract(StoreContract):
    @covers("set_pod_state", "upsert_pod", "get_pod")
    async def test_a_move_the_pod_lifecycle_does_not_name_is_refused_and_nothing_written(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.pods.set_pod_state(CLUSTER, "a", PodState.DELETED)
            with pytest.raises(IllegalTransition, match="a pod deleted cannot become reserved"):
                await uow.pods.set_pod_state(CLUSTER, "a", PodState.RESERVED, node="n1")
            with pytest.raises(IllegalTransition, match="cannot become promised"):
                await uow.pods.set_pod_state(CLUSTER, "b", PodState.PROMISED)
            with pytest.raises(IllegalTransition, match="not recorded reserved when first seen"):
                await uow.pods.upsert_pod({**pod_row("c"), "state": PodState.RESERVED})
            await uow.pods.set_pod_state(CLUSTER, "zz", PodState.BOUND)  # no such pod: nothing to move
            await uow.commit()
        async with uow_factory() as uow:
            a, b = await uow.pods.get_pod(CLUSTER, "a"), await uow.pods.get_pod(CLUSTER, "b")
            assert (a["state"], a["node"]) == ("deleted", None) and b["state"] == "pending"
            assert await uow.pods.get_pod(CLUSTER, "c") is None and await uow.pods.get_pod(CLUSTER, "zz") is None

    @covers("count_pods_by_state")
    async def test_pods_are_counted_by_state_only_if_gpuplace_places_them(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.pods.upsert_pod({**pod_row("c"), "state": "bound", "managed": False})
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.pods.count_pods_by_state([CLUSTER]) == {"pending": 2}

    @covers("upsert_pod", "get_pod", "set_pod_state", "pods_in_state")
    async def test_pod_state_moves_and_first_seen_is_kept(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            first = await uow.pods.get_pod(CLUSTER, "a")
            await uow.pods.set_pod_state(CLUSTER, "a", "bound", node="n1", mark_bound=True)
            again = await uow.pods.upsert_pod({**pod_row("a"), "priority": 5})
            assert again["state"] == "bound" and again["priority"] == 5
            assert again["first_seen_at"] == first["first_seen_at"]
            assert again["bound_at"] is not None
            assert [p["uid"] for p in await uow.pods.pods_in_state(CLUSTER, ("pending",))] == ["b"]
            await uow.commit()

    @covers("find_pods")
    async def test_pods_are_found_by_name_newest_first_in_any_state(self) -> None:
        uow_factory = await self._fresh()
        for uid, namespace, cluster in [("old", "ns", CLUSTER), ("new", "ns", CLUSTER), ("other-ns", "team", CLUSTER),
                                        ("west", "ns", "west")]:
            async with uow_factory() as uow:  # one each: first_seen_at is the transaction's time
                await uow.pods.upsert_pod({**pod_row(uid, "slam"), "namespace": namespace, "cluster": cluster})
                await uow.commit()
        async with uow_factory() as uow:
            await uow.pods.set_pod_state(CLUSTER, "old", "deleted")
            await uow.commit()
        async with uow_factory() as uow:
            assert [p["uid"] for p in await uow.pods.find_pods("slam", namespace="ns", cluster=CLUSTER)] == \
                ["new", "old"]
            assert [(p["cluster"], p["uid"]) for p in await uow.pods.find_pods("slam", namespace="ns")] == \
                [("west", "west"), (CLUSTER, "new"), (CLUSTER, "old")]
            assert {p["uid"] for p in await uow.pods.find_pods("slam")} == {"old", "new", "other-ns", "west"}
            assert [p["state"] for p in await uow.pods.find_pods("slam", cluster=CLUSTER, namespace="ns")] == \
                ["pending", "deleted"]
            assert await uow.pods.find_pods("nobody") == []

    @covers("delete_pod")
    async def test_a_pod_deleted_goes_with_its_grants_unrefunded(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.allocations.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(0, 9420, 575)],
                                          cpu_milli=0, memory_mib=0, decision_id="d1")
            await uow.pods.delete_pod(CLUSTER, "a")
            await uow.pods.delete_pod(CLUSTER, "never-there")  # no error
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.pods.get_pod(CLUSTER, "a") is None
            assert await uow.allocations.load_allocations(CLUSTER) == []
            assert (await uow.nodes.load_gpus(CLUSTER))[0]["memory_assigned_mib"] == 9420  # release() first

