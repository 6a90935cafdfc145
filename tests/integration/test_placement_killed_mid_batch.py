"""Placement SIGKILLed in the middle of a batch (issue 16), on the real stack: the crash-safety guarantees hold.

Placement decides a burst in batches: the pending pods read together are claimed, recorded, decided and reserved
in one transaction, their binds run concurrently and their outcomes are recorded in batches. A process killed
while a batch's transaction is open, or while its binds are in flight, or while their outcomes wait to be
recorded, must leave nothing that a restart does not repair: the transaction rolls back whole (the events are
read again and decided anew), and a pod reserved but not recorded bound is bound again or found bound.

The scene: one KWOK cluster of 8 nodes x 8 H100 (five 16,000 MiB slices fit on a GPU: 320 places), placement and
cluster-watcher as their own processes (as `gpuplace bench chaos` runs them), 330 pods created at once. PostgreSQL
is polled every 20 ms; placement is SIGKILLed as soon as some pods are reserved while others still wait, at a
moment when it has a transaction open if one comes within a couple of seconds, restarted in the same consumer
group, and killed a second time later in the burst. Once it settles: exactly the 320 pods that fit are bound,
each once, on the node PostgreSQL has (and with the GPUs it has); the ten that do not fit are recorded waiting;
no GPU is over-committed in PostgreSQL or by the apiserver's assignment annotations; nothing is left reserved,
and PostgreSQL's accounting (GPU memory, node CPU and memory) is exactly what its bound pods hold.

The moments hit are printed (run with -s) and written to the test's tmp_path as kills.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import asyncpg
import pytest

from gpuplace.adapters.kafka import ensure_topics
from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.adapters.kube.vocabulary import ASSIGNMENT
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import database
from gpuplace.contracts import topics
from gpuplace.core.model import Node
from gpuplace.harness.chaos_faults import ServiceProcess, service_env
from gpuplace.harness.chaos_run import (
    api_overcommitted,
    lost_pods,
    node_mismatches,
)
from gpuplace.harness.kafka_users import kafka_env
from gpuplace.harness.pipeline_run import (
    FLEET_LABEL,
    ClusterApis,
    PipelineRun,
    RunConfig,
    list_pods_json,
)
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from tests.integration.conftest import asyncpg_dsn, run_id

pytestmark = pytest.mark.integration

NODES, GPUS_PER_NODE = 8, 8
GPU_MODEL, GPU_MEMORY_MIB = "NVIDIA-H100-80GB-HBM3", 81_559
SLICE_MIB = 16_000  # five to a GPU
FITS = NODES * GPUS_PER_NODE * (GPU_MEMORY_MIB // SLICE_MIB)  # 320
PODS = FITS + 10  # the ten more must wait, not squeeze in
POLL_S = 0.02
PREFER_OPEN_S = 3.0  # how long a kill waits for a moment with placement's transaction open
SETTLE_TIMEOUT_S = 150.0
KILLS = 2  # the first as soon as a batch is reserved; the next once KILL_EVERY more pods are placed
KILL_EVERY = 40


@dataclass
class Moment:
    """What PostgreSQL showed at the poll that triggered a kill."""

    at_s: float  # since the pods were submitted
    reserved: int
    bound: int  # recorded bound in PostgreSQL
    recorded: int  # pods with a row (committed)
    still_to_place: int  # of the pods that fit, neither reserved nor bound
    open_transactions: list[str]  # placement's transactions open then: each one's state and last statement's start
    placing: str | None  # what placement was doing in one of them, if it was placing pods (doing)


# -- the database, placement's own -----------------------------------------------------------------------------
@pytest.fixture
async def own_database(fresh_database: str) -> str:
    """A database of the test's own, migrated: only this test's placement connects to it, so pg_stat_activity
    shows placement's transactions and nothing else's."""
    await migrate.upgrade_async(fresh_database)
    return fresh_database


_MOMENT = """
    SELECT count(*) FILTER (WHERE state = 'reserved') AS reserved,
           count(*) FILTER (WHERE state = 'bound') AS bound,
           count(*) AS recorded,
           ARRAY(SELECT state || ': ' || left(regexp_replace(query, '\\s+', ' ', 'g'), 90) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
                   AND backend_type = 'client backend') AS open_transactions
    FROM pods WHERE cluster = $1 AND namespace = $2"""


# What placement is doing in a transaction left open, by the start of its last statement (first match wins).
_DOING = (("INSERT INTO processed_events", "claiming events"),
          ("INSERT INTO pods", "recording pods and deciding them"),
          ("+ want.", "reserving a batch (reserve_many)"),
          ("UPDATE pods SET state = 'reserved'", "reserving a batch (reserve_many)"),
          ("INSERT INTO allocations", "reserving (allocations)"),
          ("UPDATE nodes SET cpu_assigned_milli=", "reserving one pod"),
          ("UPDATE gpus SET", "reserving one pod"),
          ("bound_at=now()", "recording bind outcomes"),
          ("UPDATE pods SET state=", "changing a pod's state"),
          ("INSERT INTO decisions", "writing decisions"),
          ("INSERT INTO outbox", "writing decisions"))


def doing(statement: str) -> str | None:
    """What an open transaction whose last statement is `statement` is placing; None for anything else (the
    outbox relay, a re-read of the cluster, a transaction just begun)."""
    return next((what for start, what in _DOING if start in statement), None)


class Probe:
    """PostgreSQL, polled on one connection of its own."""

    def __init__(self, conn: asyncpg.Connection, cluster: str, namespace: str, started: float) -> None:
        self.conn, self.cluster, self.namespace, self.started = conn, cluster, namespace, started
        self.max_jump = 0  # the most pods that became reserved or bound between two polls: a batch's size, nearly
        self._placed = 0

    async def moment(self) -> Moment:
        row = await self.conn.fetchrow(_MOMENT, self.cluster, self.namespace)
        reserved, bound = int(row["reserved"]), int(row["bound"])
        self.max_jump = max(self.max_jump, reserved + bound - self._placed)
        self._placed = reserved + bound
        open_ = list(row["open_transactions"])
        return Moment(round(time.monotonic() - self.started, 2), reserved, bound, int(row["recorded"]),
                      FITS - reserved - bound, open_, next(filter(None, map(doing, open_)), None))


async def kill_mid_batch(placement: ServiceProcess, probe: Probe, *, placed_more_than: int,
                         timeout_s: float) -> Moment | None:
    """SIGKILL placement at the first poll showing more than `placed_more_than` pods reserved or bound, some of them
    reserved (a batch committed, its binds in flight or their outcomes not yet recorded) and pods still to place;
    within PREFER_OPEN_S of the first such poll, at one where placement also has a transaction open placing pods
    (claiming, deciding or reserving the next batch, or recording bind outcomes).
    None if the burst was placed before such a moment came."""
    deadline, first_seen = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        if not placement.alive:
            pytest.fail(f"placement exited on its own:\n{placement.log_tail(30)}")
        moment = await probe.moment()
        if moment.still_to_place == 0:
            return None
        if moment.reserved > 0 and moment.reserved + moment.bound > placed_more_than:
            first_seen = first_seen or time.monotonic()
            if moment.placing or time.monotonic() - first_seen >= PREFER_OPEN_S:
                placement.kill9()
                return moment
        await asyncio.sleep(POLL_S)
    pytest.fail(f"no pod reserved within {timeout_s:.0f} s of the burst; placement's log:\n{placement.log_tail(30)}")


# -- the scene -------------------------------------------------------------------------------------------------
def _fleet(cluster: str) -> list[Node]:
    return [Node.with_gpus(f"{cluster}-n{i}", cpu_milli=96_000, memory_mib=768 * 1024, gpu_count=GPUS_PER_NODE,
                           gpu_model=GPU_MODEL, gpu_memory_mib=GPU_MEMORY_MIB) for i in range(NODES)]


def _pod_manifest(name: str, scheduler: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {"gpuplace.io/gpu-memory": f"{SLICE_MIB}Mi"}},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "perception", "image": "registry.invalid/perception:1",
                                     "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}


def _services(layout: PipelineRun, settings: Settings, kubeconfig: str, logs: Path) -> dict[str, ServiceProcess]:
    """placement and the cluster's watcher, each its own process, configured as `gpuplace bench chaos` does."""
    cluster = next(iter(layout.clusters))
    common = {
        **kafka_env(settings.kafka),  # the test's own Kafka user: the consumer groups are not the services' own
        "GPUPLACE_DATABASE_URL": settings.database_url.get_secret_value(),
        "GPUPLACE_TOPIC_SUFFIX": layout.suffix, "GPUPLACE_NAMESPACE": layout.namespace,
        "GPUPLACE_LEADER_ELECTION_NAMESPACE": layout.namespace,
        "GPUPLACE_NODE_LABEL_SELECTOR": f"{FLEET_LABEL}={layout.config.run_id}",
        "GPUPLACE_CONSUMER_GROUP_PREFIX": "gpuplace-it", "GPUPLACE_SCHEDULER_NAME": settings.scheduler_name,
        "GPUPLACE_LOG_LEVEL": "INFO", "GPUPLACE_RECONCILE_INTERVAL_S": "10", "GPUPLACE_HTTP_PORT": "0",
    }

    def process(label: str, service: str, **extra: str) -> ServiceProcess:
        # a static group member, as a pod name would be: restarted, placement takes its partitions back at once
        instance = {"GPUPLACE_INSTANCE_ID": f"{label}-{layout.config.run_id}"}
        return ServiceProcess(label, service, service_env({**common, **instance, **extra}), logs / f"{label}.log")

    return {"placement": process("placement", "placement", GPUPLACE_CLUSTER=cluster,
                                 GPUPLACE_KUBECONFIGS=json.dumps({cluster: kubeconfig})),
            "cluster-watcher": process("cluster-watcher", "cluster-watcher", GPUPLACE_CLUSTER=cluster,
                                       KUBECONFIG=kubeconfig)}


