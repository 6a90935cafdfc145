"""PostgreSQL smoke tests: asyncpg round-trips a row through the migrated schema, SQLAlchemy's async engine a
query, and the Alembic migrations go up to head and down to base on a database created for the test."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from gpuplace.adapters.postgres import migrate

from .conftest import asyncpg_dsn, unique_name

pytestmark = pytest.mark.integration

# Tables DESIGN §5 names; the migrations may hold more.
STATE_TABLES = {"nodes", "gpus", "pods", "allocations", "decisions", "defrag_plans", "defrag_moves", "outbox",
                "processed_events", "retention_marks"}


async def _tables(dsn: str) -> set[str]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {row["tablename"] for row in rows}
    finally:
        await connection.close()


async def test_asyncpg_round_trips_a_gpu_row_through_the_migrated_schema(database_url: str) -> None:
    # asyncpg on the stack's PostgreSQL, in a schema of its own migrated to head: the state tables are there,
    # a node and its GPU go in and come back with their types, and the CHECK that keeps a GPU from being
    # over-committed refuses a write past its memory.
    schema = unique_name("smoke").replace("-", "_")
    await migrate.upgrade_async(database_url, schema=schema)
    connection = await asyncpg.connect(asyncpg_dsn(database_url), server_settings={"search_path": schema})
    try:
        assert int(await connection.fetchval("SHOW server_version_num")) >= 140000
        head = ScriptDirectory.from_config(migrate.alembic_config(database_url)).get_current_head()
        assert await connection.fetchval("SELECT version_num FROM alembic_version") == head
        rows = await connection.fetch("SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)
        assert STATE_TABLES <= {row["tablename"] for row in rows}

        await connection.execute(
            "INSERT INTO nodes (cluster, name, region, cpu_milli, memory_mib, gpu_model, gpu_count, gpu_memory_mib,"
            " ready, unschedulable, labels) VALUES ('east', 'n1', 'eu', 64000, 262144, 'A100', 1, 40960, true,"
            " false, $1::jsonb)", json.dumps({"zone": "a"}))
        await connection.execute(
            "INSERT INTO gpus (cluster, node, index, model, memory_total_mib, memory_assigned_mib,"
            " share_assigned_milli) VALUES ('east', 'n1', 0, 'A100', 40960, 9420, 230)")
        row = await connection.fetchrow(
            "SELECT n.cpu_milli, n.ready, n.labels, g.memory_assigned_mib, g.share_assigned_milli, g.healthy"
            " FROM nodes n JOIN gpus g ON (g.cluster, g.node) = (n.cluster, n.name)")
        assert (row["cpu_milli"], row["ready"], json.loads(row["labels"])) == (64000, True, {"zone": "a"})
        assert (row["memory_assigned_mib"], row["share_assigned_milli"], row["healthy"]) == (9420, 230, True)
        with pytest.raises(asyncpg.CheckViolationError, match="gpu_memory_fits"):
            await connection.execute("UPDATE gpus SET memory_assigned_mib = memory_total_mib + 1")
    finally:
        await connection.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await connection.close()


async def test_sqlalchemy_async_round_trip(database_url: str) -> None:
    engine = create_async_engine(database_url)
    try:
        async with engine.begin() as connection:
            await connection.execute(text("CREATE TEMPORARY TABLE smoke (id int PRIMARY KEY, memory_mib int)"))
            await connection.execute(text("INSERT INTO smoke VALUES (1, 9420), (2, 6860)"))
            total = await connection.scalar(text("SELECT sum(memory_mib) FROM smoke"))
        assert total == 9420 + 6860
    finally:
        await engine.dispose()


async def test_migrations_upgrade_to_head_and_downgrade_to_base(fresh_database: str) -> None:
    dsn = asyncpg_dsn(fresh_database)
    # Alembic's env.py runs its own event loop (asyncio.run), so it runs in a worker thread here.
    await asyncio.to_thread(migrate.upgrade, fresh_database, "head")
    after_upgrade = await _tables(dsn)
    assert STATE_TABLES <= after_upgrade, f"missing after upgrade: {STATE_TABLES - after_upgrade}"

    await asyncio.to_thread(migrate.downgrade, fresh_database, "base")
    assert await _tables(dsn) <= {"alembic_version"}

    # And back up: the downgrade left nothing that blocks a second upgrade.
    await asyncio.to_thread(migrate.upgrade, fresh_database, "head")
    assert STATE_TABLES <= await _tables(dsn)


async def test_the_plans_migration_copies_the_plans_recorded_in_decisions(fresh_database: str) -> None:
    """0008 moves plans out of their `defrag_planned` decisions' JSON, settled as the pod's next plan decision says;
    an open one whose JSON is unreadable is copied without moves (recover() aborts it), a settled one left out."""
    dsn = asyncpg_dsn(fresh_database)
    await asyncio.to_thread(migrate.upgrade, fresh_database, "0007")
    victim = {"uid": "v1", "namespace": "ns", "name": "victim", "from_node": "n1", "from_gpu_indices": [1, 0],
              "share_milli": 250, "memory_mib": 4096, "cpu_milli": 500, "pod_memory_mib": 1024,
              "promise": "promise-p1-0"}

    def planned(plan_id: str) -> dict[str, str]:
        return {"plan": json.dumps({"plan_id": plan_id, "victims": [victim]})}

    decisions = [  # (id, pod, kind, reasons, seconds after the first)
        ("d1", "open", "defrag_planned", planned("p1"), 0),
        ("d2", "settled", "defrag_planned", planned("p2"), 0),
        ("d3", "settled", "defrag_completed", {}, 1),
        ("d4", "unreadable", "defrag_planned", {"plan": "{not json"}, 0),
        ("d5", "replanned", "defrag_planned", {"plan": "{not json"}, 0),
        ("d6", "replanned", "defrag_aborted", {"reason": "refused"}, 1),
        ("d7", "replanned", "defrag_planned", planned("p4"), 2),
        ("d8", "replanned", "defrag_aborted", {"reason": "placement restarted mid-plan"}, 3),
    ]
    connection = await asyncpg.connect(dsn)
    try:
        for decision_id, pod, kind, reasons, after_s in decisions:
            await connection.execute(
                "INSERT INTO decisions (id, cluster, namespace, pod, pod_uid, kind, reasons, created_at) "
                "VALUES ($1, 'c', 'ns', $2, $2, $3, $4::jsonb, now() + make_interval(secs => $5))",
                decision_id, pod, kind, json.dumps(reasons), after_s)
        await asyncio.to_thread(migrate.upgrade, fresh_database, "head")
        plans = await connection.fetch("SELECT plan_id, beneficiary_uid, state, reason, settled_at IS NOT NULL "
                                       "FROM defrag_plans ORDER BY plan_id")
        moves = await connection.fetch("SELECT plan_id, seq, uid, from_gpu_indices, promise FROM defrag_moves "
                                       "ORDER BY plan_id")
    finally:
        await connection.close()
    assert [tuple(p) for p in plans] == [
        ("p1", "open", "planned", None, False), ("p2", "settled", "completed", None, True),
        ("p4", "replanned", "aborted", "placement restarted mid-plan", True),
        ("unrecorded-unreadable", "unreadable", "planned", None, False)]
    assert [tuple(m) for m in moves] == [(p, 0, "v1", [1, 0], "promise-p1-0") for p in ("p1", "p2", "p4")]
