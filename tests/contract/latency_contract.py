"""The contract slice of repositories.Latency: what its fake (tests/fakes.py) and its PostgreSQL adapter
must both do; store_contract.py says how the slices run and what they share."""

from __future__ import annotations

import pytest

from gpuplace.usecases.ports import GpuGrant
from tests.contract.covers import covers
from tests.contract.store_contract import CLUSTER, StoreContract, window_row


class LatencyContract(StoreContract):
    @covers("load_latency_model", "save_latency_model", "co_runners")
    async def test_latency_model_state_and_co_runners(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.latency.load_latency_model("fleet") is None
            await uow.latency.save_latency_model("fleet", {"classes": {"slam": [1.0, 0.5]}})
            await uow.latency.save_latency_model("fleet", {"classes": {"slam": [2.0, 0.5]}})
            for uid in ("a", "b"):
                await uow.allocations.reserve(cluster=CLUSTER, pod_uid=uid, node="n1", grants=[GpuGrant(0, 100, 10)],
                                              cpu_milli=0, memory_mib=0, decision_id=f"d-{uid}")
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.latency.load_latency_model("fleet", for_update=True) == {"classes": {"slam": [2.0, 0.5]}}
            others = await uow.latency.co_runners(CLUSTER, "n1", 0, exclude_uid="a")
            assert [(r["uid"], r["frame_rate_hz"], r["workload"]) for r in others] == [("b", 12.5, "slam")]

    @covers("add_latency_window")
    async def test_latency_windows_are_kept_once_committed(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.latency.add_latency_window(window_row("pod-a"))
            await uow.commit()
        async with uow_factory() as uow:
            await uow.latency.add_latency_window(window_row("pod-b"))  # rolled back
        stored = await self.latency_windows(uow_factory)
        assert [(w["pod"], w["p95_ms"], w["deadline_misses"]) for w in stored] == [("pod-a", 70.0, 1)]

    @covers("flag_slo_violation")
    async def test_an_slo_violation_is_flagged_once_per_gpu_and_pod(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            assert await uow.latency.flag_slo_violation(CLUSTER, "a", "n1", 0)
            assert not await uow.latency.flag_slo_violation(CLUSTER, "a", "n1", 0)  # both were so already
            assert await uow.latency.flag_slo_violation(CLUSTER, "b", "n1", 0)  # GPU 0 closed, b newly marked
            assert await uow.latency.flag_slo_violation(CLUSTER, "a", "n1", 1)  # a marked, GPU 1 newly closed
            await uow.commit()
        async with uow_factory() as uow:
            assert [g["slo_blocked_at"] is not None for g in await uow.nodes.load_gpus(CLUSTER)] == [True, True]
            for uid in ("a", "b"):
                pod = await uow.pods.get_pod(CLUSTER, uid)
                assert pod is not None and pod["move_requested_at"] is not None

    @covers("gpu_of_pod")
    async def test_where_a_placed_pod_runs_with_what_the_latency_model_needs(self) -> None:
        uow_factory = await self._seeded()
        async with uow_factory() as uow:
            await uow.allocations.reserve(cluster=CLUSTER, pod_uid="a", node="n1", grants=[GpuGrant(1, 9420, 575)],
                                          cpu_milli=0, memory_mib=0, decision_id="d1")
            await uow.pods.set_pod_state(CLUSTER, "a", "reserved", node="n1")
            await uow.commit()
        async with uow_factory() as uow:
            held = await uow.latency.gpu_of_pod(CLUSTER, "ns", "pod-a")
            fields = ("node", "gpu_index", "uid", "deadline_ms", "frame_rate_hz", "workload", "model")
            assert held is not None and {k: held[k] for k in fields} == {
                "node": "n1", "gpu_index": 1, "uid": "a", "deadline_ms": 80.0, "frame_rate_hz": 12.5,
                "workload": "slam", "model": "V100"}
            assert await uow.latency.gpu_of_pod(CLUSTER, "ns", "pod-b") is None  # holds no GPU
            await uow.pods.set_pod_state(CLUSTER, "a", "deleted")
            assert await uow.latency.gpu_of_pod(CLUSTER, "ns", "pod-a") is None  # holds one, but is not placed

    @covers("latency_by_workload")
    async def test_latency_windows_summed_per_workload_with_the_p95_of_their_p95(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            for i, p95 in enumerate((10.0, 20.0, 30.0, 40.0, 50.0)):  # slam: 5 windows
                await uow.latency.add_latency_window({**window_row(f"s{i}"), "p95_ms": p95, "frames": 100 + i,
                                                    "deadline_misses": i, "deadline_ms": 80.0 - i})
            await uow.latency.add_latency_window({**window_row("d"), "workload": "detect", "deadline_ms": None})
            await uow.latency.add_latency_window({**window_row("x"), "cluster": "elsewhere"})
            await uow.commit()
        async with uow_factory() as uow:
            found = [dict(r) for r in await uow.latency.latency_by_workload(CLUSTER)]
        assert [r["workload"] for r in found] == ["detect", "slam"]
        detect, slam = found
        assert (detect["windows"], detect["frames"], detect["deadline_misses"], detect["deadline_ms"]) == \
            (1, 125, 1, None)
        assert detect["p95_ms"] == pytest.approx(70.0) and detect["worst_p95_ms"] == pytest.approx(70.0)
        assert (slam["windows"], slam["frames"], slam["deadline_misses"]) == (5, 510, 10)
        assert slam["p95_ms"] == pytest.approx(48.0)  # 40 + 0.8 * (50 - 40): rank 0.95 * 4 = 3.8
        assert slam["worst_p95_ms"] == pytest.approx(50.0) and slam["deadline_ms"] == pytest.approx(76.0)