async def _create_pods(api: KubeClusterApi, namespace: str, scheduler: str) -> None:
    slots = asyncio.Semaphore(32)

    async def create(i: int) -> None:
        async with slots:
            await raw_json(await api.core.create_namespaced_pod(
                namespace, _pod_manifest(f"burst-{i:03d}", scheduler), _preload_content=False))  # type: ignore[arg-type]  # a manifest dict

    await asyncio.gather(*(create(i) for i in range(PODS)))


class PodRow(NamedTuple):
    cluster: str
    uid: str
    name: str
    state: str
    node: str | None


async def _db(conn: asyncpg.Connection, cluster: str, namespace: str) -> dict[tuple[str, str], PodRow]:
    """(cluster, uid) -> the pod's row, as the chaos bench's checks read it."""
    rows = await conn.fetch("SELECT cluster, uid, name, state, node FROM pods WHERE cluster = $1 AND namespace = $2",
                            cluster, namespace)
    return {(r["cluster"], r["uid"]): PodRow(*r) for r in rows}


async def settle(conn: asyncpg.Connection, api: KubeClusterApi, placement: ServiceProcess, cluster: str,
                 namespace: str) -> tuple[list[dict[str, Any]], dict[tuple[str, str], PodRow]]:
    """Until nothing is pending or reserved in PostgreSQL, every pod is bound in the apiserver or recorded waiting,
    PostgreSQL has as many bound as the apiserver, and two reads a second apart agree. Fails with what is not."""
    deadline, last = time.monotonic() + SETTLE_TIMEOUT_S, None
    while True:
        if not placement.alive:
            pytest.fail(f"placement exited on its own:\n{placement.log_tail(30)}")
        items = await list_pods_json(api, namespace)
        db = await _db(conn, cluster, namespace)
        states = Counter(r.state for r in db.values())
        api_bound = sum(1 for p in items if (p.get("spec") or {}).get("nodeName"))
        lost = lost_pods({cluster: items}, db)
        seen = (api_bound, tuple(sorted(states.items())))
        if len(items) == PODS and not lost and not states["pending"] and not states["reserved"] and \
                states["bound"] == api_bound and seen == last:
            return items, db
        if time.monotonic() > deadline:
            pytest.fail(f"not settled after {SETTLE_TIMEOUT_S:.0f} s: apiserver {len(items)} pods, {api_bound} bound; "
                        f"PostgreSQL {dict(states)}; not placed nor waiting: {lost[:10]}\n"
                        f"placement's log:\n{placement.log_tail(30)}")
        last = seen
        await asyncio.sleep(1.0)


