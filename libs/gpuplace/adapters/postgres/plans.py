"""Defragmentation plans and their moves (defrag_plans, defrag_moves).

Every method runs inside the caller's transaction (unit_of_work.py); the port is usecases.repositories.Plans.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from sqlalchemy import Row as SqlRow
from sqlalchemy import and_, func, select, update
from sqlalchemy.dialects.postgresql import insert

from gpuplace.adapters.postgres.repository import PostgresRepository
from gpuplace.adapters.postgres.tables import defrag_moves, defrag_plans
from gpuplace.usecases.ports import DefragPlanRecord, PlannedMove, PlanState

_MOVE_FIELDS = tuple(f.name for f in fields(PlannedMove))  # defrag_moves' columns that a PlannedMove holds


class PlanRepository(PostgresRepository):
    """usecases.repositories.Plans on the unit of work's connection."""

    async def add_plan(self, plan: DefragPlanRecord) -> None:
        await self._conn.execute(insert(defrag_plans).values(
            cluster=plan.cluster, plan_id=plan.plan_id, beneficiary_uid=plan.beneficiary_uid, state=plan.state))
        if plan.moves:
            await self._conn.execute(insert(defrag_moves), [
                {"cluster": plan.cluster, "plan_id": plan.plan_id, "seq": i, **asdict(m),
                 "from_gpu_indices": list(m.from_gpu_indices)} for i, m in enumerate(plan.moves)])

    async def open_plans(self, cluster: str) -> list[DefragPlanRecord]:
        result = await self._conn.execute(select(defrag_plans).where(
            defrag_plans.c.cluster == cluster, defrag_plans.c.state == PlanState.PLANNED)
            .order_by(defrag_plans.c.planned_at, defrag_plans.c.plan_id))
        return [await self._plan(row) for row in result.all()]

    async def plan_state(self, cluster: str, plan_id: str) -> PlanState | None:
        state = await self._conn.scalar(select(defrag_plans.c.state).where(
            defrag_plans.c.cluster == cluster, defrag_plans.c.plan_id == plan_id))
        return PlanState(state) if state else None

    async def settle_plan(self, cluster: str, plan_id: str, state: PlanState, reason: str | None = None) -> bool:
        """One conditional UPDATE: the row lock makes a second settler wait, then find the plan settled."""
        settled = await self._conn.execute(update(defrag_plans).where(
            defrag_plans.c.cluster == cluster, defrag_plans.c.plan_id == plan_id,
            defrag_plans.c.state == PlanState.PLANNED)
            .values(state=state, reason=reason, settled_at=func.now()).returning(defrag_plans.c.plan_id))
        return settled.first() is not None

    async def plan_moving(self, cluster: str, uid: str) -> DefragPlanRecord | None:
        """Index defrag_moves_by_pod; a pod moved again later is in a later plan."""
        row = (await self._conn.execute(select(defrag_plans).join(defrag_moves, and_(
            defrag_moves.c.cluster == defrag_plans.c.cluster, defrag_moves.c.plan_id == defrag_plans.c.plan_id))
            .where(defrag_moves.c.cluster == cluster, defrag_moves.c.uid == uid)
            .order_by(defrag_plans.c.planned_at.desc()).limit(1))).first()
        return await self._plan(row) if row else None

    async def _plan(self, row: SqlRow[*tuple[Any, ...]]) -> DefragPlanRecord:
        moves = await self._conn.execute(select(*(defrag_moves.c[f] for f in _MOVE_FIELDS)).where(
            defrag_moves.c.cluster == row.cluster, defrag_moves.c.plan_id == row.plan_id)
            .order_by(defrag_moves.c.seq))
        return DefragPlanRecord(
            cluster=row.cluster, plan_id=row.plan_id, beneficiary_uid=row.beneficiary_uid,
            state=PlanState(row.state), reason=row.reason,
            moves=tuple(PlannedMove(**{**m._mapping, "from_gpu_indices": tuple(m.from_gpu_indices)})
                        for m in moves))


__all__ = ["PlanRepository"]
