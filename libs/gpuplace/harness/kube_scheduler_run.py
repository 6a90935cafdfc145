"""kube-scheduler's side of `gpuplace bench pipeline --against kube-scheduler`: the same run, another scheduler.

A `PipelineRun` in everything that is measured: the same KWOK fleet (the config's nodes, GPUs per node, CPU and
memory, seeded the same), the same burst of pods (count, CPU, memory, priority classes, submitted 24 at a time
through the same client), bind times taken the same way (the first time the run's pod watch shows a node), and
the same clean-up. What differs is only what makes kube-scheduler the scheduler:

- instead of gpuplace's services, one bench kube-scheduler per apiserver (`KubeSchedulerProcess`: the stack's
  binary, client limits raised, a `schedulerName` of the run's own), started once the fleet exists and ready when
  its informers have synced (the counterpart of gpuplace's "placement has seen the inventory");
- each pod asks for a whole GPU the way kube-scheduler understands (`limits: nvidia.com/gpu: 1`, the extended
  resource the fleet's nodes advertise) instead of gpuplace's GPU-memory annotations, names the bench
  scheduler, and selects the run's fleet by its label (kube-scheduler sees every node of the shared cluster;
  gpuplace's watchers are narrowed to the fleet by `node_label_selector`);
- "settled" and the result come from the apiserver (bound, or PodScheduled=False/Unschedulable), as there is
  no PostgreSQL behind kube-scheduler; over-commit is counted as kube-scheduler accounts GPUs (whole devices).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.core.model import Node, Pod
from gpuplace.harness.kube_scheduler_process import ClientLimits, KubeSchedulerProcess
from gpuplace.harness.pipeline_run import FLEET_LABEL, PipelineRun, Progress, RunConfig, RunResult
from gpuplace.settings import Settings

WHOLE_GPU = "nvidia.com/gpu"
READY_TIMEOUT_S = 120.0


class KubeSchedulerRun(PipelineRun):
    def __init__(self, config: RunConfig, settings: Settings, *, binary: Path, limits: ClientLimits,
                 progress: Progress | None = None) -> None:
        super().__init__(config, settings, progress)
        self.binary = binary
        self.limits = limits
        self.scheduler_name = f"bench-kube-scheduler-{config.run_id}"
        self.unschedulable: set[str] = set()
        self._ready: dict[str, asyncio.Event] = {}
        self._schedulers: list[asyncio.Task[None]] = []

    # -- what gpuplace's run needs and this one does not: schema, topics ------------------------------------
    async def _prepare(self) -> None:
        return None

    async def _release(self) -> None:
        return None

    # -- the scheduler ------------------------------------------------------------------------------------
    def _start_services(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        self._ready = {cluster: asyncio.Event() for cluster in self.clusters}
        self._schedulers = [asyncio.create_task(self._scheduler(cluster, name, stop), name=f"kube-scheduler-{cluster}")
                            for cluster, name in self.clusters.items()]
        return list(self._schedulers)

    async def _scheduler(self, cluster: str, apiserver: str, stop: asyncio.Event) -> None:
        async with KubeSchedulerProcess(self.binary, kubeconfig=self.config.kubeconfigs[apiserver],
                                        scheduler_name=self.scheduler_name, limits=self.limits,
                                        label=f"kube-scheduler-{cluster}") as scheduler:
            await scheduler.wait_ready(READY_TIMEOUT_S)
            self._ready[cluster].set()
            await scheduler.run_until(stop)

    async def _wait_inventory(self, fleets: dict[str, list[Node]]) -> None:
        """Until every bench scheduler is ready (/readyz: informers synced, so the fleet is in its cache)."""
        ready = asyncio.create_task(asyncio.wait([asyncio.create_task(e.wait()) for e in self._ready.values()]))
        try:
            await asyncio.wait([ready, *self._schedulers], timeout=READY_TIMEOUT_S + 10,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        for task in self._schedulers:
            if task.done():
                raise RuntimeError(f"{task.get_name()} stopped before it was ready") from task.exception()
        if not all(e.is_set() for e in self._ready.values()):
            raise TimeoutError(f"the bench's kube-schedulers were not ready within {READY_TIMEOUT_S:.0f} s")
        self.progress("inventory", sum(len(f) for f in fleets.values()), sum(len(f) for f in fleets.values()))

    # -- the pods -----------------------------------------------------------------------------------------
    def _pod_body(self, pod: Pod, service_ms: float) -> dict[str, Any]:
        return whole_gpu_manifest(super()._pod_body(pod, service_ms), scheduler=self.scheduler_name,
                                  fleet=self.config.run_id, gpus=pod.gpu.count)

    def _seen(self, key: str, pod: dict[str, Any]) -> None:
        if (pod.get("spec") or {}).get("nodeName"):
            self.unschedulable.discard(key)
        elif is_unschedulable(pod):
            self.unschedulable.add(key)

    async def _wait_done(self, services: list[asyncio.Task[None]]) -> None:
        await wait_settled(self, self.unschedulable, services)

    async def _result(self, apis: dict[str, KubeClusterApi], fleets: dict[str, list[Node]],
                      seconds: float) -> RunResult:
        nodes = {(cluster, n.name): n for cluster, fleet in fleets.items() for n in fleet}
        taken: Counter[tuple[str, str]] = Counter()
        bound = unschedulable = 0
        for cluster, name in self.clusters.items():
            body = await raw_json(await apis[name].core.list_namespaced_pod(self.namespace, _preload_content=False))
            for pod in body.get("items") or []:
                node = (pod.get("spec") or {}).get("nodeName")
                if node:
                    bound += 1
                    taken[(cluster, node)] += gpu_limit(pod)
                elif is_unschedulable(pod):
                    unschedulable += 1
        over = sum(1 for key, count in taken.items() if key not in nodes or count > len(nodes[key].gpus))
        memory_total = sum(len(n.gpus) * n.gpu_memory_mib for n in nodes.values())
        memory_taken = sum(count * nodes[key].gpu_memory_mib for key, count in taken.items() if key in nodes)
        pct, binds_per_s = self._timing(bound)
        return RunResult(
            run_id=self.config.run_id, clusters=self.clusters, namespace=self.namespace,
            pods_submitted=len(self.submitted_at), pods_bound=bound, pods_unschedulable=unschedulable,
            gpus_overcommitted=over, bound_twice=0,  # the apiserver refuses a second binding of a pod
            gpus_used=sum(taken.values()), gpus_total=sum(len(n.gpus) for n in nodes.values()),
            gpu_memory_used_pct=round(100.0 * memory_taken / max(1, memory_total), 2),
            pending_to_bound_ms=pct, binds_per_s=binds_per_s, seconds=round(seconds, 1), bound_at=dict(self.bound_at),
        )


def whole_gpu_manifest(manifest: dict[str, Any], *, scheduler: str, fleet: str, gpus: int = 1) -> dict[str, Any]:
    """gpuplace's pod manifest as kube-scheduler's equivalent: `scheduler` as its schedulerName, `gpus` whole GPUs
    as a container limit (extended resources are asked for by limit), no gpuplace annotations (gpuplace's own
    watchers elsewhere on the shared stack would report a pod with both as invalid), and a nodeSelector on the
    run's fleet."""
    spec = dict(manifest["spec"], schedulerName=scheduler)
    containers = [dict(c) for c in spec["containers"]]
    resources = dict(containers[0].get("resources") or {})
    if gpus:
        resources["limits"] = {**(resources.get("limits") or {}), WHOLE_GPU: str(gpus)}
    containers[0]["resources"] = resources
    spec["containers"] = containers
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), FLEET_LABEL: fleet}
    metadata = {k: v for k, v in manifest["metadata"].items() if k != "annotations"}
    return {**manifest, "metadata": metadata, "spec": spec}