async def _accounting(conn: asyncpg.Connection, cluster: str) -> dict[str, Any]:
    """What PostgreSQL's counters say against what its rows hold: each must be empty or zero."""
    return {
        "gpus_overcommitted": await conn.fetchval("""
            SELECT count(*) FROM gpus g JOIN (SELECT node, gpu_index, sum(memory_mib) AS mem, sum(share_milli) AS share
                                              FROM allocations WHERE cluster = $1 GROUP BY node, gpu_index) a
              ON g.node = a.node AND g.index = a.gpu_index
            WHERE g.cluster = $1 AND (a.mem > g.memory_total_mib OR a.share > 1000)""", cluster),
        "gpu_counters_off": [tuple(r) for r in await conn.fetch("""
            SELECT g.node, g.index, g.memory_assigned_mib, coalesce(a.mem, 0) FROM gpus g
            LEFT JOIN (SELECT node, gpu_index, sum(memory_mib) AS mem FROM allocations WHERE cluster = $1
                       GROUP BY node, gpu_index) a ON g.node = a.node AND g.index = a.gpu_index
            WHERE g.cluster = $1 AND g.memory_assigned_mib <> coalesce(a.mem, 0)""", cluster)],
        "node_counters_off": [tuple(r) for r in await conn.fetch("""
            SELECT n.name, n.cpu_assigned_milli, coalesce(p.cpu, 0), n.memory_assigned_mib, coalesce(p.mem, 0)
            FROM nodes n LEFT JOIN (SELECT node, sum(cpu_milli) AS cpu, sum(memory_mib) AS mem FROM pods
                                    WHERE cluster = $1 AND state IN ('reserved', 'bound') GROUP BY node) p
              ON n.name = p.node
            WHERE n.cluster = $1 AND (n.cpu_assigned_milli <> coalesce(p.cpu, 0)
                                      OR n.memory_assigned_mib <> coalesce(p.mem, 0))""", cluster)],
        "allocations_not_bound": [tuple(r) for r in await conn.fetch("""
            SELECT a.pod_uid, a.node, p.state, p.node FROM allocations a
            LEFT JOIN pods p ON p.cluster = a.cluster AND p.uid = a.pod_uid
            WHERE a.cluster = $1 AND (p.state IS DISTINCT FROM 'bound' OR p.node <> a.node)""", cluster)],
        "allocations": {(r["pod_uid"], r["node"]): sorted(r["gpus"]) for r in await conn.fetch(
            "SELECT pod_uid, node, array_agg(gpu_index) AS gpus FROM allocations WHERE cluster = $1 "
            "GROUP BY pod_uid, node", cluster)},
    }


