"""Run the whole pipeline on the local stack against a KWOK fleet and a stream of perception pods.

What `gpuplace demo`, the end-to-end test and `gpuplace bench pipeline` share. One run is isolated from
every other by a run id: its cluster ids, topic suffix, consumer groups, namespace and node names all
carry it, so runs can share one Kafka, one PostgreSQL and the same kube-apiservers. The run cleans up
its nodes and namespace in the clusters when it ends (KWOK's fleet would otherwise grow run after run).

Its services share one Telemetry, served while the run lasts on a free port of the loopback interface
(`http_url`: /metrics, /healthz, /readyz), so that runs, tests and the chaos bench never collide on a port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.kafka import delete_topics, ensure_topics
from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.adapters.kube.enforcement import DECLARED
from gpuplace.adapters.kube.informer import list_and_watch
from gpuplace.adapters.kube.translate import GPU_COUNT, GPU_MEMORY, GPU_PRODUCT
from gpuplace.adapters.kube.vocabulary import ASSIGNMENT
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import cluster_api, database
from gpuplace.contracts import topics
from gpuplace.core.model import Node, Pod
from gpuplace.harness.chaos_faults import ServiceProcess, service_env
from gpuplace.harness.kafka_users import kafka_env
from gpuplace.settings import Settings
from gpuplace.sim import robotics_fleet
from gpuplace.usecases.pod_states import PodState
from services import http_server
from services.cluster_watcher import app as cluster_watcher
from services.latency_ingest import app as latency_ingest
from services.placement import app as placement
from services.telemetry import Telemetry
from services.telemetry_ingest import app as telemetry_ingest

FLEET_LABEL = "gpuplace.io/fleet"
# KWOK nodes run no pod on a GPU: they declare what a real node's enforcement would do (adapters/kube/enforcement.py),
# so memory slices go there as they would to nodes that confine them, with no warning per pod
SIMULATED = {DECLARED: "simulated"}
# The priorities robotics_fleet.pods() draws, as PriorityClasses (the Priority admission plugin sets spec.priority).
PRIORITY_CLASSES = {0: "gpuplace-best-effort", 100: "gpuplace-standard", 1000: "gpuplace-safety-critical"}
Progress = Callable[[str, int, int], None]
Hook = Callable[["PipelineRun"], Awaitable[None]]


@dataclass
class RunConfig:
    kubeconfigs: dict[str, str]  # apiserver name -> kubeconfig
    nodes: int = 100  # in total, split over the clusters
    pods: int = 800
    gpus_per_node: int = 8
    seed: int = 7
    policy: str | None = None  # None: the settings' (GPUPLACE_POLICY)
    placement_workers: int = 1  # in one consumer group: they split the clusters between them
    timeout_s: float = 600.0
    settle_s: float = 5.0  # no progress for this long with nothing pending in flight: done
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    keep: bool = False  # leave nodes and pods in the clusters after the run
    keep_log: bool = False  # leave the run's topics, its event log (what `gpuplace replay` and `export` read)
    regions: dict[str, str] = field(default_factory=dict)  # apiserver name -> its cluster's region (else settings')
    processes: bool = False  # each service its own process (`gpuplace service NAME`), as deployed; else tasks here
    rate: float | None = None  # pods per second, spread evenly (a steady stream); None: a burst, as fast as accepted


@dataclass
class RunResult:
    run_id: str
    clusters: dict[str, str]  # cluster id -> apiserver name
    namespace: str
    pods_submitted: int
    pods_bound: int
    pods_unschedulable: int
    gpus_overcommitted: int
    bound_twice: int
    gpus_used: int
    gpus_total: int
    gpu_memory_used_pct: float
    pending_to_bound_ms: dict[str, float]
    binds_per_s: float
    seconds: float
    bound_at: dict[str, float] = field(repr=False, default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds each component of the stack spent during the run (harness/cpu_accounting), when measured."""
    burst_cpu_s: dict[str, float] = field(default_factory=dict)
    """The same over the burst alone: from the first submit until every pod was bound (or waits for a reason)."""

    def summary(self) -> dict[str, Any]:
        keys = ("run_id", "clusters", "pods_submitted", "pods_bound", "pods_unschedulable", "gpus_overcommitted",
                "bound_twice", "gpus_used", "gpus_total", "gpu_memory_used_pct", "pending_to_bound_ms",
                "binds_per_s", "seconds", "cpu_s", "burst_cpu_s")
        return {k: getattr(self, k) for k in keys}


