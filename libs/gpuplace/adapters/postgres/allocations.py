"""What pods hold (allocations) and the capacity it charges on nodes and GPUs.

Capacity is checked by the
database itself: `reserve()` adds to a GPU's assigned memory only where the sum stays within capacity,
and fails the whole reservation otherwise, so concurrent placement workers cannot over-commit a GPU.

Every method runs inside the caller's transaction (unit_of_work.py); the port is usecases.repositories.Allocations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.dialects.postgresql import insert

from gpuplace.adapters.postgres.repository import PostgresRepository, as_rows, as_typed, holders
from gpuplace.adapters.postgres.tables import allocations, gpus, nodes, pods
from gpuplace.usecases.pod_states import HOLDING, WAITING
from gpuplace.usecases.ports import AllocationRow, GpuGrant, Reservation, Row

# A batch's reservations (reserve_many), as arrays unnested into rows: one plan whatever the batch's size.
_RESERVE_NODES = text("""
    UPDATE nodes SET cpu_assigned_milli = nodes.cpu_assigned_milli + want.cpu,
                     memory_assigned_mib = nodes.memory_assigned_mib + want.mem
    FROM unnest(CAST(:names AS text[]), CAST(:cpus AS bigint[]), CAST(:mems AS bigint[])) AS want(name, cpu, mem)
    WHERE nodes.cluster = :cluster AND nodes.name = want.name
      AND nodes.cpu_assigned_milli + want.cpu <= nodes.cpu_milli
      AND nodes.memory_assigned_mib + want.mem <= nodes.memory_mib
    RETURNING nodes.name""")
_RESERVE_GPUS = text("""
    UPDATE gpus SET memory_assigned_mib = gpus.memory_assigned_mib + want.mem,
                    share_assigned_milli = gpus.share_assigned_milli + want.share
    FROM unnest(CAST(:nodes AS text[]), CAST(:idx AS int[]), CAST(:mems AS bigint[]), CAST(:shares AS bigint[]))
         AS want(node, idx, mem, share)
    WHERE gpus.cluster = :cluster AND gpus.node = want.node AND gpus.index = want.idx
      AND gpus.memory_assigned_mib + want.mem <= gpus.memory_total_mib
      AND gpus.share_assigned_milli + want.share <= 1000
    RETURNING gpus.node, gpus.index""")
_MARK_RESERVED = text("""
    UPDATE pods SET state = 'reserved', node = placed.node, reason = NULL, reserved_at = now()
    FROM unnest(CAST(:uids AS text[]), CAST(:nodes AS text[])) AS placed(uid, node)
    WHERE pods.cluster = :cluster AND pods.uid = placed.uid AND pods.state = ANY(CAST(:waiting AS text[]))
    RETURNING pods.uid""")



class AllocationRepository(PostgresRepository):
    """usecases.repositories.Allocations on the unit of work's connection."""

    async def transfer_allocations(self, cluster: str, from_uid: str, to_uid: str) -> list[Row]:
        """Give `from_uid`'s GPUs to `to_uid` (a promise adopted); returns the moved grants."""
        result = await self._conn.execute(update(allocations).where(
            allocations.c.cluster == cluster, allocations.c.pod_uid == from_uid).values(pod_uid=to_uid)
            .returning(allocations.c.node, allocations.c.gpu_index, allocations.c.memory_mib,
                       allocations.c.share_milli))
        return as_rows(result)

    async def load_allocations(self, cluster: str) -> list[AllocationRow]:
        result = await self._conn.execute(select(allocations).where(allocations.c.cluster == cluster))
        return as_typed(result, AllocationRow)

    async def reserve(self, *, cluster: str, pod_uid: str, node: str, grants: Iterable[GpuGrant],
                      cpu_milli: int, memory_mib: int, decision_id: str) -> str | None:
        """Take `grants` on `node` for the pod; None on success, else why it no longer fits.

        On a refusal the transaction holds partial updates: the caller must roll back (not commit).
        """
        node_ok = await self._conn.execute(update(nodes).where(
            nodes.c.cluster == cluster, nodes.c.name == node,
            nodes.c.cpu_assigned_milli + cpu_milli <= nodes.c.cpu_milli,
            nodes.c.memory_assigned_mib + memory_mib <= nodes.c.memory_mib,
        ).values(cpu_assigned_milli=nodes.c.cpu_assigned_milli + cpu_milli,
                 memory_assigned_mib=nodes.c.memory_assigned_mib + memory_mib).returning(nodes.c.name))
        if node_ok.first() is None:
            return f"node {node}: CPU or memory no longer fits"
        taken = []
        for g in grants:
            if not await self._take_gpu(cluster, node, g):
                return f"node {node} GPU {g.index}: no longer has {g.memory_mib} MiB free"
            taken.append(g)
        await self._allocate(cluster, pod_uid, node, taken, decision_id)
        return None

    async def reserve_many(self, cluster: str, reservations: Sequence[Reservation]) -> str | None:
        """reserve() for a batch in four statements, whatever its size: what the batch adds per node and per GPU
        is added where it still fits (UPDATE ... FROM unnest(arrays), the capacity checked row by row as
        reserve() checks it), and a row that did not fit refuses the whole batch; then the grants, and the pods'
        new state. Arrays, not a VALUES list, so each statement is compiled once and its plan cached."""
        if not reservations:
            return None
        per_node: dict[str, list[int]] = {}
        per_gpu: dict[tuple[str, int], list[int]] = {}
        for r in reservations:
            want = per_node.setdefault(r.node, [0, 0])
            want[0] += r.cpu_milli
            want[1] += r.memory_mib
            for g in r.grants:
                gpu = per_gpu.setdefault((r.node, g.index), [0, 0])
                gpu[0] += g.memory_mib
                gpu[1] += g.share_milli
        fitted = set((await self._conn.execute(_RESERVE_NODES, {
            "cluster": cluster, "names": list(per_node), "cpus": [c for c, _ in per_node.values()],
            "mems": [m for _, m in per_node.values()]})).scalars())
        if len(fitted) < len(per_node):
            return f"node {min(set(per_node) - fitted)}: CPU or memory no longer fits"
        if per_gpu:
            taken = (await self._conn.execute(_RESERVE_GPUS, {
                "cluster": cluster, "nodes": [n for n, _ in per_gpu], "idx": [i for _, i in per_gpu],
                "mems": [m for m, _ in per_gpu.values()], "shares": [s for _, s in per_gpu.values()]})).all()
            if len(taken) < len(per_gpu):
                node, index = min(set(per_gpu) - {(t.node, t.index) for t in taken})
                return f"node {node} GPU {index}: no longer has the memory the batch asks of it"
            await self._conn.execute(insert(allocations), [
                {"cluster": cluster, "pod_uid": r.pod_uid, "gpu_index": g.index, "node": r.node,
                 "memory_mib": g.memory_mib, "share_milli": g.share_milli, "decision_id": r.decision_id}
                for r in reservations for g in r.grants])
        marked = set((await self._conn.execute(_MARK_RESERVED, {
            "cluster": cluster, "uids": [r.pod_uid for r in reservations], "nodes": [r.node for r in reservations],
            "waiting": [s.value for s in WAITING]})).scalars())
        if len(marked) < len(reservations):
            return f"pod {min({r.pod_uid for r in reservations} - marked)} is no longer waiting"
        return None

    async def charge_bound(self, *, cluster: str, pod_uid: str, node: str, grants: Iterable[GpuGrant],
                           cpu_milli: int, memory_mib: int, decision_id: str) -> list[int]:
        """Charge a pod another scheduler bound: its CPU and memory always (the node runs it, whatever gpuplace
        thought was free), each GPU grant only where the GPU still has room; returns the GPU indices refused."""
        await self._conn.execute(update(nodes).where(nodes.c.cluster == cluster, nodes.c.name == node).values(
            cpu_assigned_milli=nodes.c.cpu_assigned_milli + cpu_milli,
            memory_assigned_mib=nodes.c.memory_assigned_mib + memory_mib))
        taken: list[GpuGrant] = []
        refused: list[GpuGrant] = []
        for g in grants:
            (taken if await self._take_gpu(cluster, node, g) else refused).append(g)
        await self._allocate(cluster, pod_uid, node, taken, decision_id)
        return [g.index for g in refused]

    async def _take_gpu(self, cluster: str, node: str, grant: GpuGrant) -> bool:
        """Add `grant` to its GPU's assigned share and memory, only where both stay within capacity."""
        ok = await self._conn.execute(update(gpus).where(
            gpus.c.cluster == cluster, gpus.c.node == node, gpus.c.index == grant.index,
            gpus.c.memory_assigned_mib + grant.memory_mib <= gpus.c.memory_total_mib,
            gpus.c.share_assigned_milli + grant.share_milli <= 1000,
        ).values(memory_assigned_mib=gpus.c.memory_assigned_mib + grant.memory_mib,
                 share_assigned_milli=gpus.c.share_assigned_milli + grant.share_milli).returning(gpus.c.index))
        return ok.first() is not None

    async def _allocate(self, cluster: str, pod_uid: str, node: str, grants: Sequence[GpuGrant],
                        decision_id: str) -> None:
        if grants:  # a pod without GPUs takes CPU and memory only
            await self._conn.execute(insert(allocations).values([
                {"cluster": cluster, "pod_uid": pod_uid, "gpu_index": g.index, "node": node,
                 "memory_mib": g.memory_mib, "share_milli": g.share_milli, "decision_id": decision_id}
                for g in grants]))

    async def release(self, cluster: str, pod_uid: str, *, cpu_milli: int, memory_mib: int) -> str | None:
        """Give back everything the pod holds; returns the node it held, None if it held nothing.

        A pod without GPUs holds CPU and memory on the node its row names (reserved or bound)."""
        held = await self._conn.execute(delete(allocations).where(
            allocations.c.cluster == cluster, allocations.c.pod_uid == pod_uid,
        ).returning(allocations.c.node, allocations.c.gpu_index, allocations.c.memory_mib, allocations.c.share_milli))
        grants = held.all()
        for g in grants:  # a GPU that reports less than was held comes down towards its report (upsert_node)
            await self._conn.execute(update(gpus).where(
                gpus.c.cluster == cluster, gpus.c.node == g.node, gpus.c.index == g.gpu_index,
            ).values(memory_assigned_mib=gpus.c.memory_assigned_mib - g.memory_mib,
                     share_assigned_milli=gpus.c.share_assigned_milli - g.share_milli,
                     memory_total_mib=func.greatest(func.coalesce(gpus.c.memory_reported_mib, gpus.c.memory_total_mib),
                                                    gpus.c.memory_assigned_mib - g.memory_mib)))
        node: str | None = grants[0].node if grants else await self._conn.scalar(select(pods.c.node).where(
            pods.c.cluster == cluster, pods.c.uid == pod_uid, pods.c.state.in_(HOLDING)))
        if node is None:
            return None
        absent = await self._conn.scalar(update(nodes).where(nodes.c.cluster == cluster, nodes.c.name == node).values(
            cpu_assigned_milli=nodes.c.cpu_assigned_milli - cpu_milli,
            memory_assigned_mib=nodes.c.memory_assigned_mib - memory_mib).returning(nodes.c.absent_since))
        if absent is not None and not set(await holders(self._conn, cluster, node)) - {pod_uid}:
            await self._conn.execute(delete(nodes).where(nodes.c.cluster == cluster, nodes.c.name == node))
        return node


__all__ = ["AllocationRepository"]
