"""gpuplace and kube-scheduler on the same fleet and burst, alternating: ks, gp, ks, gp, ...

Alternating (rather than all of one, then all of the other) spreads the slow drift of a shared two-core
machine over both sides. Each repeat gives both sides the same seed, so the same fleet (node names aside) and
the same pods. After every run its pods are deleted at once (no grace), then its nodes and namespace, and the
harness waits until the namespace is gone, so a run does not pay for deleting its predecessor's pods.

Whole-GPU pods need one GPU each, where gpuplace packs memory slices: 2,000 pods do not fit 200 nodes x 8 GPUs
as whole GPUs, and kube-scheduler would start preempting. So unless told otherwise the fleet gets the GPUs per
node the burst needs as whole GPUs (at least the usual 8), the same for both sides, and the report says so.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.bootstrap import cluster_api
from gpuplace.harness import cpu_accounting
from gpuplace.harness.kube_scheduler_process import ClientLimits
from gpuplace.harness.kube_scheduler_run import KubeSchedulerRun
from gpuplace.harness.pipeline_comparison_report import GPUPLACE, KUBE_SCHEDULER, SIDES
from gpuplace.harness.pipeline_run import PipelineRun, Progress, RunConfig, RunResult
from gpuplace.settings import Settings

DEFAULT_GPUS_PER_NODE = 8
NAMESPACE_GONE_TIMEOUT_S = 180.0
log = logging.getLogger(__name__)
OnRun = Callable[[str, int, RunResult], None]


@dataclass(frozen=True)
class Comparison:
    kubeconfigs: dict[str, str]
    nodes: int
    pods: int
    repeats: int
    gpus_per_node: int
    binary: Path
    limits: ClientLimits
    policy: str | None = None
    timeout_s: float = 600.0
    processes: bool = True  # gpuplace's services as their own processes, as kube-scheduler is its own
    rate: float | None = None  # pods per second for both sides (RunConfig.rate); None: a burst


def whole_gpus_per_node(nodes: int, pods: int, clusters: int) -> int:
    """GPUs per node for `pods` one-GPU pods to fit, split over `clusters` as PipelineRun splits them (nodes by
    np.array_split, pods round-robin): the most any cluster needs, at least DEFAULT_GPUS_PER_NODE."""
    if clusters < 1:
        raise ValueError("no cluster")
    node_counts = [len(part) for part in np.array_split(np.arange(nodes), clusters)]
    pod_counts = [len(range(k, pods, clusters)) for k in range(clusters)]
    need = DEFAULT_GPUS_PER_NODE
    for n, p in zip(node_counts, pod_counts, strict=True):
        if p and not n:
            raise ValueError(f"{nodes} node(s) over {clusters} clusters leaves one with pods and no node")
        if n:
            need = max(need, math.ceil(p / n))
    return need


def run_one(side: str, repeat: int, comparison: Comparison, settings: Settings,
            progress: Progress | None = None) -> RunResult:
    """One run of `side` (in a fresh event loop, as `bench pipeline` runs each), then its namespace gone."""
    config = RunConfig(kubeconfigs=comparison.kubeconfigs, nodes=comparison.nodes, pods=comparison.pods,
                       gpus_per_node=comparison.gpus_per_node, seed=7 + repeat, policy=comparison.policy,
                       timeout_s=comparison.timeout_s, keep=True,  # cleaned up below, pods first
                       processes=comparison.processes, rate=comparison.rate)
    run: PipelineRun
    if side == KUBE_SCHEDULER:
        run = KubeSchedulerRun(config, settings, binary=comparison.binary, limits=comparison.limits,
                               progress=progress)
    elif side == GPUPLACE:
        run = PipelineRun(config, settings, progress)
    else:
        raise ValueError(f"unknown side {side!r}")

    return asyncio.run(run_then_clean(run))


async def run_then_clean(run: PipelineRun) -> RunResult:
    """`run.run()` (made with `keep=True`) with the CPU each component spent meanwhile (cpu_accounting), then its
    clean-up (pods first, with no grace), and its namespace gone, so that the next run does not pay for deleting
    this one's pods."""
    kubeconfigs = run.config.kubeconfigs
    burst: list[dict[str, float]] = []  # marked at the first submit and once every pod is bound

    async def mark(_: PipelineRun) -> None:
        burst.append(cpu_accounting.mark())

    try:
        before = cpu_accounting.mark()
        result = await run.run(before_submit=mark, after_drain=mark)
        result.cpu_s = cpu_accounting.spent(before, cpu_accounting.mark())
        result.burst_cpu_s = cpu_accounting.spent(*burst)
    finally:
        await run.cleanup()
    if not await namespace_gone(kubeconfigs, run.namespace):
        log.warning("namespace %s still there after %.0f s: the next run starts beside its deletion",
                    run.namespace, NAMESPACE_GONE_TIMEOUT_S)
    return result


def compare(comparison: Comparison, settings: Settings, *, on_run: OnRun | None = None,
            progress: Progress | None = None) -> list[dict[str, Any]]:
    """`repeats` x (kube-scheduler, gpuplace): each run's summary with its `side` and `repeat` (1-based)."""
    runs = []
    for i in range(comparison.repeats):
        for side in SIDES:
            result = run_one(side, i, comparison, settings, progress)
            runs.append({"side": side, "repeat": i + 1, **result.summary()})
            if on_run:
                on_run(side, i + 1, result)
    return runs


async def namespace_gone(kubeconfigs: dict[str, str], namespace: str,
                         timeout_s: float = NAMESPACE_GONE_TIMEOUT_S) -> bool:
    """Until `namespace` is gone from every apiserver (its pods deleted); False if it outlived `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    for path in kubeconfigs.values():
        async with cluster_api(path) as api:
            while not await _gone(api, namespace):
                if time.monotonic() > deadline:
                    return False
                await asyncio.sleep(0.5)
    return True


async def _gone(api: KubeClusterApi, namespace: str) -> bool:
    try:
        await raw_json(await api.core.read_namespace(namespace, _preload_content=False))
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


__all__ = ["DEFAULT_GPUS_PER_NODE", "Comparison", "compare", "namespace_gone", "run_one", "run_then_clean",
           "whole_gpus_per_node"]
