"""A cluster shared with kube-scheduler, as the parity bench and the e2e tests drive it: gpuplace's services for one
cluster, nodes and pods as manifests, and reading back what each pod became (bound, or waiting with a reason)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import database
from gpuplace.harness.pipeline_run import FLEET_LABEL, SIMULATED
from gpuplace.settings import Settings
from services.cluster_watcher import app as cluster_watcher
from services.placement import app as placement

HOSTNAME = "kubernetes.io/hostname"


@contextlib.asynccontextmanager
async def gpuplace_running(settings: Settings, kubeconfig: str, *, watcher: bool = True,
                           placing: bool = True) -> AsyncIterator[None]:
    """placement (unless `placing` is False) and cluster-watcher (unless `watcher` is False) for
    `settings.cluster`, stopped (and checked not to have died) on exit."""
    await migrate.upgrade_async(settings.database_url.get_secret_value())
    stop = asyncio.Event()
    tasks = [asyncio.create_task(placement.run(settings, stop))] if placing else []
    if watcher:
        tasks.append(asyncio.create_task(cluster_watcher.run(settings, stop, kubeconfig=kubeconfig)))
    try:
        yield
        for task in tasks:
            if task.done() and task.exception():
                raise RuntimeError("a gpuplace service stopped") from task.exception()
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)


async def inventory_seen(settings: Settings, expect: int, *, timeout_s: float = 120) -> None:
    """Wait until placement has stored `expect` nodes of `settings.cluster`, Ready (pods sent before would wait for
    nodes gpuplace does not know yet, which is right but not what a test of the rules wants to compare; and a node
    KWOK has not yet marked Ready carries gpuplace's not-ready taint, core/node_rules.py, which this stack's
    kube-scheduler does not see: its node lifecycle controller, which adds that taint, does not run here)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    async with database(settings) as uow_factory:
        while True:
            async with uow_factory() as uow:
                ready = sum(1 for node in await uow.nodes.load_nodes(settings.cluster) if node["ready"])
            if ready >= expect:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for placement to see {expect} Ready "
                                     f"nodes ({ready} seen)")
            await asyncio.sleep(0.2)


def node_manifest(name: str, run: str, *, cpu: str = "16", memory: str = "64Gi", pods: int = 110, gpus: int = 0,
                  labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
                  unschedulable: bool = False, gpu_memory_mib: int = 16384,
                  resources: dict[str, str] | None = None) -> dict[str, Any]:
    """A KWOK node; `resources`: more allocatable (ephemeral-storage, hugepages-2Mi, example.com/fpga, ...)."""
    capacity = {"cpu": cpu, "memory": memory, "pods": str(pods), **(resources or {})}
    gpu_labels = {}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
        gpu_labels = {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB", "nvidia.com/gpu.memory": str(gpu_memory_mib),
                      "nvidia.com/gpu.count": str(gpus), **SIMULATED}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {**(labels or {}), **gpu_labels, FLEET_LABEL: run, HOSTNAME: name, "type": "kwok"}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": capacity, "capacity": capacity},
    }


@dataclass(frozen=True)
class Outcome:
    node: str | None  # bound to
    unschedulable: str | None  # PodScheduled=False/Unschedulable: its message
    error: str | None = None  # PodScheduled=False for another reason (kube-scheduler's SchedulerError): its message

    @property
    def settled(self) -> bool:
        return self.node is not None or self.unschedulable is not None or self.error is not None


async def outcomes(api: KubeClusterApi, namespace: str) -> dict[str, Outcome]:
    """Every pod of `namespace`: where it is bound, or why its scheduler says it waits."""
    body = await raw_json(await api.core.list_namespaced_pod(namespace, _preload_content=False))
    found = {}
    for pod in body.get("items") or []:
        condition: dict[str, Any] = next((c for c in (pod.get("status") or {}).get("conditions") or []
                          if c.get("type") == "PodScheduled"), {})
        refused = condition.get("status") == "False"
        waiting = condition.get("message") or "" if refused and condition.get("reason") == "Unschedulable" else None
        error = f"{condition.get('reason')}: {condition.get('message') or ''}" if refused and waiting is None else None
        found[pod["metadata"]["name"]] = Outcome(pod["spec"].get("nodeName"), waiting, error)
    return found


async def create_all(calls: list[Any], concurrency: int = 24) -> None:
    slots = asyncio.Semaphore(concurrency)

    async def one(call: Any) -> None:
        async with slots:
            await raw_json(await call)

    await asyncio.gather(*(one(c) for c in calls))


async def delete_quietly(*calls: Any, concurrency: int = 24) -> None:
    """Clean-up calls, several at a time; one that fails (already gone) does not stop the others."""
    slots = asyncio.Semaphore(concurrency)

    async def one(call: Any) -> None:
        async with slots:
            with contextlib.suppress(Exception):
                await call

    await asyncio.gather(*(one(c) for c in calls))


async def settle(api: KubeClusterApi, namespace: str, expect: int, *, timeout_s: float) -> dict[str, Outcome]:
    """Every pod of `namespace` (`expect` of them) bound or refused; polled every 2 s, since listing hundreds of
    pods is work the services under test share the event loop with. Fails with the pods still unsettled."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        found = await outcomes(api, namespace)
        unsettled = sorted(name for name, o in found.items() if not o.settled)
        if len(found) == expect and not unsettled:
            return found
        if loop.time() > deadline:
            raise AssertionError(f"after {timeout_s:.0f} s, {len(found)} of {expect} pods seen, "
                                 f"{len(unsettled)} neither bound nor refused: {unsettled[:10]}")
        await asyncio.sleep(2.0)


__all__ = ["HOSTNAME", "Outcome", "create_all", "delete_quietly", "gpuplace_running", "inventory_seen",
           "node_manifest", "outcomes", "settle"]