async def test_placement_killed_mid_batch_leaves_every_pod_bound_once_and_nothing_overcommitted(
        kafka_bootstrap: str, database_url: str, own_database: str, kube_clusters: Any, tmp_path: Path) -> None:
    name, kubeconfig = next(iter(cluster_kubeconfigs().items()))
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=own_database)
    layout = PipelineRun(RunConfig(kubeconfigs={name: kubeconfig}, nodes=NODES, pods=PODS, run_id=run_id()), settings)
    cluster, namespace = next(iter(layout.clusters)), layout.namespace
    fleets = {cluster: _fleet(cluster)}
    services = _services(layout, settings, kubeconfig, tmp_path)
    placement = services["placement"]
    await ensure_topics(settings.kafka, [t + layout.suffix for t in topics.ALL_TOPICS])
    conn = await asyncpg.connect(asyncpg_dsn(own_database))
    began = time.monotonic()
    kills: list[Moment] = []
    burst: asyncio.Task[None] | None = None
    async with ClusterApis({name: kubeconfig}) as apis:
        api = apis[name]
        try:
            await layout._create_fleet(apis, fleets)
            for service in services.values():
                service.start()
            await layout._wait_inventory(fleets)

            submitted = time.monotonic()
            probe = Probe(conn, cluster, namespace, submitted)
            burst = asyncio.create_task(_create_pods(api, namespace, settings.scheduler_name))
            placed = 0
            for _ in range(KILLS):  # the later kills only while pods are still to place
                moment = await kill_mid_batch(placement, probe, placed_more_than=placed, timeout_s=120)
                if moment is None:
                    break
                kills.append(moment)
                placed = moment.reserved + moment.bound + KILL_EVERY
                placement.start()  # the same instance id, the same consumer group
            assert kills, "the burst was placed before any moment with a reservation in flight"
            await burst

            items, db = await settle(conn, api, placement, cluster, namespace)
            settled_s = time.monotonic() - submitted
            async with database(settings) as uow_factory, uow_factory() as uow:
                bound_twice = await uow.decisions.count_bound_twice(cluster)
            books = await _accounting(conn, cluster)
        finally:
            if burst is not None and not burst.done():
                burst.cancel()
                await asyncio.gather(burst, return_exceptions=True)
            for service in services.values():
                service.stop()
            await conn.close()
            with contextlib.suppress(Exception):
                await layout.cleanup(apis, fleets)

    report = {"kills": [asdict(k) for k in kills], "largest_step_between_polls": probe.max_jump,
              "settled_s_after_submit": round(settled_s, 1), "test_s": round(time.monotonic() - began, 1),
              "placement_starts": placement.starts}
    (tmp_path / "kills.json").write_text(json.dumps(report, indent=2))
    print(f"\nkilled mid-batch: {json.dumps(report)}")

    bound = {p["metadata"]["uid"]: p for p in items if (p.get("spec") or {}).get("nodeName")}
    waiting = [r for r in db.values() if r.state in ("unschedulable", "invalid")]
    assert len(bound) == FITS, f"{len(bound)} pods bound, {FITS} fit"
    assert len(waiting) == PODS - FITS and all(r.state == "unschedulable" for r in waiting), waiting
    assert lost_pods({cluster: items}, db) == []
    assert bound_twice == 0, f"{bound_twice} pods have two `bound` decisions"
    assert node_mismatches({cluster: items}, db) == []
    assert {uid: r.node for (_, uid), r in db.items() if r.state == "bound"} == \
        {uid: p["spec"]["nodeName"] for uid, p in bound.items()}, "PostgreSQL's bound pods differ from the apiserver's"
    assert api_overcommitted({cluster: items}, fleets) == 0, "GPUs over-committed by the assignment annotations"
    assert books["gpus_overcommitted"] == 0, "GPUs over-committed by PostgreSQL's allocations"
    assert books["gpu_counters_off"] == [] and books["node_counters_off"] == [], books
    assert books["allocations_not_bound"] == [], books["allocations_not_bound"]
    annotated = {(uid, p["spec"]["nodeName"]): sorted(g["index"] for g in json.loads(
        p["metadata"]["annotations"][ASSIGNMENT])["gpus"]) for uid, p in bound.items()}
    assert annotated == books["allocations"], "a pod's GPUs in its assignment annotation differ from PostgreSQL's"
    assert placement.starts == 1 + len(kills)
