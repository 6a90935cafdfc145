"""What the PostgreSQL repositories share: the unit of work's connection, and result rows as the ports' rows.

Each repository (one per aggregate, usecases/repositories.py) is built by PostgresUnitOfWork on its one
connection, so all of them run in its one transaction: none opens a transaction or a connection of its own.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from sqlalchemy import Result, select
from sqlalchemy import Row as SqlRow
from sqlalchemy.ext.asyncio import AsyncConnection

from gpuplace.adapters.postgres.tables import allocations, pods
from gpuplace.usecases.pod_states import HOLDING
from gpuplace.usecases.ports import PodRow, Row

_T = TypeVar("_T")


class PostgresRepository:
    """A repository on the unit of work's connection (and so in its transaction)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn


def as_row(result_row: SqlRow[*tuple[Any, ...]]) -> Row:
    """A result row as the port's Row: its RowMapping, keyed by column name (SQLAlchemy types the keys wider)."""
    return cast(Row, result_row._mapping)


def as_rows(result: Result[Any]) -> list[Row]:
    return [as_row(r) for r in result]


def as_typed(result: Result[Any], row_type: type[_T]) -> list[_T]:
    """Result rows as one of the port's typed rows (NodeRow, ...): their RowMappings, whose keys are the columns
    the TypedDict names (tables.py and ports.py declare them side by side; the contract suite reads them)."""
    return [cast(_T, r._mapping) for r in result]


def as_pod_row(result_row: SqlRow[*tuple[Any, ...]]) -> PodRow:
    """A pods row as the port's PodRow (the columns tables.pods declares)."""
    return cast(PodRow, result_row._mapping)


async def holders(conn: AsyncConnection, cluster: str, name: str) -> list[str]:
    """The pods holding resources on a node: GPU grants there, or a reserved/bound/promised row naming it. Both
    a node leaving (NodeRepository.delete_node) and its last holder going (AllocationRepository.release) ask."""
    held = await conn.execute(
        select(allocations.c.pod_uid).where(allocations.c.cluster == cluster, allocations.c.node == name)
        .union(select(pods.c.uid).where(pods.c.cluster == cluster, pods.c.node == name, pods.c.state.in_(HOLDING))))
    return sorted(r[0] for r in held)


__all__ = ["PostgresRepository", "as_pod_row", "as_row", "as_rows", "as_typed", "holders"]
