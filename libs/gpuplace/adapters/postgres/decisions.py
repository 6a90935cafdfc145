"""The decisions recorded about pods (decisions).

Every method runs inside the caller's transaction (unit_of_work.py); the port is usecases.repositories.Decisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert

from gpuplace.adapters.postgres.repository import PostgresRepository, as_typed
from gpuplace.adapters.postgres.tables import decisions
from gpuplace.usecases.ports import DecisionRow


class DecisionRepository(PostgresRepository):
    """usecases.repositories.Decisions on the unit of work's connection."""

    async def add_decisions(self, decisions_: Sequence[Mapping[str, Any]]) -> None:
        if decisions_:
            await self._conn.execute(insert(decisions), [dict(d) for d in decisions_])

    async def decisions_of(self, cluster: str, pod_uid: str) -> list[DecisionRow]:
        """The pod's decisions, oldest first (index decisions_by_pod); within one transaction in no set order."""
        result = await self._conn.execute(select(decisions).where(
            decisions.c.cluster == cluster, decisions.c.pod_uid == pod_uid).order_by(decisions.c.created_at))
        return as_typed(result, DecisionRow)

    async def decisions_with_reason(self, cluster: str, kind: str, key: str, value: str) -> list[DecisionRow]:
        """Decisions of `kind` with reasons[key] == value: a scan of the cluster's decisions of that kind, for the
        rare question `gpuplace explain` asks (who adopted a promise), not for a hot path."""
        result = await self._conn.execute(select(decisions).where(
            decisions.c.cluster == cluster, decisions.c.kind == kind, decisions.c.reasons[key].astext == value)
            .order_by(decisions.c.created_at))
        return as_typed(result, DecisionRow)

    async def count_bound_twice(self, cluster: str) -> int:
        """Pods with more than one `bound` decision: must always be zero."""
        twice = select(decisions.c.pod_uid).where(decisions.c.cluster == cluster, decisions.c.kind == "bound") \
            .group_by(decisions.c.pod_uid).having(func.count() > 1).subquery()
        return int((await self._conn.execute(select(func.count()).select_from(twice))).scalar_one())


__all__ = ["DecisionRepository"]
