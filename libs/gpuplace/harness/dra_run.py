"""One run of `gpuplace bench dra`: a KWOK fleet whose GPUs are ResourceSlices, a seeded stream of ResourceClaims and
their pods, placed by one scheduler; measured from the apiserver alone, so both schedulers are measured alike.

`DraRun` is a `PipelineRun` (fleet, services, pod watch, timing, clean-up) whose fleet and pods speak DRA
(dra_objects.py) and whose result (`DraResult`) adds what the DRA comparison asks for:

- pods placed (bound, their claim allocated on their node), pending, and the checks that nothing was
  over-committed (per device, the allocations' consumedCapacity against the slice's capacity) or misplaced;
- the first failure: the first time the run's pod watch sees a pod reported unschedulable (PodScheduled=False,
  reason Unschedulable) among the pods that are never bound during the run; a pod reported unschedulable and
  bound later (a transient) is no failure;
- stranded GPU memory at that moment (in waves, once its wave settled; sim/stranded.py): the devices' use by the
  placements made by then (`placed_by_failure`: bound by then, or placed and ahead of the failed pod in arrival
  order), against the pods submitted and not placed then, and against only those reported unschedulable by then
  (`turned_away`); and at the end of the run, against the pods still pending. Per cluster, summed: a claim can
  only use its own cluster's devices;
- binds/s and pending-to-bound percentiles, as `PipelineRun` takes them (pod create call to the watch first
  showing a node).

The stream arrives in waves by default (`wave`, `_submit`): each wave once the one before settled, and the first
failure is measured when its wave has settled, so the pods pending then are the claims turned away, as in the trace
simulator, rather than a queue of claims no scheduler has looked at yet; `wave=0` submits it all at once.

`DraRun` itself runs gpuplace's services (as processes by default); `DraKubeSchedulerRun` swaps in the bench's
kube-scheduler (its DRA plugin allocates the claims). The pods differ in `schedulerName` only.
With `deadlines`, perception pods carry their deadline and frame rate (gpuplace's latency admission then applies).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.core.model import Node, Pod
from gpuplace.harness import dra_objects
from gpuplace.harness.kube_scheduler_run import KubeSchedulerRun, is_unschedulable, wait_settled
from gpuplace.harness.pipeline_run import (
    FLEET_LABEL,
    ClusterApis,
    PipelineRun,
    Progress,
    RunConfig,
    RunResult,
    chunks,
    create_node,
    ignore_404,
    kwok_node_manifest,
)
from gpuplace.settings import Settings
from gpuplace.sim import dra_stream
from gpuplace.sim.stranded import Ask, DeviceUse, Stranded, combined, stranded

DeviceKey = tuple[str, str, str]  # (cluster, node, device)
CONCURRENCY = 24  # creates in flight, as PipelineRun submits
DEFAULT_WAVE = 24  # claims per wave (_submit)
WAVE_TIMEOUT_S = 60.0


@dataclass
class DraResult(RunResult):
    pods_pending: int = 0
    placed_slices: int = 0
    placed_whole: int = 0
    pending_slices: int = 0
    pending_whole: int = 0
    devices_overcommitted: int = 0
    bound_without_allocation: int = 0  # a bound pod whose claim is not allocated, or allocated on another node
    allocated_not_bound: int = 0
    first_failure: dict[str, Any] | None = None
    at_end: dict[str, Any] = field(default_factory=dict)
    memory_total_mib: int = 0
    memory_allocated_mib: int = 0
    over_ask: float = 0.0

    def summary(self) -> dict[str, Any]:
        extra = ("pods_pending", "placed_slices", "placed_whole", "pending_slices", "pending_whole",
                 "devices_overcommitted", "bound_without_allocation", "allocated_not_bound", "first_failure",
                 "at_end", "memory_total_mib", "memory_allocated_mib", "over_ask")
        return {**super().summary(), **{k: getattr(self, k) for k in extra}}


def stranded_figures(figures: Stranded) -> dict[str, Any]:
    return {"stranded_mib": figures.stranded_mib, "free_mib": figures.free_mib, "pending": figures.pending,
            "stranded_pct_of_free": figures.stranded_pct_of_free,
            "stranded_pct_of_capacity": figures.stranded_pct_of_capacity}


def ask_of(pod: Pod) -> Ask:
    return Ask(devices=pod.gpu.count, memory_mib=pod.gpu.memory_mib)


def device_use(capacity: dict[DeviceKey, int], consumed: dict[DeviceKey, int]) -> list[DeviceUse]:
    return [DeviceUse(node=f"{c}/{n}", name=d, capacity_mib=cap, used_mib=consumed.get((c, n, d), 0))
            for (c, n, d), cap in capacity.items()]


def first_failure_time(first_unschedulable_at: dict[str, float],
                       bound_at: dict[str, float]) -> tuple[str, float] | None:
    """(pod key, time) of the earliest unschedulable report of a pod never bound; None when every pod was bound."""
    failed = [(at, key) for key, at in first_unschedulable_at.items() if key not in bound_at]
    if not failed:
        return None
    at, key = min(failed)
    return key, at


def placed_by_failure(failed: str, at: float, bound: list[str], bound_at: dict[str, float],
                      order: dict[str, int]) -> set[str]:
    """The placements the scheduler had made when it turned `failed` away at `at`: the pods bound by then, and the
    pods placed in the run that arrived before `failed` (`order`: arrival index by pod key). The second part is for a
    scheduler that decides a batch and then writes binds and feedback concurrently (gpuplace): the report that it
    turned a pod away may land before the binds of the pods it placed ahead of it. Both schedulers take pods of one
    priority in arrival order (kube-scheduler's queue, gpuplace's without deadlines), retries aside."""
    return {k for k in bound if bound_at.get(k, math.inf) <= at or order[k] < order[failed]}


def pending_at(at: float, submitted_at: dict[str, float], placed: set[str]) -> list[str]:
    """Pods submitted by `at` and not among the placements made by then."""
    return [k for k, s in submitted_at.items() if s <= at and k not in placed]


class DraRun(PipelineRun):
    """gpuplace's side (its services, `settings.scheduler_name`); `DraKubeSchedulerRun` is kube-scheduler's."""

    def __init__(self, config: RunConfig, settings: Settings, progress: Progress | None = None, *,
                 deadlines: bool = False, training_scale: float = 1.0, wave: int = DEFAULT_WAVE,
                 **kwargs: Any) -> None:
        super().__init__(config, settings, progress=progress, **kwargs)
        self.wave = wave  # 0: the whole stream at once; else claims per wave (_submit)
        self.stream = dra_stream.claims(config.pods, seed=config.seed, training_scale=training_scale)
        self.deadlines = deadlines  # perception pods carry their deadline and frame rate (dra_objects.pod_manifest)
        self.unschedulable: set[str] = set()
        self.first_unschedulable_at: dict[str, float] = {}
        self.wave_settled_at: dict[str, float] = {}  # pod key -> when its wave settled (in waves)

    def pods_scheduler(self) -> str:
        """The schedulerName the run's pods name (the only thing that differs between the sides)."""
        return self.settings.scheduler_name

    # -- the fleet ------------------------------------------------------------------------------------------
    async def _create_fleet(self, apis: dict[str, KubeClusterApi], fleets: dict[str, list[Node]]) -> None:
        """Per cluster: the DeviceClass if absent, the namespace, the nodes (no `nvidia.com/gpu` and no GPU labels: a
        DRA node's GPUs are its ResourceSlice's devices) and their slices, owned by the nodes."""
        total = sum(len(f) for f in fleets.values())
        done = 0
        labels = {FLEET_LABEL: self.config.run_id}
        for cluster, nodes in fleets.items():
            api = apis[self.clusters[cluster]]
            resource = client.ResourceV1Api(api.api_client)
            try:
                await raw_json(await resource.create_device_class(dra_objects.device_class(),  # type: ignore[arg-type]  # a manifest dict: kubernetes_asyncio takes it like a model
                                                                  _preload_content=False))
            except ApiException as exc:
                if exc.status != 409:
                    raise
            await api.core.create_namespace({"metadata": {"name": self.namespace}})  # type: ignore[arg-type]  # a manifest dict: kubernetes_asyncio takes it like a model
            for chunk in chunks(nodes, 32):
                await asyncio.gather(*(create_node(api, dra_node_manifest(n, self.config.run_id)) for n in chunk))
                uids = await _node_uids(api, self.config.run_id)
                await asyncio.gather(*(_json(resource.create_resource_slice(
                    dra_objects.resource_slice(n, labels, uids.get(n.name)),  # type: ignore[arg-type]  # a manifest dict: kubernetes_asyncio takes it like a model
                    _preload_content=False)) for n in chunk))
                done += len(chunk)
                self.progress("nodes", done, total)

    # -- the stream -----------------------------------------------------------------------------------------
    async def _submit(self, apis: dict[str, KubeClusterApi]) -> None:
        """The stream in arrival order: all at once (`wave` 0, a burst), or in waves of `wave` claims, each
        submitted once the one before has settled (every pod bound or reported unschedulable; `wave_settled_at`)."""
        names = list(self.clusters)
        slots = asyncio.Semaphore(CONCURRENCY)
        selector = {FLEET_LABEL: self.config.run_id}
        scheduler = self.pods_scheduler()

        async def create(i: int, pod: Pod) -> None:
            cluster = names[i % len(names)]
            api = apis[self.clusters[cluster]]
            resource = client.ResourceV1Api(api.api_client)
            async with slots:
                await raw_json(await resource.create_namespaced_resource_claim(
                    self.namespace, dra_objects.resource_claim(pod, self.namespace),  # type: ignore[arg-type]  # a manifest dict: kubernetes_asyncio takes it like a model
                    _preload_content=False))
                self.submitted_at[f"{cluster}/{pod.name}"] = time.monotonic()
                await raw_json(await api.core.create_namespaced_pod(
                    self.namespace, dra_objects.pod_manifest(pod, self.namespace, scheduler=scheduler,  # type: ignore[arg-type]  # a manifest dict: kubernetes_asyncio takes it like a model
                                                             node_selector=selector, deadlines=self.deadlines),
                    _preload_content=False))
                if len(self.submitted_at) % 50 == 0:
                    self.progress("submitted", len(self.submitted_at), len(self.stream))

        arrivals = list(enumerate(self.stream))
        size = self.wave or len(arrivals)
        for start in range(0, len(arrivals), size):
            wave = arrivals[start:start + size]
            await asyncio.gather(*(create(i, pod) for i, pod in wave))
            if self.wave:
                await self._wave_settled([f"{names[i % len(names)]}/{pod.name}" for i, pod in wave])
        self.progress("submitted", len(self.stream), len(self.stream))

    async def _wave_settled(self, keys: list[str]) -> None:
        """Until each of `keys` is bound or reported unschedulable, WAVE_TIMEOUT_S at most (then the next wave goes:
        the result shows what never settled)."""
        deadline = time.monotonic() + WAVE_TIMEOUT_S
        while time.monotonic() < deadline:
            if all(k in self.bound_at or k in self.first_unschedulable_at for k in keys):
                break
            await asyncio.sleep(0.05)
        settled = time.monotonic()
        self.wave_settled_at.update((k, settled) for k in keys)

    def _seen(self, key: str, pod: dict[str, Any]) -> None:
        if (pod.get("spec") or {}).get("nodeName"):
            self.unschedulable.discard(key)
        elif is_unschedulable(pod):
            self.unschedulable.add(key)
            self.first_unschedulable_at.setdefault(key, time.monotonic())

    async def _wait_done(self, services: list[asyncio.Task[None]]) -> None:
        await wait_settled(self, self.unschedulable, services)

    # -- the result -----------------------------------------------------------------------------------------
    async def _result(self, apis: dict[str, KubeClusterApi], fleets: dict[str, list[Node]],
                      seconds: float) -> RunResult:
        capacity: dict[DeviceKey, int] = {(c, n.name, dra_objects.device_name(g.index)): g.memory_mib
                                          for c, fleet in fleets.items() for n in fleet for g in n.gpus}
        by_name = {p.name: p for p in self.stream}
        node_of, allocations = await self._bindings_and_allocations(apis)
        pod_of = {k: by_name[k.split("/", 1)[1]] for k in self.submitted_at}
        devices = _Devices(capacity, allocations, pod_of, self.clusters)
        bound = [k for k in self.submitted_at if k in node_of]
        pending = [k for k in self.submitted_at if k not in node_of]
        misplaced = sum(1 for k in bound if not allocations.get(k)
                        or any(pool != node_of[k] for pool, _, _ in allocations[k]))
        used_end = devices.consumed_by(bound)
        over = sum(1 for key, used in used_end.items() if key not in capacity or used > capacity[key])
        first_failure = self._first_failure(devices, bound)
        pct, binds_per_s = self._timing(len(bound))
        total = sum(capacity.values())
        allocated = sum(min(u, capacity.get(k, u)) for k, u in used_end.items())
        fleet = [n for f in fleets.values() for n in f]
        return DraResult(
            run_id=self.config.run_id, clusters=self.clusters, namespace=self.namespace,
            pods_submitted=len(self.submitted_at), pods_bound=len(bound), pods_unschedulable=len(self.unschedulable),
            gpus_overcommitted=over, bound_twice=0,  # the apiserver refuses a second binding of a pod
            gpus_used=len(used_end), gpus_total=len(capacity),
            gpu_memory_used_pct=round(100.0 * allocated / max(1, total), 2),
            pending_to_bound_ms=pct, binds_per_s=binds_per_s, seconds=round(seconds, 1), bound_at=dict(self.bound_at),
            pods_pending=len(pending),
            placed_slices=sum(1 for k in bound if not dra_stream.is_whole(pod_of[k])),
            placed_whole=sum(1 for k in bound if dra_stream.is_whole(pod_of[k])),
            pending_slices=sum(1 for k in pending if not dra_stream.is_whole(pod_of[k])),
            pending_whole=sum(1 for k in pending if dra_stream.is_whole(pod_of[k])),
            devices_overcommitted=over, bound_without_allocation=misplaced,
            allocated_not_bound=sum(1 for k in allocations if k not in node_of),
            first_failure=first_failure, at_end=devices.stranded_for(used_end, pending), memory_total_mib=total,
            memory_allocated_mib=allocated, over_ask=round(dra_stream.over_ask(self.stream, fleet).ratio, 3),
        )

    def _first_failure(self, devices: _Devices, bound: list[str]) -> dict[str, Any] | None:
        """The first claim turned away while others were still to come: when, what was placed and waiting then,
        and the memory stranded for them; None when no claim was turned away."""
        first = first_failure_time(self.first_unschedulable_at, self.bound_at)
        if first is None:
            return None
        start = min(self.submitted_at.values()) if self.submitted_at else 0.0
        index = {p.name: i for i, p in enumerate(self.stream)}
        key, at = first
        at = max(at, self.wave_settled_at.get(key, at))  # in waves: once its wave settled (_submit)
        order = {k: index[k.split("/", 1)[1]] for k in self.submitted_at}
        placed_then = placed_by_failure(key, at, bound, self.bound_at, order)
        used_then = devices.consumed_by(sorted(placed_then))
        turned_away = [k for k, seen in self.first_unschedulable_at.items()
                       if seen <= at and k not in placed_then]
        failed = devices.pod_of[key]
        return {"pod": key, "at_s": round(at - start, 2), "placed_before": len(placed_then),
                "submitted_before": sum(1 for s in self.submitted_at.values() if s <= at),
                "claim": {"devices": failed.gpu.count, "memory_mib": failed.gpu.memory_mib},
                **devices.stranded_for(used_then, pending_at(at, self.submitted_at, placed_then)),
                "turned_away": devices.stranded_for(used_then, turned_away)}

    async def _bindings_and_allocations(self, apis: dict[str, KubeClusterApi], *, tries: int = 10
                                        ) -> tuple[dict[str, str], dict[str, list[tuple[str, str, int | None]]]]:
        """Pod key -> node of the bound pods, and pod key -> (pool, device, MiB) of the allocated claims.

        The scheduler still runs while this reads (a pod failed earlier may be placed at any time), and a claim is
        allocated before its pod is bound: pods and claims, listed one after the other, can catch a pod between
        the two. So the read is repeated, a second apart, until every allocated claim's pod is bound and every
        bound pod's claim allocated, `tries` times at most; what persists is a real mismatch, and is reported."""
        for _ in range(tries - 1):
            node_of, allocations = await self._read_bindings_and_allocations(apis)
            if node_of.keys() == allocations.keys():
                return node_of, allocations
            await asyncio.sleep(1.0)
        return await self._read_bindings_and_allocations(apis)

    async def _read_bindings_and_allocations(self, apis: dict[str, KubeClusterApi]
                                             ) -> tuple[dict[str, str], dict[str, list[tuple[str, str, int | None]]]]:
        node_of: dict[str, str] = {}
        allocations: dict[str, list[tuple[str, str, int | None]]] = {}
        for cluster, name in self.clusters.items():
            api = apis[name]
            pods = await raw_json(await api.core.list_namespaced_pod(self.namespace, _preload_content=False))
            for pod in pods.get("items") or []:
                if node := (pod.get("spec") or {}).get("nodeName"):
                    node_of[f"{cluster}/{pod['metadata']['name']}"] = node
            claims = await raw_json(await client.ResourceV1Api(api.api_client).list_namespaced_resource_claim(
                self.namespace, _preload_content=False))
            for claim in claims.get("items") or []:
                pod_name = claim["metadata"]["name"].removesuffix(f"-{dra_objects.CLAIM_REQUEST}")
                if found := dra_objects.allocated_devices(claim):
                    allocations[f"{cluster}/{pod_name}"] = found
        return node_of, allocations

    # -- clean-up -------------------------------------------------------------------------------------------
    async def cleanup(self, apis: dict[str, KubeClusterApi] | None = None,
                      fleets: dict[str, list[Node]] | None = None) -> None:
        """`PipelineRun.cleanup` (pods at once, namespace, nodes, topics), then the run's claims let go and the
        slices deleted (owned by the nodes, so the garbage collector would take them too; not waited for).

        The claims' finalizer (resource.kubernetes.io/delete-protection, set when allocated) is kube-controller-
        manager's to drop once their pods are gone, at its client's 20 QPS: thousands of claims would keep the
        namespace for minutes, so the bench drops it itself (nothing runs on KWOK's devices)."""
        if apis is None:
            async with ClusterApis(self.config.kubeconfigs) as opened:
                return await self.cleanup(opened, fleets)
        await super().cleanup(apis, fleets)
        for name in self.clusters.values():
            await _release_claims(apis[name], self.namespace)
            await ignore_404(_json(client.ResourceV1Api(apis[name].api_client).delete_collection_resource_slice(
                label_selector=f"{FLEET_LABEL}={self.config.run_id}", _preload_content=False)))


