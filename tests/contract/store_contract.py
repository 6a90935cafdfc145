"""What the contract slices of the unit of work and its repositories share: rows to store, and how a slice gets
a fresh store (usecases/ports.py UnitOfWork, usecases/repositories.py); each slice is subclassed once per
implementation.

The slices (unit_of_work_contract.py, and one per repository: pods_contract.py, allocations_contract.py, ...)
are run by tests/unit/test_fake_unit_of_work.py and tests/integration/test_postgres_unit_of_work.py, which only
say how to build a store; the assertions live in the slices, so the fake cannot drift from PostgreSQL unnoticed.
Each case names the port methods it checks (`@covers`), and tests/unit/test_port_contracts.py fails when a method
of the unit of work or of a repository has no case in any slice.
"""

from __future__ import annotations

import inspect
from datetime import UTC, datetime
from typing import Any

from gpuplace.usecases.ports import DefragPlanRecord, PlannedMove

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


class StoreContract:
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
            await uow.nodes.upsert_node(node_row())
            for uid in ("a", "b"):
                await uow.pods.upsert_pod(pod_row(uid))
            await uow.commit()
        return uow_factory


__all__ = ["CLUSTER", "StoreContract", "decision_row", "node_row", "plan_record", "pod_row", "window_row"]
