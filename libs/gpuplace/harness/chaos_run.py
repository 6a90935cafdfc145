"""The core of `gpuplace bench chaos`: the pipeline on the local stack, under faults, checked for correctness.

DESIGN §5 promises that killing any process at any instant leaves no GPU over-committed, no pod bound twice and
no pending pod forgotten, and §4 that a malformed record is dead-lettered while its partition moves on. This run
tries to break both at once: pods arrive and leave while service processes are SIGKILLed and restarted, Kafka and
PostgreSQL are restarted, and a fuzz corpus (chaos_fuzz) is interleaved with canary events on the very partitions
the pods use. After the faults stop and the pipeline settles, the apiservers, PostgreSQL and the dead-letter topic
are read and compared.

The run's isolation (topic suffix, cluster ids, namespace, node names, consumer groups) and its fleet come from
PipelineRun, so a chaos run shares Kafka, PostgreSQL and the apiservers with anything else running on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from kubernetes_asyncio.client.exceptions import ApiException
from sqlalchemy import func, select

from gpuplace.adapters.kafka import admin_client, client_options, cluster_partitioner, ensure_topics, partition_of
from gpuplace.adapters.kube.cluster_api import raw_json
from gpuplace.adapters.kube.vocabulary import ASSIGNMENT
from gpuplace.adapters.postgres import migrate
from gpuplace.adapters.postgres.tables import allocations, gpus, pods
from gpuplace.bootstrap import database
from gpuplace.contracts import topics
from gpuplace.contracts.events import PodEvent
from gpuplace.core.model import Node
from gpuplace.harness import chaos_fuzz
from gpuplace.harness.chaos_faults import ServiceProcess, Supervisor, restart_component
from gpuplace.harness.chaos_probes import DeadLetterTap, LagMonitor, overlap
from gpuplace.harness.chaos_truth import TruthCounts, TruthFaults
from gpuplace.harness.pipeline_run import ClusterApis, PipelineRun, RunConfig, list_pods_json, pod_manifest
from gpuplace.settings import Settings
from gpuplace.sim import robotics_fleet

log = logging.getLogger(__name__)
Progress = Callable[[str, int, int], None]
CANARY_NAMESPACE = "chaos-canary"  # canary pods exist only as events: nothing in the apiservers to clean up
CANARY_ERROR = "chaos canary: a pod event that only proves its partition is read; never placed"
# Which services a kill picks, by weight: placement holds the state worth corrupting; watchers split their share.
KILL_WEIGHTS = {"placement": 2.0, "cluster-watcher": 1.0}
RECONCILE_S = 15.0  # placement's reconciliation interval in the run (GPUPLACE_RECONCILE_INTERVAL_S)
CONSUMERS = {"placement": (topics.PODS, topics.NODES, topics.PLACEMENTS), "telemetry-ingest": (topics.TELEMETRY,),
             "latency-ingest": (topics.LATENCY,)}


@dataclass
class ChaosConfig:
    kubeconfigs: dict[str, str]  # apiserver name -> kubeconfig
    nodes: int = 24
    pods: int = 400
    kills: int = 50
    fuzz: int = 5000
    seed: int = 7
    kafka_restarts: int = 1
    postgres_restarts: int = 1
    kill_interval_s: float = 6.0  # the faults phase lasts kills x this (at least min_phase_s)
    min_phase_s: float = 20.0
    restart_delay_s: tuple[float, float] = (0.5, 3.0)  # a killed service comes back after a delay drawn here
    churn: float = 0.15  # this share of the pods is deleted again, 0.5-8 s after it was created
    canary_every_s: float = 1.0  # one canary pod event per cluster this often
    stall_threshold_s: float = 30.0
    settle_s: float = 90.0  # after the faults: no progress for this long, and what is not done is reported
    timeout_s: float = 3600.0
    policy: str | None = None
    run_id: str = field(default_factory=lambda: "c" + uuid.uuid4().hex[:5])
    run_dir: Path | None = None  # service logs; default: a temporary directory named for the run
    keep: bool = False
    truth: TruthCounts = field(default_factory=TruthCounts)  # faults on the apiserver's truth (chaos_truth)

    @property
    def phase_s(self) -> float:
        return max(self.kills * self.kill_interval_s, self.min_phase_s)


@dataclass
class ChaosResult:
    run_id: str
    config: dict[str, Any]
    clusters: dict[str, str]
    run_dir: str
    seconds: float
    pods: dict[str, int]  # submitted, deleted by churn, live, bound, waiting (unschedulable/invalid), lost
    lost: list[str]  # namespace/name of pods neither bound nor recorded waiting (first 20)
    bound_twice: int  # pods with two `bound` decisions in PostgreSQL
    node_mismatch: list[str]  # pods whose apiserver node differs from PostgreSQL's (first 20)
    gpus_overcommitted: dict[str, int]  # by PostgreSQL allocations, by the apiservers' assignment annotations
    faults: dict[str, Any]  # kills by service, restarts and their seconds, unexpected exits
    fuzz: dict[str, Any]  # sent, dead-lettered (distinct / copies), missing by kind and topic
    other_dead_letters: list[dict[str, str]]  # letters whose original the bench did not send (first 20)
    canaries: dict[str, Any]  # sent, stored, slowest by partition
    stalls: dict[str, dict[str, float | int]]  # per watched partition: longest stall, max lag
    info: dict[str, Any]  # not invariants, but worth a look: leaked allocations, GPU accounting drift
    truth: dict[str, Any]  # node re-creations, forged records and what became of them, missed deletions

    @property
    def invariants(self) -> dict[str, bool]:
        stalled = [k for k, v in self.stalls.items() if v["longest_stall_s"] > self.config["stall_threshold_s"]]
        slow_canary = max(self.canaries["slowest_s_by_cluster"].values(), default=0.0)
        return {
            "no pod lost": self.pods["lost"] == 0,
            "nothing held for pods gone": self.info["allocations_of_gone_pods"] == 0,
            "no pod bound twice": self.bound_twice == 0 and not self.node_mismatch,
            "no GPU over-committed": not any(self.gpus_overcommitted.values()),
            "every fuzz record dead-lettered": self.fuzz["dead_lettered"] == self.fuzz["sent"],
            "no partition stalled": not stalled and self.canaries["stored"] == self.canaries["sent"]
            and slow_canary <= self.config["stall_threshold_s"],
        }

    @property
    def passed(self) -> bool:
        return all(self.invariants.values())

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "invariants": self.invariants, "passed": self.passed}


class ChaosRun:
    def __init__(self, config: ChaosConfig, settings: Settings, progress: Progress | None = None) -> None:
        if not config.kubeconfigs:
            raise ValueError("no cluster to run in: start the stack (deploy/local/stack.sh up) or set KUBECONFIG")
        self.config = config
        self.settings = settings
        self.progress = progress or (lambda stage, done, total: None)
        self.layout = PipelineRun(RunConfig(kubeconfigs=config.kubeconfigs, nodes=config.nodes, pods=config.pods,
                                            seed=config.seed, policy=config.policy, run_id=config.run_id),
                                  settings, self.progress)
        self.clusters = self.layout.clusters
        self.run_dir = config.run_dir or Path(tempfile.gettempdir()) / f"gpuplace-chaos-{config.run_id}"
        self.rng = random.Random(config.seed)
        self.clock0 = time.monotonic()  # every at_s of the report counts from here
        self.supervisor = Supervisor(self._processes(), self.clock0)
        self.tap = DeadLetterTap(settings.kafka, topics.DEADLETTER + self.layout.suffix)
        self.lag = LagMonitor(settings.kafka, {})
        self.fuzz_sent: dict[str, chaos_fuzz.FuzzRecord] = {}  # sha256 -> record (its value dropped: see _send)
        self.canaries_sent: dict[tuple[str, str], float] = {}  # (cluster, uid) -> wall-clock send time
        self.submitted: dict[str, str] = {}  # cluster/name -> cluster
        self.deleted: set[str] = set()
        self.restarts: list[dict[str, Any]] = []
        self.kafka_away: list[list[float | None]] = []  # wall-clock windows of Kafka restarts, for the canaries
        self.truth = TruthFaults(self.layout, self.supervisor, config.truth, config.seed,
                                 lambda: round(time.monotonic() - self.clock0, 1), settings.region)

    # -- the run ---------------------------------------------------------------------------------------------
    async def run(self) -> ChaosResult:
        """Fleet up, services up, faults and workload together, settle, measure; always stop and clean up."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        await migrate.upgrade_async(self.settings.database_url.get_secret_value())
        await ensure_topics(self.settings.kafka, [t + self.layout.suffix for t in topics.ALL_TOPICS])
        self.lag.watched = await self._watched_partitions()
        started = time.monotonic()
        stop = asyncio.Event()
        background: list[asyncio.Task[None]] = []
        async with ClusterApis(self.config.kubeconfigs) as apis, database(self.settings) as uow_factory:
            fleets = self.layout._fleets()
            try:
                await self.layout._create_fleet(apis, fleets)
                self.supervisor.start_all()
                background = [asyncio.create_task(c) for c in (self.supervisor.run(stop), self.tap.run(stop),
                                                               self.lag.run(stop))]
                await self.layout._wait_inventory(fleets)
                await self._faults_and_workload(apis, fleets, uow_factory)
                await self._settle(apis, uow_factory)
                return await self._result(apis, uow_factory, fleets, time.monotonic() - started)
            finally:
                stop.set()
                await asyncio.gather(*background, return_exceptions=True)
                self.supervisor.stop_all()
                if not self.config.keep:
                    with contextlib.suppress(Exception):
                        await self.layout.cleanup(apis, fleets)

    def _processes(self) -> list[ServiceProcess]:
        """The run's services as processes (PipelineRun.service_processes), each as its own Kafka user. Their
        consumer groups are the default ones (gpuplace.<service>.run-…: the run's suffix keeps them apart), which
        the stack's ACL table grants each service (deploy/local/kafka/acls.txt)."""
        # deletions a killed cluster-watcher missed are found by placement's reconciliation, on its restart and
        # this often: the settle phase waits for it
        return self.layout.service_processes(self.run_dir, GPUPLACE_LOG_LEVEL="INFO",
                                             GPUPLACE_RECONCILE_INTERVAL_S=str(RECONCILE_S))

    async def _watched_partitions(self) -> dict[str, list[TopicPartition]]:
        """Per consumer group, the partitions the run's clusters write to (cluster_partitioner)."""
        async with admin_client(self.settings.kafka) as admin:
            described = await admin.describe_topics([t + self.layout.suffix for t in chaos_fuzz.FUZZ_TOPICS])
        counts = {t["topic"]: len(t["partitions"]) for t in described}
        return {f"gpuplace.{service}{self.layout.suffix}": sorted(
            {TopicPartition(t + self.layout.suffix, partition_of(c, counts[t + self.layout.suffix]))
             for t in names for c in self.clusters}) for service, names in CONSUMERS.items()}

    # -- faults and workload, together ---------------------------------------------------------------------------
    async def _faults_and_workload(self, apis: dict[str, Any], fleets: dict[str, list[Node]],
                                   uow_factory: Any) -> None:
        started = time.monotonic()
        producer = AIOKafkaProducer(**client_options(self.settings.kafka), partitioner=cluster_partitioner,
                                    max_request_size=2**21, request_timeout_ms=15000)
        await producer.start()
        try:
            await asyncio.gather(self._submit(apis, started), self._fuzz_and_canaries(producer, started),
                                 self._kills(started), self._infra_restarts(started),
                                 self.truth.run(apis, fleets, producer, uow_factory, self.config.phase_s))
        finally:
            with contextlib.suppress(Exception):
                await producer.stop()

    async def _at(self, started: float, offset_s: float) -> None:
        await asyncio.sleep(max(0.0, started + offset_s - time.monotonic()))

    async def _submit(self, apis: dict[str, Any], started: float) -> None:
        """Pods spread over the faults phase, round-robin over the clusters; some deleted again soon after."""
        names, step = list(self.clusters), self.config.phase_s / max(1, self.config.pods)
        churn: list[asyncio.Task[None]] = []
        for i, (pod, service_ms) in enumerate(robotics_fleet.pods(self.config.pods, seed=self.config.seed)):
            await self._at(started, i * step)
            cluster = names[i % len(names)]
            manifest = pod_manifest(pod, self.layout.namespace, self.settings.scheduler_name, service_ms)
            api = apis[self.clusters[cluster]]
            await _retry(functools.partial(_create_pod, api, self.layout.namespace, manifest))
            key = f"{cluster}/{manifest['metadata']['name']}"
            self.submitted[key] = cluster
            if self.rng.random() < self.config.churn:
                churn.append(asyncio.create_task(self._delete_later(api, key, self.rng.uniform(0.5, 8.0))))
            self.progress("pods", len(self.submitted), self.config.pods)
        await asyncio.gather(*churn)

    async def _delete_later(self, api: Any, key: str, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        name = key.split("/", 1)[1]
        try:
            await api.core.delete_namespaced_pod(name, self.layout.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise
        self.deleted.add(key)

    async def _fuzz_and_canaries(self, producer: AIOKafkaProducer, started: float) -> None:
        """The corpus spread over the faults phase, a canary pod event per cluster every canary_every_s."""
        total, sent, next_canary = self.config.fuzz, 0, 0.0
        corpus = chaos_fuzz.records(total, clusters=list(self.clusters), seed=self.config.seed)
        while True:
            elapsed = time.monotonic() - started
            due = total if elapsed >= self.config.phase_s else int(total * elapsed / self.config.phase_s)
            for record in _take(corpus, due - sent):
                await self._send(producer, record)
                sent += 1
            self.progress("fuzz sent", sent, total)
            if elapsed >= next_canary:
                await self._canaries(producer)
                next_canary = elapsed + self.config.canary_every_s
            if sent >= total and elapsed >= self.config.phase_s:
                return
            await asyncio.sleep(0.2)

    async def _send(self, producer: AIOKafkaProducer, record: chaos_fuzz.FuzzRecord) -> None:
        await _retry(lambda: producer.send_and_wait(record.topic + self.layout.suffix, record.value, key=record.key,
                                                    headers=list(record.headers)))
        slim = chaos_fuzz.FuzzRecord(record.index, record.topic, record.kind, record.key, b"", record.headers)
        self.fuzz_sent[record.sha256] = slim  # oversize values are not kept: the digest is what is matched

    async def _canaries(self, producer: AIOKafkaProducer) -> None:
        for cluster in self.clusters:
            index = len(self.canaries_sent)
            event = PodEvent(cluster=cluster, kind="pending", namespace=CANARY_NAMESPACE, name=f"canary-{index}",
                             uid=f"canary-{self.config.run_id}-{index}", request_error=CANARY_ERROR)
            body = event.model_dump_json(by_alias=True).encode()
            await _retry(functools.partial(producer.send_and_wait, topics.PODS + self.layout.suffix, body,
                                           key=event.kafka_key(), headers=list(chaos_fuzz.JSON_HEADER)))
            self.canaries_sent[(cluster, event.uid)] = time.time()

    async def _kills(self, started: float) -> None:
        """`kills` SIGKILLs spread over the phase, each of a live service drawn by KILL_WEIGHTS."""
        done, step = 0, self.config.phase_s / max(1, self.config.kills)
        while done < self.config.kills:
            await self._at(started, (done + self.rng.uniform(0.2, 0.8)) * step)
            while not self.supervisor.kill(self._victim(), self.rng.uniform(*self.config.restart_delay_s)):
                await asyncio.sleep(0.5)  # that one is still down from the last kill: draw again
            done += 1
            self.progress("kills", done, self.config.kills)

    def _victim(self) -> str:
        labels = [p.label for p in self.supervisor.processes.values() if p.service in KILL_WEIGHTS]
        watchers = sum(1 for label in labels if label.startswith("cluster-watcher"))
        weights = [KILL_WEIGHTS["placement"] if label == "placement" else KILL_WEIGHTS["cluster-watcher"] / watchers
                   for label in labels]
        return self.rng.choices(labels, weights)[0]

    async def _infra_restarts(self, started: float) -> None:
        """Kafka and PostgreSQL restarts, one at a time, spread over the phase in a seeded order."""
        plan = ["kafka"] * self.config.kafka_restarts + ["postgres"] * self.config.postgres_restarts
        self.rng.shuffle(plan)
        for j, name in enumerate(plan):
            await self._at(started, (j + 0.5) * self.config.phase_s / len(plan))
            at = round(time.monotonic() - self.clock0, 1)
            # while Kafka itself is away no consumer can read: that time is not counted as a partition's stall
            away, away_wall = [time.monotonic(), None], [time.time(), None]
            if name == "kafka":
                self.lag.away.append(away)
                self.kafka_away.append(away_wall)
            try:
                seconds = await restart_component(name, self.run_dir / f"restart-{name}.log")
                self.restarts.append({"component": name, "at_s": at, "seconds": round(seconds, 1)})
            except Exception as exc:  # noqa: BLE001 - reported; the run goes on and its invariants still count
                self.restarts.append({"component": name, "at_s": at, "error": str(exc)})
            away[1], away_wall[1] = time.monotonic(), time.time()
            self.progress("restarts", j + 1, len(plan))

    # -- settling ------------------------------------------------------------------------------------------------
    async def _settle(self, apis: dict[str, Any], uow_factory: Any) -> None:
        """Until every live pod is bound or recorded waiting, every canary stored, every fuzz record dead-lettered
        and nothing lags; or until nothing moved for settle_s (what is not done then is what the report shows)."""
        deadline = time.monotonic() + self.config.timeout_s
        last, last_change = None, time.monotonic()
        while time.monotonic() < deadline:
            try:
                state = await self._progress_state(apis, uow_factory)
            except Exception as exc:  # noqa: BLE001 - the database may still be coming back
                log.info("settle: %s", exc)
                await asyncio.sleep(1.0)
                continue
            if state != last:
                last, last_change = state, time.monotonic()
            undone, canaries, letters = state
            self.progress("settle", self.config.pods - undone, self.config.pods)
            sent = len(self.fuzz_sent) + len(self.truth.forged)  # forged records are dead-lettered too
            self.progress("dead-lettered", letters, sent)
            done = (not undone and canaries == len(self.canaries_sent) and letters == sent
                    and self.supervisor.all_up() and self.lag.lagging() == 0)
            if done or time.monotonic() - last_change >= self.config.settle_s:
                return
            await asyncio.sleep(1.0)

    async def _progress_state(self, apis: dict[str, Any], uow_factory: Any) -> tuple[int, int, int]:
        api_pods = await self._api_pods(apis)
        db = await self._db_pods(uow_factory)
        live = {(c, p["metadata"]["uid"]) for c, items in api_pods.items() for p in items}
        undone = len(lost_pods(api_pods, db)) + (await self._accounting(uow_factory, live))["allocations_of_gone_pods"]
        canaries = len(await self._canary_rows(uow_factory))
        ours = self.fuzz_sent.keys() | self.truth.forged_digests()
        letters = sum(1 for sha in ours if sha in self.tap.copies)
        return undone, canaries, letters

    # -- reading the truth ---------------------------------------------------------------------------------------
    async def _api_pods(self, apis: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        return {c: await list_pods_json(apis[name], self.layout.namespace) for c, name in self.clusters.items()}

    async def _db_pods(self, uow_factory: Any) -> dict[tuple[str, str], Any]:
        """(cluster, uid) -> the pods row of the run's namespace."""
        query = select(pods.c.cluster, pods.c.uid, pods.c.name, pods.c.state, pods.c.node).where(
            pods.c.cluster.in_(list(self.clusters)), pods.c.namespace == self.layout.namespace)
        async with uow_factory.engine.connect() as conn:
            return {(r.cluster, r.uid): r for r in (await conn.execute(query)).all()}

    async def _canary_rows(self, uow_factory: Any) -> list[Any]:
        query = select(pods.c.cluster, pods.c.uid, pods.c.first_seen_at).where(
            pods.c.cluster.in_(list(self.clusters)), pods.c.namespace == CANARY_NAMESPACE)
        async with uow_factory.engine.connect() as conn:
            return list((await conn.execute(query)).all())

    async def _db_overcommitted(self, uow_factory: Any) -> int:
        """GPUs whose allocations add up to more memory (or share) than the GPU has."""
        held = select(allocations.c.cluster, allocations.c.node, allocations.c.gpu_index,
                      func.sum(allocations.c.memory_mib).label("memory"),
                      func.sum(allocations.c.share_milli).label("share")).where(
            allocations.c.cluster.in_(list(self.clusters))).group_by(
            allocations.c.cluster, allocations.c.node, allocations.c.gpu_index).subquery()
        query = select(func.count()).select_from(held.join(gpus, (gpus.c.cluster == held.c.cluster) & (
            gpus.c.node == held.c.node) & (gpus.c.index == held.c.gpu_index))).where(
            (held.c.memory > gpus.c.memory_total_mib) | (held.c.share > 1000))
        async with uow_factory.engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def _accounting(self, uow_factory: Any, live_uids: set[tuple[str, str]]) -> dict[str, int]:
        """Allocations of pods no longer in the apiservers, and GPUs whose assigned memory is not the sum of
        their allocations: neither breaks an invariant by itself, both are capacity the fleet has lost."""
        async with uow_factory.engine.connect() as conn:
            held = (await conn.execute(select(allocations.c.cluster, allocations.c.pod_uid).where(
                allocations.c.cluster.in_(list(self.clusters))))).all()
            sums = select(allocations.c.cluster, allocations.c.node, allocations.c.gpu_index,
                          func.sum(allocations.c.memory_mib).label("memory")).group_by(
                allocations.c.cluster, allocations.c.node, allocations.c.gpu_index).subquery()
            drift = (await conn.execute(select(func.count()).select_from(gpus.outerjoin(sums, (
                gpus.c.cluster == sums.c.cluster) & (gpus.c.node == sums.c.node) & (
                gpus.c.index == sums.c.gpu_index))).where(
                gpus.c.cluster.in_(list(self.clusters)),
                gpus.c.memory_assigned_mib != func.coalesce(sums.c.memory, 0)))).scalar_one()
        leaked = {(r.cluster, r.pod_uid) for r in held} - live_uids
        return {"allocations_of_gone_pods": len(leaked), "gpus_with_accounting_drift": int(drift)}

    async def _result(self, apis: dict[str, Any], uow_factory: Any, fleets: dict[str, list[Node]],
                      seconds: float) -> ChaosResult:
        api_pods = await _retry(lambda: self._api_pods(apis))
        db = await _retry(lambda: self._db_pods(uow_factory))
        lost = lost_pods(api_pods, db)
        live = {(c, p["metadata"]["uid"]) for c, items in api_pods.items() for p in items}
        async with uow_factory() as uow:
            twice = sum([await uow.decisions.count_bound_twice(c) for c in self.clusters])
        bound = sum(1 for items in api_pods.values() for p in items if (p.get("spec") or {}).get("nodeName"))
        waiting = sum(1 for r in db.values() if r.state in ("unschedulable", "invalid"))
        return ChaosResult(
            run_id=self.config.run_id, config=_config_summary(self.config), clusters=self.clusters,
            run_dir=str(self.run_dir), seconds=round(seconds, 1),
            pods={"submitted": len(self.submitted), "deleted_by_churn": len(self.deleted),
                  "live": sum(len(v) for v in api_pods.values()), "bound": bound, "waiting": waiting,
                  "lost": len(lost)},
            lost=lost[:20], bound_twice=twice, node_mismatch=node_mismatches(api_pods, db)[:20],
            gpus_overcommitted={"postgres": await self._db_overcommitted(uow_factory),
                                "apiservers": api_overcommitted(api_pods, fleets)},
            faults=self._faults(), fuzz=self._fuzz_summary(), other_dead_letters=self._other_letters(),
            canaries=await self._canary_summary(uow_factory), stalls=self.lag.longest(),
            info={**await self._accounting(uow_factory, live), "lag_samples": self.lag.samples,
                  "lag_samples_failed": self.lag.failed_samples},
            truth=self.truth.summary(self.tap.copies),
        )

    def _faults(self) -> dict[str, Any]:
        return {"kills": dict(self.supervisor.kills), "kill_log": self.supervisor.kill_log, "restarts": self.restarts,
                "service_starts": {label: p.starts for label, p in self.supervisor.processes.items()},
                "unexpected_exits": [asdict(e) for e in self.supervisor.unexpected]}

    def _fuzz_summary(self) -> dict[str, Any]:
        missing = [r for sha, r in self.fuzz_sent.items() if sha not in self.tap.copies]
        return {
            "sent": len(self.fuzz_sent),
            "dead_lettered": len(self.fuzz_sent) - len(missing),
            "dead_letter_copies": sum(self.tap.copies[sha] for sha in self.fuzz_sent),
            "by_kind": dict(Counter(r.kind for r in self.fuzz_sent.values())),
            "missing_by_kind": dict(Counter(r.kind for r in missing)),
            "missing_by_topic": dict(Counter(r.topic for r in missing)),
            "missing_first": [{"index": r.index, "kind": r.kind, "topic": r.topic, "key": r.key.decode()}
                              for r in sorted(missing, key=lambda r: r.index)[:20]],
        }

    def _other_letters(self) -> list[dict[str, str]]:
        ours = self.fuzz_sent.keys() | self.truth.forged_digests()
        return [self.tap.letters[sha] for sha in self.tap.copies if sha not in ours][:20]

    async def _canary_summary(self, uow_factory: Any) -> dict[str, Any]:
        """The slowest canary per cluster (= per pods partition): acknowledged by the broker to stored in
        PostgreSQL, less the time Kafka itself was away meanwhile; the raw slowest beside it."""
        rows = await _retry(lambda: self._canary_rows(uow_factory))
        slowest: dict[str, float] = {}
        raw: dict[str, float] = {}
        for row in rows:
            sent = self.canaries_sent.get((row.cluster, row.uid))
            if sent is not None:
                stored = _epoch(row.first_seen_at)
                waited = stored - sent - overlap(sent, stored, self.kafka_away)
                slowest[row.cluster] = max(slowest.get(row.cluster, 0.0), round(waited, 2))
                raw[row.cluster] = max(raw.get(row.cluster, 0.0), round(stored - sent, 2))
        return {"sent": len(self.canaries_sent), "stored": len(rows), "slowest_s_by_cluster": slowest,
                "slowest_raw_s_by_cluster": raw}


# -- pure helpers -------------------------------------------------------------------------------------------------
def lost_pods(api_pods: dict[str, list[dict[str, Any]]], db: dict[tuple[str, str], Any]) -> list[str]:
    """Live pods (not being deleted) the apiserver shows unbound and PostgreSQL does not record as waiting."""
    lost = []
    for cluster, items in api_pods.items():
        for pod in items:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or (pod.get("spec") or {}).get("nodeName"):
                continue
            row = db.get((cluster, meta["uid"]))
            if row is None or row.state not in ("unschedulable", "invalid"):
                lost.append(f"{cluster}/{meta['name']} ({row.state if row else 'not in PostgreSQL'})")
    return sorted(lost)


def node_mismatches(api_pods: dict[str, list[dict[str, Any]]], db: dict[tuple[str, str], Any]) -> list[str]:
    """Pods bound in the apiserver to one node while PostgreSQL holds them on another."""
    found = []
    for cluster, items in api_pods.items():
        for pod in items:
            node, row = (pod.get("spec") or {}).get("nodeName"), db.get((cluster, pod["metadata"]["uid"]))
            if node and row is not None and row.node and row.node != node:
                found.append(f"{cluster}/{pod['metadata']['name']}: apiserver {node}, PostgreSQL {row.node}")
    return sorted(found)


def api_overcommitted(api_pods: dict[str, list[dict[str, Any]]], fleets: dict[str, list[Node]]) -> int:
    """GPUs whose pods' assignment annotations add up to more memory than the GPU has (as pipeline_run counts)."""
    assigned: Counter[tuple[str, str, int]] = Counter()
    for cluster, items in api_pods.items():
        for pod in items:
            node = (pod.get("spec") or {}).get("nodeName")
            raw = (pod["metadata"].get("annotations") or {}).get(ASSIGNMENT)
            if not node or not raw:
                continue
            for gpu in json.loads(raw)["gpus"]:
                assigned[(cluster, node, gpu["index"])] += gpu["memory_mib"]
    capacity = {(c, n.name, g.index): g.memory_mib for c, f in fleets.items() for n in f for g in n.gpus}
    return sum(1 for key, used in assigned.items() if used > capacity.get(key, 0))


async def _create_pod(api: Any, namespace: str, manifest: dict[str, Any]) -> None:
    await raw_json(await api.core.create_namespaced_pod(namespace, manifest, _preload_content=False))


def _config_summary(config: ChaosConfig) -> dict[str, Any]:
    skip = {"kubeconfigs", "run_dir"}  # `truth` stays: asdict made it a dict of its counts
    summary = {k: v for k, v in asdict(config).items() if k not in skip}
    summary["phase_s"] = config.phase_s
    return summary


def _epoch(moment: datetime) -> float:
    return moment.timestamp()


def _take(iterator: Any, n: int) -> list[Any]:
    return [item for _, item in zip(range(max(0, n)), iterator, strict=False)]


async def _retry(call: Callable[[], Awaitable[Any]], timeout_s: float = 180.0) -> Any:
    """`call` until it succeeds: Kafka or PostgreSQL may be restarting (by this very run)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await call()
        except ApiException as exc:
            if exc.status < 500 and exc.status != 429:
                raise
            failure: Exception = exc
        except Exception as exc:  # noqa: BLE001 - connection errors of aiokafka, asyncpg, aiohttp alike
            failure = exc
        if time.monotonic() > deadline:
            raise failure
        log.info("retrying after %s", failure)
        await asyncio.sleep(1.0)


__all__ = ["CANARY_NAMESPACE", "ChaosConfig", "ChaosResult", "ChaosRun", "api_overcommitted", "lost_pods",
           "node_mismatches"]