class DraKubeSchedulerRun(DraRun, KubeSchedulerRun):
    """The same run with the bench's kube-scheduler (KubeSchedulerRun's process, readiness and no Kafka/PostgreSQL);
    its DRA plugin allocates the claims."""

    def pods_scheduler(self) -> str:
        return self.scheduler_name


def dra_node_manifest(node: Node, run_id: str) -> dict[str, Any]:
    """PipelineRun's KWOK node without the device plugin's `nvidia.com/gpu` and GPU Feature Discovery's labels."""
    manifest = kwok_node_manifest(node, run_id)
    labels = manifest["metadata"]["labels"]
    manifest["metadata"]["labels"] = {k: v for k, v in labels.items() if not k.startswith("nvidia.com/")}
    for key in ("capacity", "allocatable"):
        manifest["status"][key] = {k: v for k, v in manifest["status"][key].items() if k != "nvidia.com/gpu"}
    return manifest


async def _json(call: Awaitable[Any]) -> Any:
    """A raw (`_preload_content=False`) call's JSON body, the response read and released."""
    return await raw_json(await call)


async def _node_uids(api: KubeClusterApi, run_id: str) -> dict[str, str]:
    body = await raw_json(await api.core.list_node(label_selector=f"{FLEET_LABEL}={run_id}", _preload_content=False))
    return {n["metadata"]["name"]: n["metadata"]["uid"] for n in body.get("items") or []}


