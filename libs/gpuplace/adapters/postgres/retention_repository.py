"""SQL for retention (ports.RetentionStore): prune the oldest rows of a kept table, a batch per transaction.

Each batch selects its rows by the table's age index (migration 0011) with FOR UPDATE SKIP LOCKED, so it never
waits for a row a placement or the outbox relay holds (that row is simply left for a later round), and deletes
them by key in the same statement. `lock_timeout` bounds any other wait (a table lock taken by a migration): the
batch fails and the round ends, rather than queueing placements behind it.

The cut-off is computed by PostgreSQL (`now()` less the age kept), the clock that stamped the rows, and recorded
in `retention_marks` whenever rows went, for `gpuplace explain` to say what may be gone.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from gpuplace.adapters.postgres.tables import retention_marks
from gpuplace.usecases.ports import Retained

LOCK_TIMEOUT = "500ms"  # the longest a batch waits for a lock before giving up its round
# One pruner at a time per schema (tests keep schemas side by side in one database): a transaction-scoped lock,
# so a pruner that dies mid-batch frees it with its connection.
_TURN = text("SELECT pg_try_advisory_xact_lock(hashtext('gpuplace.retention:' || current_schema()))")

# kind -> (table, its key columns, the age column, extra condition); rows older than the cut-off, oldest first
_KINDS: dict[Retained, tuple[str, str, str, str]] = {
    Retained.PROCESSED_EVENTS: ("processed_events", "consumer, event_id", "processed_at", "TRUE"),
    # in id order: published rows are the old ones, and the primary key is the index there is
    Retained.OUTBOX: ("outbox", "id", "id", "published_at IS NOT NULL AND published_at < cutoff.at"),
    Retained.DECISIONS: ("decisions", "id", "created_at", "TRUE"),
    Retained.LATENCY_WINDOWS: ("latency_windows", "id", "window_end", "TRUE"),
    Retained.DELETED_PODS: ("pods", "cluster, uid", "first_seen_at",
                            "state = 'deleted' AND NOT EXISTS (SELECT 1 FROM allocations a "
                            "WHERE a.cluster = t.cluster AND a.pod_uid = t.uid)"),
}


def _prune_sql(kind: Retained) -> str:
    table, key, age, condition = _KINDS[kind]
    older = "TRUE" if kind is Retained.OUTBOX else f"t.{age} < cutoff.at"
    return f"""
        WITH cutoff AS (SELECT now() - make_interval(secs => :keep_s) AS at),
        old AS (SELECT {key} FROM {table} t, cutoff WHERE {older} AND {condition}
                ORDER BY t.{age} LIMIT :limit FOR UPDATE OF t SKIP LOCKED),
        gone AS (DELETE FROM {table} WHERE ({key}) IN (SELECT {key} FROM old) RETURNING 1)
        SELECT (SELECT count(*) FROM gone) AS n, (SELECT at FROM cutoff) AS at"""


_PRUNE = {kind: text(_prune_sql(kind)) for kind in Retained}
_MARK = text("""
    INSERT INTO retention_marks (name, pruned_before, rows_pruned) VALUES (:name, :at, :n)
    ON CONFLICT (name) DO UPDATE SET pruned_before = GREATEST(retention_marks.pruned_before, excluded.pruned_before),
        rows_pruned = retention_marks.rows_pruned + excluded.rows_pruned, pruned_at = now()""")


class RetentionRepository:
    """ports.RetentionStore on one PostgreSQL transaction (the unit of work's connection)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def take_pruning_turn(self) -> bool:
        return bool((await self._conn.execute(_TURN)).scalar())

    async def prune(self, kind: Retained, keep_s: float, limit: int) -> int:
        if keep_s < 0 or limit < 1:
            raise ValueError(f"prune {kind}: keep_s must be >= 0 and limit >= 1 (got {keep_s}, {limit})")
        await self._conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        row = (await self._conn.execute(_PRUNE[kind], {"keep_s": float(keep_s), "limit": int(limit)})).one()
        if row.n:
            await self._conn.execute(_MARK, {"name": kind.value, "at": row.at, "n": row.n})
        return int(row.n)

    async def pruned_before(self, kind: Retained) -> datetime | None:
        query = select(retention_marks.c.pruned_before).where(retention_marks.c.name == kind.value)
        return (await self._conn.execute(query)).scalar()


__all__ = ["LOCK_TIMEOUT", "RetentionRepository"]
