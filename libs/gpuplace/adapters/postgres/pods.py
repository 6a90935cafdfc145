"""Pods and their lifecycle (pods); a state move is an UPDATE guarded by pod_states.

Every method runs inside the caller's transaction (unit_of_work.py); the port is usecases.repositories.Pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert

from gpuplace.adapters.postgres.repository import PostgresRepository, as_pod_row, as_typed
from gpuplace.adapters.postgres.tables import pods
from gpuplace.usecases.pod_states import PodState, check, check_initial, sources
from gpuplace.usecases.ports import PodRow


class PodRepository(PostgresRepository):
    """usecases.repositories.Pods on the unit of work's connection."""

    async def upsert_pod(self, pod: Mapping[str, Any]) -> PodRow:
        """Insert a pod seen for the first time, or refresh its request; returns the stored row.

        The pod's `state` is only set on insert: after that it moves through reserve/bind/release.
        """
        check_initial(pod["state"])
        stmt = insert(pods).values(**pod)
        refresh = {k: stmt.excluded[k] for k in pod if k not in ("cluster", "uid", "state", "node", "reason")}
        result = await self._conn.execute(stmt.on_conflict_do_update(
            index_elements=[pods.c.cluster, pods.c.uid], set_=refresh).returning(*pods.c))
        return as_pod_row(result.one())

    async def upsert_pods(self, pods_: Sequence[Mapping[str, Any]]) -> list[PodRow]:
        if not pods_:
            return []
        for pod in pods_:
            check_initial(pod["state"])
        stmt = insert(pods)
        refresh = {k: stmt.excluded[k] for k in pods_[0] if k not in ("cluster", "uid", "state", "node", "reason")}
        result = await self._conn.execute(stmt.on_conflict_do_update(
            index_elements=[pods.c.cluster, pods.c.uid], set_=refresh).returning(*pods.c), [dict(p) for p in pods_])
        stored = {(row["cluster"], row["uid"]): row for row in as_typed(result, PodRow)}
        return [stored[(pod["cluster"], pod["uid"])] for pod in pods_]

    async def get_pod(self, cluster: str, uid: str, *, for_update: bool = False) -> PodRow | None:
        stmt = select(pods).where(pods.c.cluster == cluster, pods.c.uid == uid)
        result = await self._conn.execute(stmt.with_for_update() if for_update else stmt)
        row = result.first()
        return as_pod_row(row) if row else None

    async def set_pod_state(self, cluster: str, uid: str, state: PodState, *, mark_bound: bool = False,
                            **fields: Any) -> None:
        """Move a pod to `state`; `mark_bound` stamps bound_at with the database's clock. The UPDATE is guarded
        by the states that may move there (pod_states.sources), so a pod that moved meanwhile is not written
        over; only then is the pod read again, to say which move was refused."""
        if mark_bound:
            fields["bound_at"] = func.now()
        if state is PodState.RESERVED:
            fields["reserved_at"] = func.now()
        moved = await self._conn.execute(update(pods).where(
            pods.c.cluster == cluster, pods.c.uid == uid, pods.c.state.in_(sources(state))).values(
            state=state, **fields).returning(pods.c.uid))
        if moved.first() is None and (current := await self.get_pod(cluster, uid)) is not None:
            check(current["state"], state)

    async def pods_in_state(self, cluster: str, states: Sequence[PodState]) -> list[PodRow]:
        result = await self._conn.execute(select(pods).where(
            pods.c.cluster == cluster, pods.c.state.in_(states)).order_by(pods.c.first_seen_at))
        return as_typed(result, PodRow)

    async def find_pods(self, name: str, *, namespace: str | None = None, cluster: str | None = None) -> list[PodRow]:
        """Pods by name, newest first; with a cluster, served by the index pods_by_name."""
        query = select(pods).where(pods.c.name == name)
        if namespace is not None:
            query = query.where(pods.c.namespace == namespace)
        if cluster is not None:
            query = query.where(pods.c.cluster == cluster)
        result = await self._conn.execute(query.order_by(pods.c.first_seen_at.desc(), pods.c.cluster, pods.c.uid))
        return as_typed(result, PodRow)

    async def count_pods_by_state(self, clusters: Sequence[str]) -> dict[str, int]:
        """gpuplace's own pods by state (other schedulers' pods, only charged, are not counted)."""
        result = await self._conn.execute(select(pods.c.state, func.count()).where(
            pods.c.cluster.in_(clusters), pods.c.managed).group_by(pods.c.state))
        return {state: int(n) for state, n in result.all()}

    async def find_promise(self, cluster: str, namespace: str, owner: str) -> PodRow | None:
        """The oldest place promised to a replacement pod of `owner` (FOR UPDATE: one adopter wins)."""
        result = await self._conn.execute(select(pods).where(
            pods.c.cluster == cluster, pods.c.namespace == namespace, pods.c.owner == owner,
            pods.c.state == PodState.PROMISED).order_by(pods.c.first_seen_at, pods.c.uid).limit(1)
            .with_for_update(skip_locked=True))
        row = result.first()
        return as_pod_row(row) if row else None

    async def delete_pod(self, cluster: str, uid: str) -> None:
        await self._conn.execute(delete(pods).where(pods.c.cluster == cluster, pods.c.uid == uid))

    async def mark_bound(self, cluster: str, uids: Sequence[str]) -> list[str]:
        if not uids:
            return []
        result = await self._conn.execute(update(pods).where(
            pods.c.cluster == cluster, pods.c.uid.in_(uids), pods.c.state == PodState.RESERVED,
        ).values(state=PodState.BOUND, bound_at=func.now()).returning(pods.c.uid))
        return list(result.scalars())


__all__ = ["PodRepository"]
