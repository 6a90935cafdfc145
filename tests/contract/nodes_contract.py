"""The contract slice of repositories.Nodes: what its fake (tests/fakes.py) and its PostgreSQL adapter
must both do; store_contract.py says how the slices run and what they share."""

from __future__ import annotations

from gpuplace.usecases.ports import GpuGrant
from tests.contract.covers import covers
from tests.contract.store_contract import CLUSTER, StoreContract, node_row, pod_row


class NodesContract(StoreContract):
    @covers("delete_node")
    async def test_removing_a_node_no_pod_holds_drops_it_with_its_gpus(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.nodes.delete_node(CLUSTER, "n1") == []
            assert await uow.nodes.load_nodes(CLUSTER) == [] and await uow.nodes.load_gpus(CLUSTER) == []
            assert await uow.nodes.delete_node(CLUSTER, "n1") == []  # not there: nothing to do
            await uow.commit()

    @covers("delete_node", "release", "upsert_node")
    async def test_a_node_that_leaves_while_pods_hold_it_stays_absent_until_they_go(self) -> None:
        # Pods are the truth: a node deleted and registered again under its name (kubelet re-registration, a
        # repair) while its pods still run must come back charged with them, on the GPUs they hold.
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.allocations.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(0, 100, 10)],
                                          cpu_milli=500, memory_mib=64, decision_id="d1")
            assert await uow.nodes.delete_node(CLUSTER, "n1") == ["a"]
            [node] = await uow.nodes.load_nodes(CLUSTER)
            assert node["absent_since"] is not None and node["cpu_assigned_milli"] == 500
            held = await uow.allocations.load_allocations(CLUSTER)
            assert [(a["pod_uid"], a["gpu_index"]) for a in held] == [("a", 0)]
            await uow.nodes.upsert_node(node_row("n1"))  # back under the same name
            [node] = await uow.nodes.load_nodes(CLUSTER)
            assert node["absent_since"] is None and node["cpu_assigned_milli"] == 500
            assert [g["memory_assigned_mib"] for g in await uow.nodes.load_gpus(CLUSTER)] == [100, 0]
            assert await uow.nodes.delete_node(CLUSTER, "n1") == ["a"]  # gone again, still held
            assert await uow.allocations.release(CLUSTER, "a", cpu_milli=500, memory_mib=64) == "n1"
            assert await uow.nodes.load_nodes(CLUSTER) == []  # its last holder went: the absent node goes too
            await uow.commit()

    @covers("upsert_node", "release")
    async def test_a_gpu_that_reports_less_than_its_pods_hold_stays_full_until_they_go(self) -> None:
        # issue 40: the watcher's correct, smaller value used to fail the CHECK and be dead-lettered
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.allocations.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(0, 12000, 750)],
                                          cpu_milli=0, memory_mib=0, decision_id="d1")
            assert await uow.nodes.upsert_node(node_row("n1", gpu_memory_mib=8192)) == [0]
            gpus = {g["index"]: g for g in await uow.nodes.load_gpus(CLUSTER)}
            assert (gpus[0]["memory_total_mib"], gpus[0]["memory_reported_mib"]) == (12000, 8192)
            assert gpus[1]["memory_total_mib"] == 8192
            assert await uow.allocations.reserve(cluster=CLUSTER, pod_uid="b", node="n1", grants=[GpuGrant(0, 100, 10)],
                                                 cpu_milli=0, memory_mib=0, decision_id="d2") is not None  # full
            await uow.allocations.release(CLUSTER, "a", cpu_milli=0, memory_mib=0)
            assert [g["memory_total_mib"] for g in await uow.nodes.load_gpus(CLUSTER)] == [8192, 8192]
            assert await uow.nodes.upsert_node(node_row("n1", gpu_memory_mib=8192)) == []
            await uow.commit()

    @covers("upsert_node", "load_nodes", "load_gpus")
    async def test_a_node_refreshed_keeps_what_it_holds_and_drops_gpus_past_its_count(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.allocations.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(1, 9420, 575)],
                                          cpu_milli=1000, memory_mib=1024, decision_id="d1")
            await uow.commit()
        async with uow_factory() as uow:
            await uow.nodes.upsert_node({**node_row(gpus=3), "ready": False})
            (node,) = await uow.nodes.load_nodes(CLUSTER)
            assert (node["ready"], node["gpu_count"], node["cpu_assigned_milli"]) == (False, 3, 1000)
            assert [(g["index"], g["memory_assigned_mib"]) for g in await uow.nodes.load_gpus(CLUSTER)] == \
                [(0, 0), (1, 9420), (2, 0)]
            await uow.nodes.upsert_node(node_row(gpus=1))  # GPU 1 goes, and the grant on it
            assert [g["index"] for g in await uow.nodes.load_gpus(CLUSTER)] == [0]
            assert await uow.allocations.load_allocations(CLUSTER) == []
            await uow.commit()

    @covers("upsert_node", "load_gpus")
    async def test_a_nodes_gpu_topology_is_stored_per_gpu_and_cleared_when_no_longer_described(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.nodes.upsert_node({**node_row(gpus=4), "gpu_numa": [0, 0, 1, 1], "gpu_nvlink": [0, 0, 0, 0]})
            await uow.commit()
        async with uow_factory() as uow:
            topology = [(g["numa_node"], g["nvlink_domain"]) for g in await uow.nodes.load_gpus(CLUSTER)]
            assert topology == [(0, 0), (0, 0), (1, 0), (1, 0)]
            await uow.nodes.upsert_node({**node_row(gpus=4), "gpu_numa": [], "gpu_nvlink": []})  # labels removed
            await uow.commit()
        async with uow_factory() as uow:
            topology = [(g["numa_node"], g["nvlink_domain"]) for g in await uow.nodes.load_gpus(CLUSTER)]
            assert topology == [(None, None)] * 4

    @covers("record_telemetry")
    async def test_telemetry_is_stored_only_for_gpus_in_the_inventory(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.nodes.record_telemetry(CLUSTER, "n1", 1, uuid="GPU-1", memory_observed_mib=5000,
                                                    utilization_pct=42.5, healthy=False)
            assert not await uow.nodes.record_telemetry(CLUSTER, "n1", 7, memory_observed_mib=1)
            assert not await uow.nodes.record_telemetry(CLUSTER, "n9", 0, memory_observed_mib=1)
            await uow.commit()
        async with uow_factory() as uow:
            gpus = await uow.nodes.load_gpus(CLUSTER)
            assert [(g["uuid"], g["memory_observed_mib"], g["utilization_pct"], g["healthy"]) for g in gpus] == \
                [(None, None, None, True), ("GPU-1", 5000, 42.5, False)]
            assert gpus[0]["telemetry_at"] is None and gpus[1]["telemetry_at"] is not None

    @covers("cluster_names")
    async def test_the_clusters_known_by_a_node_or_a_pod(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.pods.upsert_pod({**pod_row("z"), "cluster": "another"})  # a pod, no node yet
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.nodes.cluster_names() == ["another", CLUSTER]