def gpu_limit(pod: dict[str, Any]) -> int:
    """Whole GPUs a pod asks for (its containers' `nvidia.com/gpu` limits)."""
    return sum(int(((c.get("resources") or {}).get("limits") or {}).get(WHOLE_GPU, 0))
               for c in (pod.get("spec") or {}).get("containers") or [])


async def wait_settled(run: PipelineRun, unschedulable: set[str], services: list[asyncio.Task[None]]) -> None:
    """Until every pod `run` submitted is bound or reported unschedulable (`unschedulable`, kept by the run's pod
    watch) and the watch has been quiet for 1 s, or nothing moved for max(settle_s, 30 s) (then the result says what
    happened). Read from the apiserver alone, so it serves any scheduler that reports as kube-scheduler does."""
    deadline = time.monotonic() + run.config.timeout_s
    last_change, last_seen = time.monotonic(), (-1, -1)
    while time.monotonic() < deadline:
        for task in services:
            if task.done() and not task.cancelled() and task.exception():
                raise RuntimeError(f"{task.get_name()} stopped") from task.exception()
        settled = len(run.submitted_at.keys() & (run.bound_at.keys() | unschedulable))
        seen = (settled, len(run.bound_at))
        if seen != last_seen:
            last_seen, last_change = seen, time.monotonic()
            run.progress("bound", len(run.bound_at), run.config.pods)
        if settled >= run.config.pods and time.monotonic() - last_change >= 1.0:
            return
        if time.monotonic() - last_change >= max(run.config.settle_s, 30.0):
            return
        await asyncio.sleep(0.25)
    raise TimeoutError(f"pods did not settle within {run.config.timeout_s:.0f} s")


def is_unschedulable(pod: dict[str, Any]) -> bool:
    """PodScheduled=False/Unschedulable: kube-scheduler's (and gpuplace's) word that the pod does not fit now."""
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


__all__ = ["KubeSchedulerRun", "gpu_limit", "is_unschedulable", "wait_settled", "whole_gpu_manifest"]