async def _supervise(processes: list[ServiceProcess], stop: asyncio.Event) -> None:
    """Start the processes, fail if one exits before `stop`, and stop them all (SIGTERM, then SIGKILL) after."""
    for process in processes:
        process.start()
    try:
        while not stop.is_set():
            for process in processes:
                if not process.alive:
                    code = process.process.returncode if process.process else None
                    raise RuntimeError(f"{process.label} exited ({code}); its log: {process.log}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
    finally:
        await asyncio.gather(*(asyncio.to_thread(process.stop) for process in processes))


def kwok_node_manifest(node: Node, run_id: str) -> dict[str, Any]:
    """A KWOK node for `node`, labelled with the run's fleet and its GPUs as the device plugin would label them."""
    gpus = len(node.gpus)
    capacity = {"cpu": f"{node.cpu_milli}m", "memory": f"{node.memory_mib}Mi", "pods": "256",
                "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": node.name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {FLEET_LABEL: run_id, "type": "kwok", "kubernetes.io/hostname": node.name, **SIMULATED,
                       GPU_PRODUCT: node.gpu_model, GPU_MEMORY: str(node.gpu_memory_mib), GPU_COUNT: str(gpus)},
        },
        "spec": {},
        "status": {"allocatable": capacity, "capacity": capacity},
    }


