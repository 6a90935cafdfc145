"""One parity run on the local stack: every case's twins, its two pinned pods, and what each scheduler made of them.

gpuplace (placement and cluster-watcher, in this process) and the stack's kube-scheduler (v1.37.2) decide on the
same apiserver. Cases go in batches: a batch's nodes are created, gpuplace started and waited for until it sees
them all Ready, then every pod of the batch is created at once (a pod the apiserver refuses is recorded with its
reason, for both copies alike) and the run waits until each is bound or refused, then removes the batch.

A case's verdict (`Verdict`) is one of:
- `agree`: both bound, or both refused;
- `violation`: gpuplace bound a pod kube-scheduler refused by a rule (an Unschedulable condition): the twins
  are identical, so gpuplace's node breaks a Kubernetes rule;
- `kube-error`: gpuplace bound, kube-scheduler refused with an error rather than a rule (SchedulerError, e.g. a
  preferred term it cannot parse): listed apart;
- `unevaluated`: gpuplace refused a pod whose spec carries a field it does not evaluate (pod affinity, topology
  spread, scheduled volumes), as it must, and kube-scheduler bound it: listed apart;
- `refused-more`: gpuplace refused a pod kube-scheduler bound, for no such field;
- `rejected`: the apiserver refused the pod itself (both copies).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import SecretStr

from gpuplace.adapters.kafka import delete_topics
from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.bootstrap import cluster_api
from gpuplace.contracts import topics
from gpuplace.harness.parity_specs import Case, pinned, port_holder, unevaluated
from gpuplace.harness.pipeline_run import FLEET_LABEL
from gpuplace.harness.shared_cluster import (
    Outcome,
    create_all,
    delete_quietly,
    gpuplace_running,
    inventory_seen,
    node_manifest,
    settle,
)
from gpuplace.settings import KafkaAccess, Settings

VERDICTS = ("agree", "violation", "kube-error", "unevaluated", "refused-more", "rejected")
BATCH = 150


@dataclass(frozen=True)
class CaseResult:
    index: int
    case: Case
    gpuplace: Outcome | None  # None: the apiserver rejected the pod
    kube: Outcome | None
    rejected: str | None = None

    @property
    def verdict(self) -> str:
        if self.gpuplace is None or self.kube is None:
            return "rejected"
        ours, theirs = self.gpuplace.node is not None, self.kube.node is not None
        if ours == theirs:
            return "agree"
        if ours:
            return "kube-error" if self.kube.error is not None else "violation"
        return "unevaluated" if unevaluated(self.case.spec) else "refused-more"

    def as_json(self) -> dict[str, Any]:
        def outcome(o: Outcome | None) -> dict[str, Any] | None:
            return None if o is None else {"node": o.node, "unschedulable": o.unschedulable, "error": o.error}
        return {"index": self.index, "verdict": self.verdict, "node": self.case.node, "spec": self.case.spec,
                "gpuplace": outcome(self.gpuplace), "kube_scheduler": outcome(self.kube), "rejected": self.rejected}


def tally(results: Sequence[CaseResult]) -> dict[str, int]:
    counts = Counter(r.verdict for r in results)
    return {v: counts.get(v, 0) for v in VERDICTS}


async def run_parity(cases: Sequence[Case], *, kafka: KafkaAccess, database_url: str, kubeconfig: str,
                     batch: int = BATCH, progress: Callable[[int], None] | None = None) -> list[CaseResult]:
    """Every case through both schedulers, `batch` cases at a time; `progress(done)` after each batch."""
    results: list[CaseResult] = []
    for start in range(0, len(cases), batch):
        results += await _batch(list(enumerate(cases))[start:start + batch], kafka=kafka,
                                database_url=database_url, kubeconfig=kubeconfig)
        if progress is not None:
            progress(len(results))
    return results


async def _batch(cases: list[tuple[int, Case]], *, kafka: KafkaAccess, database_url: str,
                 kubeconfig: str) -> list[CaseResult]:
    run = uuid.uuid4().hex[:6]
    cluster, namespace, holders_ns = f"parity-{run}", f"gpuplace-parity-{run}", f"gpuplace-ports-{run}"
    settings = Settings(**kafka.as_settings(), database_url=SecretStr(database_url), cluster=cluster,
                        kubeconfigs={cluster: kubeconfig}, topic_suffix=f".parity-{run}", namespace=namespace,
                        leader_election_namespace=namespace, node_label_selector=f"{FLEET_LABEL}={run}",
                        policy="gpuplace")
    twins = {i: (f"parity-{run}-{i}-g", f"parity-{run}-{i}-k") for i, _ in cases}
    async with cluster_api(kubeconfig) as api:
        try:
            # manifests as dicts: kubernetes_asyncio takes them like its models (hence the ignores)
            await create_all([api.core.create_namespace(
                {"metadata": {"name": ns}}, _preload_content=False) for ns in (namespace, holders_ns)])  # type: ignore[arg-type]
            await create_all([api.core.create_node(
                _twin(name, run, case.node), _preload_content=False) for i, case in cases for name in twins[i]])  # type: ignore[arg-type]
            await create_all([api.core.create_namespaced_pod(
                holders_ns, port_holder(f"port-{node}", node), _preload_content=False)  # type: ignore[arg-type]
                for i, case in cases if case.node["port_taken"] for node in twins[i]])
            async with gpuplace_running(settings, kubeconfig):
                await inventory_seen(settings, 2 * len(cases), timeout_s=300)
                pods = {f"{who}-{i}": pinned(case.spec, f"{who}-{i}", node, scheduler)
                        for i, case in cases
                        for who, node, scheduler in (("g", twins[i][0], "gpuplace"), ("k", twins[i][1], None))}
                rejected = await _create_pods(api, namespace, pods)
                found = await settle(api, namespace, len(pods) - len(rejected), timeout_s=120 + len(pods))
        finally:
            await delete_quietly(api.core.delete_namespace(namespace), api.core.delete_namespace(holders_ns),
                                 *(api.core.delete_node(name) for pair in twins.values() for name in pair))
            with contextlib.suppress(Exception):
                await delete_topics(settings.kafka, [t + settings.topic_suffix for t in topics.ALL_TOPICS])
    return [CaseResult(i, case, found.get(f"g-{i}"), found.get(f"k-{i}"),
                       rejected.get(f"g-{i}") or rejected.get(f"k-{i}")) for i, case in cases]


def _twin(name: str, run: str, node: dict[str, Any]) -> dict[str, Any]:
    return node_manifest(name, run, cpu=node["cpu"], memory=node["memory"], pods=node["pods"], gpus=node["gpus"],
                         labels=node["labels"], taints=node["taints"], unschedulable=node["unschedulable"],
                         resources=node["resources"])


async def _create_pods(api: KubeClusterApi, namespace: str, pods: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Create every pod, a few at a time; the ones the apiserver refuses, with its message."""
    slots = asyncio.Semaphore(24)
    rejected: dict[str, str] = {}

    async def one(name: str, body: dict[str, Any]) -> None:
        async with slots:
            try:
                await raw_json(await api.core.create_namespaced_pod(
                    namespace, body, _preload_content=False))  # type: ignore[arg-type]
            except ApiException as exc:
                if exc.status != 422:
                    raise
                rejected[name] = f"{exc.status} {exc.reason}: {exc.body!r}"[:500]

    await asyncio.gather(*(one(name, body) for name, body in pods.items()))
    return rejected


__all__ = ["BATCH", "CaseResult", "VERDICTS", "run_parity", "tally"]