async def _release_claims(api: KubeClusterApi, namespace: str) -> None:
    resource = client.ResourceV1Api(api.api_client)
    try:
        body = await raw_json(await resource.list_namespaced_resource_claim(namespace, _preload_content=False))
    except ApiException as exc:
        if exc.status == 404:
            return
        raise
    slots = asyncio.Semaphore(CONCURRENCY)

    async def release(name: str) -> None:
        async with slots:
            await ignore_404(_json(resource.patch_namespaced_resource_claim(  # type: ignore[call-arg]  # the client takes _content_type; its stub does not say so
                name, namespace, {"metadata": {"finalizers": None}},
                _content_type="application/merge-patch+json", _preload_content=False)))

    await asyncio.gather(*(release(c["metadata"]["name"]) for c in body.get("items") or []
                           if c["metadata"].get("finalizers")))


@dataclass(frozen=True)
class _Devices:
    """The fleet's devices (capacity in MiB), the claims' allocations and the submitted pods, for the result's
    memory figures."""

    capacity: dict[DeviceKey, int]
    allocations: dict[str, list[tuple[str, str, int | None]]]
    pod_of: dict[str, Pod]
    clusters: dict[str, str]  # cluster id -> apiserver name: the clusters are its keys

    def consumed_by(self, keys: list[str]) -> dict[DeviceKey, int]:
        """MiB of each device the pods `keys` hold (a whole device's capacity where the allocation names none)."""
        used: dict[DeviceKey, int] = {}
        for key in keys:
            cluster = key.split("/", 1)[0]
            for pool, device, mib in self.allocations.get(key, []):
                device_key = (cluster, pool, device)
                used[device_key] = used.get(device_key, 0) + (self.capacity.get(device_key, 0) if mib is None
                                                              else mib)
        return used

    def stranded_for(self, used: dict[DeviceKey, int], waiting: list[str]) -> dict[str, Any]:
        """Per cluster (a claim can use only its own cluster's devices), summed."""
        return stranded_figures(combined(
            stranded(device_use({k: v for k, v in self.capacity.items() if k[0] == cluster}, used),
                     [ask_of(self.pod_of[k]) for k in waiting if k.split("/", 1)[0] == cluster])
            for cluster in self.clusters))


__all__ = ["DEFAULT_WAVE", "DraKubeSchedulerRun", "DraResult", "DraRun", "WAVE_TIMEOUT_S", "dra_node_manifest",
           "first_failure_time", "pending_at", "placed_by_failure"]
