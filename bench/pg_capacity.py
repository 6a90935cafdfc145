"""How much PostgreSQL a pod costs, and the fleet's telemetry and latency windows, with gpuplace's own statements.

    python bench/pg_capacity.py --seconds 8 --out bench/results/pg-capacity

drives the real repository (adapters/postgres/, through PostgresUnitOfWorkFactory) with the
transactions the services run, K workers at once, each on a synthetic cluster of its own (125 nodes x 8 GPUs, the
average cluster of a 50,000-GPU fleet of 50 clusters), and reports what PostgreSQL spent:

- `pods`: a pod's whole life in placement's transactions, a batch of BATCH_PODS (32) at a time: the pending batch
  (claim_events, upsert_pods, reserve_many, the `decided` decisions and outbox rows, commit), the binder's flush
  (mark_bound, `bound` decisions and outbox rows), the outbox relay (take_unpublished + mark_published), the
  watcher's bound news (claim_events), and the deletion placement applies one pod at a time (_forget: claim_event,
  get_pod FOR UPDATE, release, set_pod_state deleted). The policy is not run (the GPUs are picked round-robin) and
  nothing is sent to Kafka or the apiserver: only what PostgreSQL does is measured.
- `placing`: the same less the deletion: the way in alone (pods placed, bound and left running).
- `telemetry`: telemetry-ingest's transaction for one GPU sample (usecases/ingest.ingest_telemetry): gpu-agent sends
  one per GPU every GPUPLACE_TELEMETRY_INTERVAL_S (5 s).
- `latency`: latency-ingest's transaction for one pod's latency window (usecases/ingest.ingest_latency, which
  refits the one fleet-wide latency model row in the same transaction), over pods placed on the cluster first;
  and how long each window holds that row (HoldClock): windows take it one after another, fleet-wide.

CPU is read from /proc: the PostgreSQL backends serving this script's sessions (known by their application_name),
summed over the phase; the whole server's (every postgres process, its background writers included, and anything
else using the server meanwhile) is reported beside it, with the WAL the server wrote. The Python side runs in this
process (run it under `nice -n 19` on a shared machine): on two cores it, not PostgreSQL, limits pods/s, so the
figure that carries to a fleet is PostgreSQL's CPU per pod, and whether it stays flat as K grows.

Every phase runs in scratch databases of its own (created, migrated to head, dropped WITH (FORCE) at the end, and
with them every synthetic row): the relay's take_unpublished takes any unpublished outbox row of its database, so
on a shared database it would take other runs' events. `--split 2` runs the largest K over two databases of the one
server, the workers' clusters split between them, as per-region databases would split a fleet's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gpuplace.adapters.postgres import migrate
from gpuplace.adapters.postgres.latency import LatencyRepository
from gpuplace.adapters.postgres.unit_of_work import PostgresUnitOfWork, PostgresUnitOfWorkFactory
from gpuplace.contracts.events import GpuRequest, GpuTelemetry, LatencyWindow, PodEvent
from gpuplace.harness import cpu_accounting
from gpuplace.harness.stack_run import settings_from_stack
from gpuplace.usecases.cluster_view import Placement
from gpuplace.usecases.decision_log import DecisionLog
from gpuplace.usecases.ingest import ingest_latency, ingest_telemetry
from gpuplace.usecases.placement import BATCH_PODS, CONSUMER
from gpuplace.usecases.placement import _pod_row as pod_row  # the very row placement writes for a PodEvent
from gpuplace.usecases.pod_states import PodState

APP = "gpuplace-pg-capacity"
NODES, GPUS_PER_NODE, GPU_MIB = 125, 8, 81_920
POD_GPU_MIB, POD_SHARE_MILLI, POD_CPU_MILLI, POD_MEMORY_MIB = 4_096, 100, 500, 2_048
NAMESPACE = "capacity"
STANDING_PODS = 64  # placed per cluster before the latency phase: the pods whose windows come in
TABLES = ("pods", "allocations", "decisions", "outbox", "processed_events", "latency_windows", "gpus", "nodes")
_TICKS = os.sysconf("SC_CLK_TCK")


# -- where the CPU goes -------------------------------------------------------------------------------------------
def _proc_cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


@dataclass
class Sample:
    backends_cpu_s: float  # this script's sessions' backends
    server_cpu_s: float  # every postgres process (cpu_accounting's "postgres")
    wal_bytes: int
    client_cpu_s: float
    wall_s: float
    table_bytes: dict[str, int] = field(default_factory=dict)


async def _sample(admin: asyncpg.Connection, dbs: Sequence[asyncpg.Connection]) -> Sample:
    pids = [r["pid"] for r in await admin.fetch("SELECT pid FROM pg_stat_activity WHERE application_name = $1", APP)]
    sizes: dict[str, int] = dict.fromkeys(TABLES, 0)
    for db in dbs:
        for table in TABLES:
            sizes[table] += int(await db.fetchval("SELECT pg_total_relation_size($1::regclass)", table))
    wal = int(await admin.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))
    return Sample(sum(_proc_cpu_s(p) for p in pids), cpu_accounting.sample()["postgres"], wal, time.process_time(),
                  time.monotonic(), sizes)


# -- the databases ------------------------------------------------------------------------------------------------
def _asyncpg_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextlib.asynccontextmanager
async def scratch_databases(url: str, count: int) -> AsyncIterator[list[str]]:
    """`count` new databases on `url`'s server, migrated to head; dropped (with every row in them) on the way out."""
    admin = await asyncpg.connect(_asyncpg_dsn(url))
    names = [f"pgcap_{uuid.uuid4().hex[:8]}" for _ in range(count)]
    try:
        urls = []
        for name in names:
            await admin.execute(f'CREATE DATABASE "{name}"')
            urls.append(make_url(url).set(database=name).render_as_string(hide_password=False))
            await migrate.upgrade_async(urls[-1])
        yield urls
    finally:
        for name in names:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def _engine(url: str, connections: int) -> AsyncEngine:
    """A pool of exactly `connections` sessions named APP, so their backends can be found in pg_stat_activity."""
    return create_async_engine(url, pool_size=connections, max_overflow=0,
                               connect_args={"server_settings": {"application_name": APP}})