def pod_manifest(pod: Pod, namespace: str, scheduler: str, service_ms: float | None = None) -> dict[str, Any]:
    """A perception pod asking for `pod`'s GPU memory, deadline and frame rate through gpuplace's annotations."""
    name = pod.name.rsplit("/", 1)[-1]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": {
            "gpuplace.io/gpu-memory": f"{pod.gpu.memory_mib}Mi",
            "gpuplace.io/deadline-ms": str(pod.deadline_ms), "gpuplace.io/frame-rate": str(pod.frame_rate_hz),
            "gpuplace.io/workload": pod.workload_class or "unknown",
            **({"gpuplace.io/service-ms": f"{service_ms:.2f}"} if service_ms else {}),
        }},
        "spec": {
            "schedulerName": scheduler, "priorityClassName": PRIORITY_CLASSES[pod.priority],
            "containers": [{"name": "perception", "image": "registry.local/perception:1",
                            "resources": {"requests": {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"}}}],
        },
    }


def policy_env(settings: Settings) -> dict[str, str]:
    """The policy's settings as the environment variables placement reads (those set; the rest keep their defaults).
    Service processes start from a clean environment (service_env), so a bench given them must pass them on."""
    env = {"GPUPLACE_LATENCY_MARGIN": str(settings.latency_margin)}
    if settings.expected_shapes:
        env["GPUPLACE_EXPECTED_SHAPES"] = settings.expected_shapes
    if settings.whole_gpu_reserve is not None:
        env["GPUPLACE_WHOLE_GPU_RESERVE"] = str(settings.whole_gpu_reserve)
    return env


class PipelineRun:
    def __init__(self, config: RunConfig, settings: Settings, progress: Progress | None = None) -> None:
        if not config.kubeconfigs:
            raise ValueError("no cluster to run in: start the stack (deploy/local/stack.sh up) or set KUBECONFIG")
        self.config = config
        self.settings = settings
        self.policy = config.policy or settings.policy
        self.progress = progress or (lambda stage, done, total: None)
        self.clusters = {f"{name}-{config.run_id}": name for name in config.kubeconfigs}
        self.namespace = f"gpuplace-run-{config.run_id}"
        self.suffix = f".run-{config.run_id}"
        self.submitted_at: dict[str, float] = {}
        self.bound_at: dict[str, float] = {}
        self.bound_node: dict[str, str] = {}
        self.telemetry = Telemetry()
        self.http_url = ""  # while the run lasts: http://127.0.0.1:<port>, the services' /metrics, /readyz

    def _settings(self, **overrides: Any) -> Settings:
        # cluster-watchers elect in the run's namespace, so their Leases go when the run cleans up
        return self.settings.model_copy(update={"topic_suffix": self.suffix, "policy": self.policy,
                                                "namespace": self.namespace, "http_port": 0,
                                                "leader_election_namespace": self.namespace,
                                                "node_label_selector": f"{FLEET_LABEL}={self.config.run_id}",
                                                **overrides})

    async def run(self, *, before_submit: Hook | None = None, after_drain: Hook | None = None) -> RunResult:
        """Fleet up, services up, inventory seen, [before_submit], pods submitted, settled, [after_drain],
        measured, cleaned up."""
        await self._prepare()
        stop = asyncio.Event()
        started = time.monotonic()
        tasks: list[asyncio.Task[None]] = []
        async with ClusterApis(self.config.kubeconfigs) as apis, \
                http_server.serving(self.telemetry, 0, host="127.0.0.1") as (host, port):
            self.http_url = f"http://{host}:{port}"
            fleets = self._fleets()
            try:
                await self._create_fleet(apis, fleets)
                tasks += self._start_services(stop)
                tasks += [asyncio.create_task(self._track(apis[name], cluster, stop))
                          for cluster, name in self.clusters.items()]
                await self._wait_inventory(fleets)
                if before_submit is not None:
                    await before_submit(self)
                await self._submit(apis)
                await self._wait_done(tasks)
                if after_drain is not None:
                    await after_drain(self)
                return await self._result(apis, fleets, time.monotonic() - started)
            finally:
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
                if not self.config.keep:
                    await self.cleanup(apis, fleets)

    # -- setup -----------------------------------------------------------------------------------------
    async def _prepare(self) -> None:
        """What the services need before the run: the schema and the run's topics (`_release` drops the topics)."""
        await migrate.upgrade_async(self.settings.database_url.get_secret_value())
        await ensure_topics(self.settings.kafka, [t + self.suffix for t in topics.ALL_TOPICS])

    async def _release(self) -> None:
        await delete_topics(self.settings.kafka, [t + self.suffix for t in topics.ALL_TOPICS])

    def _pod_body(self, pod: Pod, service_ms: float) -> dict[str, Any]:
        """The manifest a submitted pod gets; the kube-scheduler run asks for the same pod differently."""
        return pod_manifest(pod, self.namespace, self.settings.scheduler_name, service_ms)

    def _fleets(self) -> dict[str, list[Node]]:
        names = list(self.clusters)
        per = np.array_split(np.arange(self.config.nodes), len(names))
        return {cluster: robotics_fleet.fleet(len(idx), gpus_per_node=self.config.gpus_per_node,
                                        seed=self.config.seed + k, prefix=f"{cluster}-n")
                for k, (cluster, idx) in enumerate(zip(names, per, strict=True))}

    async def _create_fleet(self, apis: dict[str, KubeClusterApi], fleets: dict[str, list[Node]]) -> None:
        total = sum(len(f) for f in fleets.values())
        done = 0
        for cluster, nodes in fleets.items():
            api = apis[self.clusters[cluster]]
            await ensure_priority_classes(api)
            await api.core.create_namespace({"metadata": {"name": self.namespace}})  # type: ignore[arg-type]  # a manifest dict: kubernetes_asyncio takes it like a model
            for chunk in chunks(nodes, 32):
                await asyncio.gather(*(create_node(api, kwok_node_manifest(n, self.config.run_id)) for n in chunk))
                done += len(chunk)
                self.progress("nodes", done, total)

    def _start_services(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        if self.config.processes:
            run_dir = Path(tempfile.gettempdir()) / f"gpuplace-run-{self.config.run_id}"
            return [asyncio.create_task(_supervise(self.service_processes(run_dir), stop))]
        kubeconfigs = {cluster: self.config.kubeconfigs[name] for cluster, name in self.clusters.items()}
        telemetry = self.telemetry
        for service in (placement.NAME, telemetry_ingest.NAME, latency_ingest.NAME, cluster_watcher.NAME):
            telemetry.health.expect(service)
        tasks = [asyncio.create_task(placement.run(self._settings(kubeconfigs=kubeconfigs), stop, telemetry=telemetry))
                 for _ in range(self.config.placement_workers)]
        tasks += [asyncio.create_task(svc.run(self._settings(), stop, telemetry=telemetry))
                  for svc in (telemetry_ingest, latency_ingest)]
        for cluster, name in self.clusters.items():
            region = {"region": self.config.regions[name]} if name in self.config.regions else {}
            tasks.append(asyncio.create_task(cluster_watcher.run(
                self._settings(cluster=cluster, **region), stop, kubeconfig=self.config.kubeconfigs[name],
                telemetry=telemetry)))
        return tasks

    def service_processes(self, run_dir: Path, **extra: str) -> list[ServiceProcess]:
        """The run's services as processes, as a deployment runs them: one placement for every cluster, one
        ingest of each kind, one cluster-watcher per cluster; `extra` environment for all of them. Each logs to
        `run_dir` and is a static consumer-group member (a restart takes its partitions back)."""
        run_dir.mkdir(parents=True, exist_ok=True)
        kubeconfigs = {c: self.config.kubeconfigs[name] for c, name in self.clusters.items()}
        common = {
            **kafka_env(self.settings.kafka),
            "GPUPLACE_DATABASE_URL": self.settings.database_url.get_secret_value(),
            "GPUPLACE_TOPIC_SUFFIX": self.suffix, "GPUPLACE_NAMESPACE": self.namespace,
            # a cluster-watcher restarted after a SIGKILL has its GPUPLACE_INSTANCE_ID back, so it resumes its Lease
            # at once instead of waiting for it to expire
            "GPUPLACE_LEADER_ELECTION_NAMESPACE": self.namespace,
            "GPUPLACE_NODE_LABEL_SELECTOR": f"{FLEET_LABEL}={self.config.run_id}",
            "GPUPLACE_POLICY": self.policy, "GPUPLACE_SCHEDULER_NAME": self.settings.scheduler_name,
            "GPUPLACE_BIND_CONCURRENCY": str(self.settings.bind_concurrency),
            # the policy's settings, as the bench was given them: placement decides as the user asked
            **policy_env(self.settings),
            # every service process serves /metrics and /readyz: on a free port each, many run on one machine
            "GPUPLACE_HTTP_PORT": "0",
            **extra,
        }
        first = next(iter(self.clusters))

        def process(label: str, service: str, **env: str) -> ServiceProcess:
            instance = {"GPUPLACE_INSTANCE_ID": f"{label.replace(':', '-')}-{self.config.run_id}"}
            # each service as its own Kafka user where the stack has one (harness/kafka_users)
            kafka = kafka_env(self.settings.kafka, service)
            return ServiceProcess(label, service, service_env({**common, **kafka, **instance, **env}),
                                  run_dir / f"{label.replace(':', '-')}.log")

        found = [process("placement", "placement", GPUPLACE_CLUSTER=first,
                         GPUPLACE_KUBECONFIGS=json.dumps(kubeconfigs))]
        found += [process(name, name) for name in ("telemetry-ingest", "latency-ingest")]
        found += [process(f"cluster-watcher:{c}", "cluster-watcher", GPUPLACE_CLUSTER=c, KUBECONFIG=path,
                          **({"GPUPLACE_REGION": self.config.regions[self.clusters[c]]}
                             if self.clusters[c] in self.config.regions else {}))
                  for c, path in kubeconfigs.items()]
        return found

    async def _wait_inventory(self, fleets: dict[str, list[Node]]) -> None:
        expected = sum(len(f) for f in fleets.values())
        deadline = time.monotonic() + 120
        async with database(self.settings) as uow_factory:
            while time.monotonic() < deadline:
                async with uow_factory() as uow:
                    seen = sum([len(await uow.nodes.load_nodes(c)) for c in self.clusters])
                self.progress("inventory", seen, expected)
                if seen >= expected:
                    return
                await asyncio.sleep(0.5)
        raise TimeoutError(f"placement saw {seen} of {expected} nodes within 120 s")

    async def _submit(self, apis: dict[str, KubeClusterApi]) -> None:
        """Create the run's pods, 24 calls at a time: as fast as the apiservers take them (a burst), or with
        `rate`, pod i not before i / rate seconds after the first (a steady stream, as a fleet's everyday life
        is: the wait a pod sees then is the scheduler's, not the queue of a burst)."""
        names = list(self.clusters)
        pods = robotics_fleet.pods(self.config.pods, seed=self.config.seed)
        slots = asyncio.Semaphore(24)
        start = time.monotonic()
        rate = self.config.rate

        async def create(i: int, pod: Pod, service_ms: float) -> None:
            cluster = names[i % len(names)]
            api = apis[self.clusters[cluster]]
            if rate:
                await asyncio.sleep(max(start + i / rate - time.monotonic(), 0.0))
            async with slots:
                key = f"{cluster}/{pod.name}"
                self.submitted_at[key] = time.monotonic()
                await raw_json(await api.core.create_namespaced_pod(
                    self.namespace, self._pod_body(pod, service_ms),  # type: ignore[arg-type]  # a manifest dict: kubernetes_asyncio takes it like a model
                    _preload_content=False))
                if len(self.submitted_at) % 50 == 0:
                    self.progress("submitted", len(self.submitted_at), len(pods))

        await asyncio.gather(*(create(i, pod, service_ms) for i, (pod, service_ms) in enumerate(pods)))
        self.progress("submitted", len(pods), len(pods))

    async def _track(self, api: KubeClusterApi, cluster: str, stop: asyncio.Event) -> None:
        """Watch the run's pods: the first time a pod shows a node is its bind time."""
        selector = f"metadata.namespace={self.namespace}"
        async for _kind, obj in list_and_watch(api, "pods", stop=stop, field_selector=selector, watch_timeout_s=30):
            node = (obj.get("spec") or {}).get("nodeName")
            key = f"{cluster}/{obj['metadata']['name']}"
            if node and key not in self.bound_at:
                self.bound_at[key] = time.monotonic()
                self.bound_node[key] = node
                if len(self.bound_at) % 25 == 0:
                    self.progress("bound", len(self.bound_at), self.config.pods)
            self._seen(key, obj)

    def _seen(self, key: str, pod: dict[str, Any]) -> None:
        """Every version of a run's pod the watch delivers (after the bind time is taken); for subclasses."""

    async def _wait_done(self, services: list[asyncio.Task[None]]) -> None:
        """Until every pod the run submitted is bound or waits for a reason, or nothing moved for `settle_s`.

        Only the run's own pods count: a hook may add pods of its own to the clusters (a test's scene), and
        counting them let the run end while pods it submitted were still on their way.
        """
        deadline = time.monotonic() + self.config.timeout_s
        last_change, last_seen = time.monotonic(), (-1, -1)
        async with database(self.settings) as uow_factory:
            while time.monotonic() < deadline:
                for task in services:
                    if task.done() and task.exception():
                        raise RuntimeError("a pipeline service stopped") from task.exception()
                async with uow_factory() as uow:
                    waiting = {f"{cluster}/{row['name']}" for cluster in self.clusters for row in
                               await uow.pods.pods_in_state(cluster, (PodState.UNSCHEDULABLE, PodState.INVALID))
                               if row["namespace"] == self.namespace}
                    states = await uow.pods.count_pods_by_state(list(self.clusters))
                settled = len(self.submitted_at.keys() & (self.bound_at.keys() | waiting))
                seen = (settled, len(self.bound_at))
                if seen != last_seen:
                    last_seen, last_change = seen, time.monotonic()
                    self.progress("bound", len(self.bound_at), self.config.pods)
                if (settled >= self.config.pods and len(self.bound_at) >= states.get("bound", 0)
                        and time.monotonic() - last_change >= 1.0):  # and the watch has seen every bind
                    return
                if time.monotonic() - last_change >= max(self.config.settle_s, 30.0):
                    return  # no progress at all: report what happened instead of hanging
                await asyncio.sleep(0.25)
        raise TimeoutError(f"pods did not settle within {self.config.timeout_s:.0f} s")

    # -- results -------------------------------------------------------------------------------------
    async def _result(self, apis: dict[str, KubeClusterApi], fleets: dict[str, list[Node]],
                      seconds: float) -> RunResult:
        assigned: dict[tuple[str, str, int], int] = {}
        bound = 0
        for cluster, name in self.clusters.items():
            body = await list_pods_json(apis[name], self.namespace)
            for pod in body:
                node = (pod.get("spec") or {}).get("nodeName")
                if not node:
                    continue
                bound += 1
                raw = (pod["metadata"].get("annotations") or {}).get(ASSIGNMENT)
                for gpu in json.loads(raw)["gpus"] if raw else []:
                    key = (cluster, node, gpu["index"])
                    assigned[key] = assigned.get(key, 0) + gpu["memory_mib"]
        capacity = {(c, n.name, g.index): g.memory_mib for c, f in fleets.items() for n in f for g in n.gpus}
        over = sum(1 for key, used in assigned.items() if used > capacity.get(key, 0))
        async with database(self.settings) as uow_factory, uow_factory() as uow:
            unschedulable = sum([len(await uow.pods.pods_in_state(c, (PodState.UNSCHEDULABLE, PodState.INVALID)))
                                 for c in self.clusters])
            twice = sum([await uow.decisions.count_bound_twice(c) for c in self.clusters])
        pct, binds_per_s = self._timing(bound)
        return RunResult(
            run_id=self.config.run_id, clusters=self.clusters, namespace=self.namespace,
            pods_submitted=len(self.submitted_at), pods_bound=bound, pods_unschedulable=unschedulable,
            gpus_overcommitted=over, bound_twice=twice, gpus_used=len(assigned), gpus_total=len(capacity),
            gpu_memory_used_pct=round(100.0 * sum(assigned.values()) / max(1, sum(capacity.values())), 2),
            pending_to_bound_ms=pct, binds_per_s=binds_per_s, seconds=round(seconds, 1), bound_at=dict(self.bound_at),
        )

    def _timing(self, bound: int) -> tuple[dict[str, float], float]:
        """Pending-to-bound p50/p95/p99 (ms, submit call to the watch's first sight of a node) and binds/s
        (`bound` pods over the span from the first submit to the last bind seen)."""
        waits = np.array([(self.bound_at[k] - self.submitted_at[k]) * 1000.0 for k in self.bound_at
                          if k in self.submitted_at])
        pct = {f"p{q}": round(float(np.percentile(waits, q)), 1) if len(waits) else 0.0 for q in (50, 95, 99)}
        span = (max(self.bound_at.values()) - min(self.submitted_at.values())) if self.bound_at else 0.0
        return pct, round(bound / span, 1) if span > 0 else 0.0

    async def cleanup(self, apis: dict[str, KubeClusterApi] | None = None,
                      fleets: dict[str, list[Node]] | None = None) -> None:
        """Delete the run's pods, namespace, nodes and topics (after `keep=True`, call it yourself; `keep_log`
        keeps the topics).

        The pods go first and with no grace period: KWOK grants a graceful deletion only while it still manages
        the node, and pods left on deleted nodes wait for the pod garbage collector, which force-deletes about
        ten a second; the next run (or test) would share the apiserver with that backlog."""
        if apis is None:
            async with ClusterApis(self.config.kubeconfigs) as opened:
                return await self.cleanup(opened, fleets)
        if not self.config.keep_log:
            await self._release()
        for cluster, nodes in (fleets or self._fleets()).items():
            api = apis[self.clusters[cluster]]
            await ignore_404(_delete_pods_now(api, self.namespace))
            await ignore_404(api.core.delete_namespace(self.namespace))
            for chunk in chunks(nodes, 32):
                await asyncio.gather(*(ignore_404(api.core.delete_node(n.name)) for n in chunk))


class ClusterApis:
    """Async context manager: one KubeClusterApi per apiserver name."""

    def __init__(self, kubeconfigs: dict[str, str]) -> None:
        self._kubeconfigs = kubeconfigs
        self._contexts: list[Any] = []

    async def __aenter__(self) -> dict[str, KubeClusterApi]:
        apis = {}
        for name, path in self._kubeconfigs.items():
            ctx = cluster_api(path)
            apis[name] = await ctx.__aenter__()
            self._contexts.append(ctx)
        return apis

    async def __aexit__(self, *exc: object) -> None:
        for ctx in reversed(self._contexts):
            await ctx.__aexit__(None, None, None)


async def ensure_priority_classes(api: KubeClusterApi) -> None:
    """Create the PRIORITY_CLASSES the pods name (those there already are kept)."""
    scheduling = client.SchedulingV1Api(api.api_client)
    for value, name in PRIORITY_CLASSES.items():
        try:
            await scheduling.create_priority_class(
                {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},  # type: ignore[arg-type]  # a manifest dict: kubernetes_asyncio takes it like a model
                 "value": value})
        except ApiException as exc:
            if exc.status != 409:
                raise


async def create_node(api: KubeClusterApi, manifest: dict[str, Any]) -> None:
    """Create a node from its manifest dict, not parsing the answer into models (thousands of nodes)."""
    await raw_json(await api.core.create_node(manifest, _preload_content=False))  # type: ignore[arg-type]  # a manifest dict: kubernetes_asyncio takes it like a model


async def list_pods_json(api: KubeClusterApi, namespace: str) -> list[dict[str, Any]]:
    """The namespace's pods as JSON dicts, not parsed into models (thousands of pods)."""
    body = await raw_json(await api.core.list_namespaced_pod(namespace, _preload_content=False))
    return body.get("items") or []


async def ignore_404(call: Any) -> None:
    """Await a delete, taking "not found" for done."""
    try:
        await call
    except ApiException as exc:
        if exc.status != 404:
            raise


async def _delete_pods_now(api: KubeClusterApi, namespace: str) -> None:
    await raw_json(await api.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0,
                                                                   _preload_content=False))


def chunks(items: list[Any], size: int) -> list[list[Any]]:
    """`items` in runs of `size`: creates and deletes go to the apiserver that many at a time."""
    return [items[i:i + size] for i in range(0, len(items), size)]


__all__ = ["FLEET_LABEL", "PRIORITY_CLASSES", "SIMULATED", "ClusterApis", "PipelineRun", "Progress", "RunConfig",
           "RunResult", "chunks", "create_node", "ensure_priority_classes", "ignore_404", "kwok_node_manifest",
           "list_pods_json", "pod_manifest", "policy_env"]
