"""Nodes and their GPUs (nodes, gpus).

Every method runs inside the caller's transaction (unit_of_work.py); the port is usecases.repositories.Nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert

from gpuplace.adapters.postgres.repository import PostgresRepository, as_typed, holders
from gpuplace.adapters.postgres.tables import gpus, nodes, pods
from gpuplace.usecases.ports import GpuRow, NodeRow


def _per_gpu(node: Mapping[str, Any], key: str) -> list[int | None]:
    """A node's per-GPU topology list, or None per GPU where the node does not describe it."""
    values = node.get(key) or []
    return list(values) if len(values) == node["gpu_count"] else [None] * node["gpu_count"]



class NodeRepository(PostgresRepository):
    """usecases.repositories.Nodes on the unit of work's connection."""

    async def upsert_node(self, node: Mapping[str, Any]) -> list[int]:
        """Insert or update a node and make its GPU rows match `gpu_count` (GPUs past it go, with their grants);
        `gpu_numa` / `gpu_nvlink`, when given, per GPU index (else NULL: not described)."""
        values = {k: node[k] for k in ("cluster", "name", "region", "cpu_milli", "memory_mib", "gpu_model",
                                       "gpu_count", "gpu_memory_mib", "ready", "unschedulable", "labels", "taints")}
        values.update(max_pods=node.get("max_pods"), extended=node.get("extended") or {}, absent_since=None)
        stmt = insert(nodes).values(**values)
        updates = {k: stmt.excluded[k] for k in values if k not in ("cluster", "name")}
        await self._conn.execute(stmt.on_conflict_do_update(
            index_elements=[nodes.c.cluster, nodes.c.name], set_={**updates, "updated_at": func.now()}))
        if node["gpu_count"]:
            numa, nvlink = _per_gpu(node, "gpu_numa"), _per_gpu(node, "gpu_nvlink")
            gpu_rows = [{"cluster": node["cluster"], "node": node["name"], "index": i, "model": node["gpu_model"],
                         "memory_total_mib": node["gpu_memory_mib"], "memory_reported_mib": node["gpu_memory_mib"],
                         "numa_node": numa[i], "nvlink_domain": nvlink[i]} for i in range(node["gpu_count"])]
            gstmt = insert(gpus).values(gpu_rows)
            await self._conn.execute(gstmt.on_conflict_do_update(
                index_elements=[gpus.c.cluster, gpus.c.node, gpus.c.index],
                set_={"model": gstmt.excluded.model, "memory_reported_mib": gstmt.excluded.memory_reported_mib,
                      "memory_total_mib": func.greatest(gstmt.excluded.memory_total_mib, gpus.c.memory_assigned_mib),
                      "numa_node": gstmt.excluded.numa_node, "nvlink_domain": gstmt.excluded.nvlink_domain}))
        await self._conn.execute(delete(gpus).where(
            gpus.c.cluster == node["cluster"], gpus.c.node == node["name"], gpus.c.index >= node["gpu_count"]))
        short = await self._conn.execute(select(gpus.c.index).where(
            gpus.c.cluster == node["cluster"], gpus.c.node == node["name"],
            gpus.c.memory_reported_mib < gpus.c.memory_assigned_mib).order_by(gpus.c.index))
        return [int(r[0]) for r in short]

    async def delete_node(self, cluster: str, name: str) -> list[str]:
        """Remove a node, or keep it absent while pods hold resources there (the port says why)."""
        uids = await holders(self._conn, cluster, name)
        if uids:
            await self._conn.execute(update(nodes).where(nodes.c.cluster == cluster, nodes.c.name == name).values(
                absent_since=func.coalesce(nodes.c.absent_since, func.now())))
        else:
            await self._conn.execute(delete(nodes).where(nodes.c.cluster == cluster, nodes.c.name == name))
        return uids

    async def record_telemetry(self, cluster: str, node: str, index: int, **observed: Any) -> bool:
        """Store a GPU's observed memory/utilisation/health; False when the GPU is not in the inventory."""
        result = await self._conn.execute(update(gpus).where(
            gpus.c.cluster == cluster, gpus.c.node == node, gpus.c.index == index,
        ).values(**observed, telemetry_at=func.now()).returning(gpus.c.index))
        return result.first() is not None

    async def load_nodes(self, cluster: str) -> list[NodeRow]:
        result = await self._conn.execute(select(nodes).where(nodes.c.cluster == cluster).order_by(nodes.c.name))
        return as_typed(result, NodeRow)

    async def load_gpus(self, cluster: str) -> list[GpuRow]:
        result = await self._conn.execute(
            select(gpus).where(gpus.c.cluster == cluster).order_by(gpus.c.node, gpus.c.index))
        return as_typed(result, GpuRow)

    async def cluster_names(self) -> list[str]:
        result = await self._conn.execute(select(nodes.c.cluster).union(select(pods.c.cluster)))
        return sorted(str(name) for name in result.scalars())


__all__ = ["NodeRepository"]