async def _warm(engine: AsyncEngine, connections: int) -> None:
    """Open every session of the pool before the clock starts (and so every backend measured)."""
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(connections):
            await stack.enter_async_context(engine.connect())


# -- a synthetic cluster ------------------------------------------------------------------------------------------
async def make_cluster(uow_factory: PostgresUnitOfWorkFactory, cluster: str) -> None:
    async with uow_factory() as uow:
        for n in range(NODES):
            await uow.nodes.upsert_node({
                "cluster": cluster, "name": f"node-{n:03d}", "region": "capacity", "cpu_milli": 256_000,
                "memory_mib": 2_048_000, "gpu_model": "NVIDIA-H100-80GB-HBM3", "gpu_count": GPUS_PER_NODE,
                "gpu_memory_mib": GPU_MIB, "ready": True, "unschedulable": False, "labels": {}, "taints": []})
        await uow.commit()


class PodLife:
    """One worker's pods on its own cluster, through placement's transactions, a batch at a time."""

    def __init__(self, uow_factory: PostgresUnitOfWorkFactory, cluster: str) -> None:
        self.uow = uow_factory
        self.cluster = cluster
        self.log = DecisionLog("gpuplace")
        self.placed = 0
        self.deleted = 0
        self.standing: list[tuple[PodEvent, Placement]] = []

    def _batch(self) -> list[tuple[PodEvent, Placement]]:
        batch = []
        for i in range(self.placed, self.placed + BATCH_PODS):
            event = PodEvent(cluster=self.cluster, kind="pending", namespace=NAMESPACE, name=f"pod-{i}",
                             uid=uuid.uuid4().hex, priority=100, cpu_milli=POD_CPU_MILLI, memory_mib=POD_MEMORY_MIB,
                             gpu=GpuRequest(gpu_count=1, memory_mib_per_gpu=POD_GPU_MIB), deadline_ms=33.3,
                             frame_rate_hz=30.0, workload="detector", service_ms=4.0, owner=f"Deployment/d{i % 12}")
            node = i % NODES
            hold = Placement(f"node-{node:03d}", ((i // NODES) % GPUS_PER_NODE,), POD_SHARE_MILLI, POD_GPU_MIB,
                             POD_CPU_MILLI, POD_MEMORY_MIB, score=87.5,
                             runners_up=tuple((f"node-{(node + k) % NODES:03d}", 80.0 - k) for k in (1, 2, 3)))
            batch.append((event, hold))
        self.placed += BATCH_PODS
        return batch

    async def place(self) -> list[tuple[PodEvent, Placement]]:
        """Pending batch, binder's flush, relay, bound news: a batch from pending to recorded bound."""
        batch = self._batch()
        async with self.uow() as uow:  # usecases/placement.PlacementService._on_pending and _place
            claimed = await uow.events.claim_events(CONSUMER, [(e.event_id, e.digest()) for e, _ in batch])
            rows = await uow.pods.upsert_pods([pod_row(e) for e, _ in batch if e.event_id in claimed])
            if any(row["owner"] for row in rows):  # places promised to a replacement of the same owner
                await uow.pods.pods_in_state(self.cluster, (PodState.PROMISED,))
            records: list[Any] = []
            reservations = []
            for row, (_, hold) in zip(rows, batch, strict=True):
                decision_id = uuid.uuid4().hex
                await self.log.record(uow, row, "decided", hold=hold, decision_id=decision_id,
                                      reasons=hold.reasons(), into=records)
                reservations.append(hold.reservation(row["uid"], decision_id))
            refused = await uow.allocations.reserve_many(self.cluster, reservations)
            if refused is not None:
                raise RuntimeError(f"{self.cluster}: {refused}")
            await self.log.write(uow, records)
            await self.log.commit(uow)
        async with self.uow() as uow:  # usecases/binder.Binder._record
            moved = set(await uow.pods.mark_bound(self.cluster, [row["uid"] for row in rows]))
            records = []
            for row, (_, hold) in zip(rows, batch, strict=True):
                if row["uid"] in moved:
                    await self.log.record(uow, row, "bound", hold=hold, into=records)
            await self.log.write(uow, records)
            await self.log.commit(uow)
        await self._relay()
        async with self.uow() as uow:  # usecases/placement.PlacementService._on_run, the watcher's bound news
            bound = [e.model_copy(update={"kind": "bound", "node_name": h.node, "event_id": uuid.uuid4().hex})
                     for e, h in batch]
            await uow.events.claim_events(CONSUMER, [(e.event_id, e.digest()) for e in bound])
            await uow.commit()
        return batch

    async def _relay(self) -> None:
        async with self.uow() as uow:  # adapters/postgres/outbox_relay.OutboxRelay.run_once, less the Kafka send
            rows = await uow.outbox.take_unpublished(500)
            if rows:
                await uow.outbox.mark_published([row["id"] for row in rows])
            await uow.commit()

    async def delete(self, batch: Sequence[tuple[PodEvent, Placement]]) -> None:
        """The watcher's deleted news, one transaction a pod (usecases/placement.PlacementService._forget)."""
        for event, _ in batch:
            gone = event.model_copy(update={"kind": "deleted", "event_id": uuid.uuid4().hex})
            async with self.uow() as uow:
                if not await uow.events.claim_event(CONSUMER, gone.event_id, gone.digest()):
                    continue
                row = await uow.pods.get_pod(self.cluster, gone.uid, for_update=True)
                if row is not None:
                    await uow.allocations.release(self.cluster, gone.uid, cpu_milli=row["cpu_milli"],
                                                  memory_mib=row["memory_mib"])
                    await uow.pods.set_pod_state(self.cluster, gone.uid, PodState.DELETED)
                await uow.commit()
            self.deleted += 1

    async def cycle(self) -> int:
        await self.delete(await self.place())
        return BATCH_PODS

    async def stand(self) -> None:
        """Pods placed and left running, for the latency phase's windows."""
        while len(self.standing) < STANDING_PODS:
            self.standing += await self.place()


class Placing(PodLife):
    """The way in alone: pods placed and bound, never deleted (the `pods` mix less this is the way out)."""

    async def cycle(self) -> int:
        await self.place()
        return BATCH_PODS


class Telemetry:
    """gpu-agent's samples of the cluster's GPUs, one after another, through telemetry-ingest's transaction."""

    def __init__(self, uow_factory: PostgresUnitOfWorkFactory, cluster: str) -> None:
        self.uow, self.cluster, self.next = uow_factory, cluster, 0

    async def cycle(self) -> int:
        gpu = self.next % (NODES * GPUS_PER_NODE)
        sample = GpuTelemetry(cluster=self.cluster, node=f"node-{gpu // GPUS_PER_NODE:03d}",
                              gpu_index=gpu % GPUS_PER_NODE, gpu_uuid=f"GPU-{self.cluster}-{gpu}",
                              model="NVIDIA-H100-80GB-HBM3", memory_total_mib=GPU_MIB,
                              memory_used_mib=(gpu * 37) % GPU_MIB, utilization_pct=float(gpu % 100))
        await ingest_telemetry(self.uow, sample, consumer="telemetry-ingest")
        self.next += 1
        return 1


class Latency:
    """Latency windows of the cluster's standing pods, through latency-ingest's transaction (and model refit)."""

    def __init__(self, uow_factory: PostgresUnitOfWorkFactory, cluster: str) -> None:
        self.uow, self.cluster, self.next = uow_factory, cluster, 0
        self.pods = PodLife(uow_factory, cluster)

    async def prepare(self) -> None:
        await self.pods.stand()

    async def cycle(self) -> int:
        event, hold = self.pods.standing[self.next % len(self.pods.standing)]
        window = LatencyWindow(cluster=self.cluster, namespace=NAMESPACE, pod=event.name, workload="detector",
                               node=hold.node, gpu_index=hold.gpu_indices[0], window_s=10.0, frames=300,
                               p50_ms=8.0, p95_ms=12.0, p99_ms=15.0, deadline_ms=33.3)
        await ingest_latency(self.uow, window, consumer="latency-ingest")
        self.next += 1
        return 1


class HoldClock:
    """How long each latency window's transaction holds the one fleet-wide model row: from its SELECT ... FOR UPDATE
    (LatencyRepository.load_latency_model) until its commit returns. Every window of the fleet takes that row in
    turn, whatever the number of latency-ingest workers, so 1 / the hold is the fleet's most windows a second."""

    def __init__(self) -> None:
        self.held: list[float] = []
        self._since: dict[int, float] = {}

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        load, commit = LatencyRepository.load_latency_model, PostgresUnitOfWork.commit

        async def timed_load(repo: LatencyRepository, name: str, *, for_update: bool = False) -> Any:
            if for_update:
                self._since[id(repo)] = time.perf_counter()
            return await load(repo, name, for_update=for_update)

        async def timed_commit(uow: PostgresUnitOfWork) -> None:
            await commit(uow)
            since = self._since.pop(id(uow.latency), None)
            if since is not None:
                self.held.append(time.perf_counter() - since)

        LatencyRepository.load_latency_model = timed_load  # type: ignore[method-assign]
        PostgresUnitOfWork.commit = timed_commit  # type: ignore[method-assign]
        try:
            yield
        finally:
            LatencyRepository.load_latency_model = load  # type: ignore[method-assign]
            PostgresUnitOfWork.commit = commit  # type: ignore[method-assign]


# -- one phase ----------------------------------------------------------------------------------------------------
Worker = PodLife | Placing | Telemetry | Latency
WORKERS: dict[str, Callable[[PostgresUnitOfWorkFactory, str], Worker]] = {
    "pods": PodLife, "placing": Placing, "telemetry": Telemetry, "latency": Latency}
UNIT = {"pods": "pods", "placing": "pods", "telemetry": "samples", "latency": "windows"}


async def _lock_waits(admin: asyncpg.Connection, deadline: float) -> float:
    """Of this script's sessions, how many wait for a lock (a row another holds), on average over the phase."""
    seen = []
    while time.monotonic() < deadline:
        seen.append(await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
                                         "AND wait_event_type = 'Lock'", APP))
        await asyncio.sleep(0.1)
    return sum(seen) / len(seen) if seen else 0.0


async def _drive(worker: Worker, deadline: float) -> int:
    done = 0
    while time.monotonic() < deadline:
        done += await worker.cycle()
    return done


async def phase(mix: str, urls: Sequence[str], workers: int, seconds: float) -> dict[str, Any]:
    """`workers` workers of `mix` for `seconds`, worker i on database i % len(urls), each on its own cluster."""
    per_db = [len(range(i, workers, len(urls))) for i in range(len(urls))]
    engines = [_engine(url, n) for url, n in zip(urls, per_db, strict=True) if n]
    factories = [PostgresUnitOfWorkFactory(e) for e in engines]
    run, clock = uuid.uuid4().hex[:6], HoldClock()
    crew = [WORKERS[mix](factories[i % len(factories)], f"cap-{run}-{i}") for i in range(workers)]
    admin = await asyncpg.connect(_asyncpg_dsn(urls[0]))
    dbs = [await asyncpg.connect(_asyncpg_dsn(url)) for url in urls]
    try:
        for worker in crew:
            await make_cluster(worker.uow, worker.cluster)
            if isinstance(worker, Latency):
                await worker.prepare()
        for engine, n in zip(engines, [n for n in per_db if n], strict=True):
            await _warm(engine, n)
        before = await _sample(admin, dbs)
        deadline = time.monotonic() + seconds
        waits = asyncio.create_task(_lock_waits(admin, deadline))
        with clock.watching():
            done = sum(await asyncio.gather(*(_drive(w, deadline) for w in crew)))
        waiting = await waits
        after = await _sample(admin, dbs)
    finally:
        for conn in (admin, *dbs):
            await conn.close()
        for engine in engines:
            await engine.dispose()
    held = {"model_row_held_ms": round(1000 * statistics.mean(clock.held), 3)} if clock.held else {}
    return {**_figures(mix, workers, len(urls), done, before, after), "waiting_on_locks": round(waiting, 2), **held}


def _figures(mix: str, workers: int, databases: int, done: int, before: Sample, after: Sample) -> dict[str, Any]:
    wall = after.wall_s - before.wall_s
    backends = after.backends_cpu_s - before.backends_cpu_s
    grown = {t: after.table_bytes[t] - before.table_bytes[t] for t in TABLES}
    return {
        "mix": mix, "unit": UNIT[mix], "workers": workers, "databases": databases, "done": done,
        "wall_s": round(wall, 2), "per_s": round(done / wall, 1),
        "backends_cpu_s": round(backends, 2), "server_cpu_s": round(after.server_cpu_s - before.server_cpu_s, 2),
        "client_cpu_s": round(after.client_cpu_s - before.client_cpu_s, 2),
        "backends_ms_per": round(1000 * backends / done, 3),
        "server_ms_per": round(1000 * (after.server_cpu_s - before.server_cpu_s) / done, 3),
        "client_ms_per": round(1000 * (after.client_cpu_s - before.client_cpu_s) / done, 3),
        "per_postgres_core_s": round(done / backends, 0) if backends else None,
        "wal_bytes_per": round((after.wal_bytes - before.wal_bytes) / done),
        "table_bytes_per": {t: round(b / done) for t, b in grown.items() if b},
    }


# -- the report ---------------------------------------------------------------------------------------------------
def markdown(results: list[dict[str, Any]], command: str) -> str:
    lines = [
        "# PostgreSQL's share: gpuplace's own transactions, K workers on clusters of their own", "",
        f"`{command}` on {platform.node()} ({platform.machine()}, {os.cpu_count()} cores; PostgreSQL as the local "
        "stack runs it: fsync, synchronous_commit and full_page_writes off). Each worker drives its own synthetic "
        f"cluster of {NODES} nodes x {GPUS_PER_NODE} GPUs through the real repository (bench/pg_capacity.py says "
        "which transactions); the Python side shares the machine's cores with PostgreSQL, so the rate is the "
        "client's, and PostgreSQL's CPU per unit is the figure that carries to a fleet.", "",
        "| mix | K workers | databases | done | per s | PostgreSQL ms per unit (its backends) | server ms per unit "
        "(all postgres processes) | units per PostgreSQL core-second | client ms per unit | WAL bytes per unit | "
        "sessions waiting on a lock (mean) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| {r['mix']} ({r['unit']}) | {r['workers']} | {r['databases']} | {r['done']} | {r['per_s']} | "
                     f"{r['backends_ms_per']} | {r['server_ms_per']} | {r['per_postgres_core_s']} | "
                     f"{r['client_ms_per']} | {r['wal_bytes_per']} | {r['waiting_on_locks']} |")
    held = [r for r in results if "model_row_held_ms" in r]
    lines += [""] if held else []
    for r in held:
        lines.append(f"- latency, {r['workers']} worker(s): each window held the fleet's model row "
                     f"{r['model_row_held_ms']} ms (SELECT ... FOR UPDATE to commit): at most "
                     f"{1000 / r['model_row_held_ms']:.0f} windows a second, fleet-wide, however many workers.")
    lines += ["", "Table growth per unit (bytes, indexes included, before any vacuum), first run of each mix:", "",
              "| mix | " + " | ".join(TABLES) + " |", "|---|" + "---|" * len(TABLES)]
    seen: set[str] = set()
    for r in results:
        if r["mix"] not in seen:
            seen.add(r["mix"])
            lines.append(f"| {r['mix']} | " + " | ".join(str(r["table_bytes_per"].get(t, 0)) for t in TABLES) + " |")
    return "\n".join(lines) + "\n"


async def main(mixes: Sequence[str], ks: Sequence[int], split: int, seconds: float) -> list[dict[str, Any]]:
    url = settings_from_stack().database_url.get_secret_value()
    results = []
    async with scratch_databases(url, max(split, 1)) as urls:
        for mix in mixes:
            runs: list[Awaitable[dict[str, Any]]] = [phase(mix, urls[:1], k, seconds) for k in ks]
            if mix == "pods" and split > 1:
                runs.append(phase(mix, urls, max(ks), seconds))
            for run in runs:
                results.append(await run)
                print(json.dumps(results[-1]), flush=True)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mixes", default="pods,telemetry,latency")
    parser.add_argument("--workers", default="1,2,4", help="K: workers at once, comma-separated")
    parser.add_argument("--split", type=int, default=2, help="also run the pods mix's largest K over this many "
                        "databases (1: not)")
    parser.add_argument("--seconds", type=float, default=8.0, help="per phase")
    parser.add_argument("--out", type=Path, default=Path("bench/results/pg-capacity"))
    args = parser.parse_args()
    command = ("python bench/pg_capacity.py " + " ".join(
        f"--{k} {v}" for k, v in (("mixes", args.mixes), ("workers", args.workers), ("split", args.split),
                                  ("seconds", args.seconds), ("out", args.out))))
    found = asyncio.run(main(args.mixes.split(","), [int(k) for k in args.workers.split(",")], args.split,
                             args.seconds))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(markdown(found, command))
    args.out.with_suffix(".json").write_text(json.dumps({"command": command, "runs": found}, indent=2) + "\n")
    print(markdown(found, command))
