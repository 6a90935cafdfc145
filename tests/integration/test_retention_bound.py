"""Retention on the real PostgreSQL: pods placed and deleted, wave after wave, leave the tables bounded.

The pods go through the placement service itself (PlacementService.on_pods / on_pod, the code a deployment runs),
on a database of the test's own, with an in-memory apiserver (tests/fakes.FakeClusterApi) in place of Kafka and
kube-apiserver: what placement writes per pod (its row, allocations, decisions, outbox rows, the event ids it
claims) is written by the same code, only faster than the whole pipeline would carry it. Each pod gets the events
a cluster-watcher sends: pending, bound once placement bound it, deleted; the outbox is marked published as the
relay would after Kafka's acknowledgement.

Phase one (`measured` pods, no pruning) gives rows and bytes per pod per table (pg_total_relation_size). Phase two
runs the rest with retention set to one wave: after each wave a prune round removes what is older than the wave's
start, so every table holds at most one wave's rows however many pods went through. Then everything left is
pruned away but the pods still placed.

GPUPLACE_RETENTION_PODS sets the total (default 4,000: CI's time; 100,000 for docs/retention.md's figures, about
10 minutes on a two-core machine). The figures are printed as one JSON line.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import text

from gpuplace.adapters.postgres import migrate
from gpuplace.adapters.postgres.unit_of_work import PostgresUnitOfWorkFactory, make_engine
from gpuplace.contracts.events import PodEvent
from gpuplace.usecases.decide import decider
from gpuplace.usecases.placement import PlacementService
from gpuplace.usecases.ports import Retained
from gpuplace.usecases.retention import RetentionPolicy, prune_round
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi

pytestmark = pytest.mark.integration

TABLES = ("processed_events", "decisions", "outbox", "pods", "allocations", "latency_windows")
WAVE = 1000  # pods placed, bound and deleted together
NODES, GPUS = 40, 8  # 40 x 8 GPUs of 80 GiB, 8 pods of 9420 MiB each: 2,560 places, over two waves' worth


async def sizes(uow_factory: PostgresUnitOfWorkFactory) -> dict[str, tuple[int, int]]:
    """Rows and bytes (table, indexes and TOAST) of each table."""
    found = {}
    async with uow_factory.engine.connect() as conn:
        for table in TABLES:
            rows = (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
            size = (await conn.execute(text(f"SELECT pg_total_relation_size('{table}')"))).scalar_one()
            found[table] = (int(rows), int(size))
    return found


async def one_wave(service: PlacementService, api: FakeClusterApi, uow_factory: PostgresUnitOfWorkFactory,
                   wave: int) -> None:
    """WAVE pods: pending (a burst, as cluster-watcher's batches), bound, published, then deleted."""
    pending = [pod_event(f"w{wave}-{i}", memory_mib=9420) for i in range(WAVE)]
    await _in_batches(service, pending)
    await service.drain()
    bound = [pod_event(e.name, uid=e.uid, kind="bound", node_name=api.bound[("robots", e.name)]) for e in pending]
    await _in_batches(service, bound)
    await _publish_all(uow_factory)
    for event in pending:
        api.delete_pod("robots", event.name)
    await _in_batches(service, [pod_event(e.name, uid=e.uid, kind="deleted") for e in pending])
    await service.drain()
    await _publish_all(uow_factory)


async def _in_batches(service: PlacementService, events: Sequence[PodEvent], batch: int = 256) -> None:
    for start in range(0, len(events), batch):
        await service.on_pods(events[start:start + batch])


async def _publish_all(uow_factory: PostgresUnitOfWorkFactory) -> None:
    """The relay's part, without Kafka: every committed row marked published."""
    while True:
        async with uow_factory() as uow:
            rows = await uow.outbox.take_unpublished(1000)
            await uow.outbox.mark_published([r["id"] for r in rows])
            await uow.commit()
        if not rows:
            return


async def _db_now(uow_factory: PostgresUnitOfWorkFactory) -> float:
    async with uow_factory.engine.connect() as conn:
        return float((await conn.execute(text("SELECT extract(epoch FROM clock_timestamp())"))).scalar_one())


async def test_pods_placed_and_deleted_leave_the_tables_bounded_by_retention(fresh_database: str) -> None:
    total = int(os.environ.get("GPUPLACE_RETENTION_PODS", "4000"))
    measured = min(total // 2, 10 * WAVE)
    await migrate.upgrade_async(fresh_database)
    engine = make_engine(fresh_database)
    uow_factory = PostgresUnitOfWorkFactory(engine)
    api = FakeClusterApi()
    service = PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit")
    try:
        for n in range(NODES):
            await service.on_node(node_event(f"n{n}", gpus=GPUS, gpu_memory_mib=81920, cpu_milli=512_000,
                                             model="NVIDIA-H100-80GB-HBM3"))
        before, started = await sizes(uow_factory), time.monotonic()
        for wave in range(measured // WAVE):
            await one_wave(service, api, uow_factory, wave)
        after = await sizes(uow_factory)
        per_pod = {t: {"rows": (after[t][0] - before[t][0]) / measured,
                       "bytes": (after[t][1] - before[t][1]) / measured} for t in TABLES}
        print("retention per pod:", json.dumps({"measured_pods": measured, "per_pod": per_pod}), flush=True)
        assert per_pod["processed_events"]["rows"] == 3  # pending, bound, deleted
        assert per_pod["decisions"]["rows"] == 2 and per_pod["outbox"]["rows"] == 2  # decided, bound
        assert per_pod["pods"]["rows"] == 1 and per_pod["allocations"]["rows"] == 0  # deleted, released

        most: dict[str, int] = dict.fromkeys(TABLES, 0)
        for wave in range(measured // WAVE, total // WAVE):
            wave_start = await _db_now(uow_factory)
            await one_wave(service, api, uow_factory, wave)
            keep_s = await _db_now(uow_factory) - wave_start  # retention: one wave
            policy = RetentionPolicy(dict.fromkeys(Retained, keep_s), batch_rows=1000, max_batches=1000)
            assert await prune_round(uow_factory, policy) is not None
            for table, (rows, _) in (await sizes(uow_factory)).items():
                most[table] = max(most[table], rows)
        seconds = time.monotonic() - started
        # bounded by the settings: one wave's rows at most, whatever the number of pods that went through
        assert most["processed_events"] <= 3 * WAVE and most["decisions"] <= 2 * WAVE
        assert most["outbox"] <= 2 * WAVE and most["pods"] <= WAVE and most["allocations"] == 0

        policy = RetentionPolicy(dict.fromkeys(Retained, 1e-6), batch_rows=1000, max_batches=1000)
        assert await prune_round(uow_factory, policy) is not None
        left = await sizes(uow_factory)
        assert {t: rows for t, (rows, _) in left.items()} == dict.fromkeys(TABLES, 0)
        figures: dict[str, Any] = {"pods": total, "measured_pods": measured, "seconds": round(seconds, 1),
                                   "per_pod": per_pod, "most_rows_while_pruning": most,
                                   "bytes_at_end": {t: b for t, (_, b) in left.items()}}
        print("retention figures:", json.dumps(figures))
    finally:
        await service.drain()
        await engine.dispose()
