"""Latency windows and the latency model's state (latency_windows, latency_models).

Every method runs inside the caller's transaction (unit_of_work.py); the port is usecases.repositories.Latency.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import and_, func, select, update
from sqlalchemy.dialects.postgresql import insert

from gpuplace.adapters.postgres.repository import PostgresRepository, as_row, as_rows
from gpuplace.adapters.postgres.tables import allocations, gpus, latency_models, latency_windows, pods
from gpuplace.usecases.pod_states import PLACED
from gpuplace.usecases.ports import Row


class LatencyRepository(PostgresRepository):
    """usecases.repositories.Latency on the unit of work's connection."""

    async def add_latency_window(self, window: Mapping[str, Any]) -> None:
        await self._conn.execute(insert(latency_windows).values(**window))

    async def latency_by_workload(self, cluster: str) -> list[Row]:
        w = latency_windows
        result = await self._conn.execute(select(
            w.c.workload, func.count().label("windows"), func.sum(w.c.frames).label("frames"),
            func.sum(w.c.deadline_misses).label("deadline_misses"),
            func.percentile_cont(0.95).within_group(w.c.p95_ms).label("p95_ms"),
            func.max(w.c.p95_ms).label("worst_p95_ms"), func.min(w.c.deadline_ms).label("deadline_ms"),
        ).where(w.c.cluster == cluster).group_by(w.c.workload).order_by(w.c.workload))
        return [{**r, "frames": int(r["frames"]), "deadline_misses": int(r["deadline_misses"])}
                for r in as_rows(result)]

    async def flag_slo_violation(self, cluster: str, pod_uid: str, node: str, gpu_index: int) -> bool:
        """Close the GPU to new pods and mark the pod for a move; False if both were already so."""
        blocked = await self._conn.execute(update(gpus).where(
            gpus.c.cluster == cluster, gpus.c.node == node, gpus.c.index == gpu_index, gpus.c.slo_blocked_at.is_(None),
        ).values(slo_blocked_at=func.now()).returning(gpus.c.index))
        marked = await self._conn.execute(update(pods).where(
            pods.c.cluster == cluster, pods.c.uid == pod_uid, pods.c.move_requested_at.is_(None),
        ).values(move_requested_at=func.now()).returning(pods.c.uid))
        return blocked.first() is not None or marked.first() is not None

    async def load_latency_model(self, name: str, *, for_update: bool = False) -> dict[str, Any] | None:
        stmt = select(latency_models.c.state).where(latency_models.c.name == name)
        row = (await self._conn.execute(stmt.with_for_update() if for_update else stmt)).first()
        return row.state if row else None

    async def save_latency_model(self, name: str, state: Mapping[str, Any]) -> None:
        stmt = insert(latency_models).values(name=name, state=dict(state), windows=1)
        await self._conn.execute(stmt.on_conflict_do_update(index_elements=[latency_models.c.name], set_={
            "state": stmt.excluded.state, "windows": latency_models.c.windows + 1, "updated_at": func.now()}))

    async def co_runners(self, cluster: str, node: str, gpu_index: int, *, exclude_uid: str) -> list[Row]:
        """The other pods holding this GPU, with what the latency model needs of them."""
        result = await self._conn.execute(
            select(pods.c.uid, pods.c.frame_rate_hz, pods.c.workload, pods.c.deadline_ms)
            .join(allocations, and_(pods.c.cluster == allocations.c.cluster, pods.c.uid == allocations.c.pod_uid))
            .where(allocations.c.cluster == cluster, allocations.c.node == node,
                   allocations.c.gpu_index == gpu_index, pods.c.uid != exclude_uid))
        return as_rows(result)

    async def gpu_of_pod(self, cluster: str, namespace: str, name: str) -> Row | None:
        result = await self._conn.execute(
            select(allocations.c.node, allocations.c.gpu_index, pods.c.uid, pods.c.deadline_ms, pods.c.frame_rate_hz,
                   pods.c.workload, gpus.c.model)
            .join(gpus, and_(gpus.c.cluster == allocations.c.cluster, gpus.c.node == allocations.c.node,
                             gpus.c.index == allocations.c.gpu_index))
            .join(pods, and_(pods.c.cluster == allocations.c.cluster, pods.c.uid == allocations.c.pod_uid))
            .where(pods.c.cluster == cluster, pods.c.namespace == namespace, pods.c.name == name,
                   pods.c.state.in_(PLACED)).limit(1))
        row = result.first()
        return as_row(row) if row else None


__all__ = ["LatencyRepository"]
