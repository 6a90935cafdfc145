"""`gpuplace bench dra` on the real stack, small: 4 nodes x 8 GPUs as ResourceSlices, 50 claims (1.25x the fleet) in
waves of 24.

Each side (kube-scheduler with its DRA allocator; gpuplace's services as processes, on the shared Kafka and
PostgreSQL with the run's own topic suffix) must place some claims and leave the rest pending, its figures must add
up, and what the apiserver holds must agree with them: every bound pod's claim allocated on its node and reserved
for it, no device consuming more memory than its slice offers (read from the cluster, not from the run's own
arithmetic). Afterwards nothing of the run is left: no namespace, node, slice, topic, nor the bench's kube-scheduler
or gpuplace's service processes.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from typer.testing import CliRunner

from gpuplace.adapters.kafka import list_topics
from gpuplace.adapters.kube import quantity
from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.bootstrap import cluster_api
from gpuplace.cli import app as cli
from gpuplace.core.model import Node
from gpuplace.harness import dra_objects
from gpuplace.harness.dra_run import DraKubeSchedulerRun, DraResult, DraRun
from gpuplace.harness.kube_scheduler_process import ClientLimits, find_binary
from gpuplace.harness.pipeline_comparison import run_then_clean
from gpuplace.harness.pipeline_comparison_report import GPUPLACE, KUBE_SCHEDULER, SIDES
from gpuplace.harness.pipeline_run import FLEET_LABEL, RunConfig, RunResult
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.harness.stack_run import settings_from_stack
from tests.integration.child_processes import our_kube_schedulers, our_services

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

NODES, PODS = 4, 50


async def _cluster_state(api: KubeClusterApi, namespace: str, run_id: str) -> tuple[list[Any], list[Any], list[Any]]:
    resource = client.ResourceV1Api(api.api_client)
    pods = await raw_json(await api.core.list_namespaced_pod(namespace, _preload_content=False))
    claims = await raw_json(await resource.list_namespaced_resource_claim(namespace, _preload_content=False))
    slices = await raw_json(await resource.list_resource_slice(label_selector=f"{FLEET_LABEL}={run_id}",
                                                                _preload_content=False))
    return pods["items"], claims["items"], slices["items"]


class _Looking(DraRun):
    """The run (gpuplace's side), keeping what the cluster holds when the result is taken (before the clean-up)."""

    seen: dict[str, tuple[list[Any], list[Any], list[Any]]]
    running: list[int]  # the run's scheduler processes then: the check that none is left must be able to fail

    async def _result(self, apis: dict[str, KubeClusterApi], fleets: dict[str, list[Node]],
                      seconds: float) -> RunResult:
        result = await super()._result(apis, fleets, seconds)
        self.seen = {cluster: await _cluster_state(apis[name], self.namespace, self.config.run_id)
                     for cluster, name in self.clusters.items()}
        self.running = our_kube_schedulers() + our_services(self.config.run_id)
        return result


class _LookingKubeScheduler(_Looking, DraKubeSchedulerRun):
    """kube-scheduler's side, looked at the same way."""


def _side_run(side: str, config: RunConfig) -> _Looking:
    if side == KUBE_SCHEDULER:
        return _LookingKubeScheduler(config, settings_from_stack(), binary=find_binary(), limits=ClientLimits())
    assert side == GPUPLACE
    return _Looking(config, settings_from_stack())


async def _left(kubeconfig: str, namespace: str, run_id: str) -> list[str]:
    async with cluster_api(kubeconfig) as api:
        found = []
        try:
            await raw_json(await api.core.read_namespace(namespace, _preload_content=False))
            found.append(f"namespace {namespace}")
        except ApiException as exc:
            if exc.status != 404:
                raise
        nodes = await raw_json(await api.core.list_node(label_selector=f"{FLEET_LABEL}={run_id}",
                                                        _preload_content=False))
        found += [f"node {n['metadata']['name']}" for n in nodes["items"]]
        slices = await raw_json(await client.ResourceV1Api(api.api_client).list_resource_slice(
            label_selector=f"{FLEET_LABEL}={run_id}", _preload_content=False))
        found += [f"slice {s['metadata']['name']}" for s in slices["items"]]
    return found


@pytest.mark.parametrize("side", SIDES)
async def test_dra_run_places_what_fits_and_its_figures_match_the_cluster(
        side: str, kube_clusters: dict[str, client.ApiClient], kafka_bootstrap: str) -> None:
    kubeconfigs = cluster_kubeconfigs()
    config = RunConfig(kubeconfigs=kubeconfigs, nodes=NODES, pods=PODS, seed=7, keep=True, processes=True,
                       timeout_s=300)
    run = _side_run(side, config)
    result = await run_then_clean(run)
    assert isinstance(result, DraResult)

    assert result.pods_submitted == PODS
    assert result.pods_bound + result.pods_pending == PODS
    assert 0 < result.pods_bound < PODS, "1.25x the fleet: some claims fit, some do not"
    assert result.placed_slices + result.placed_whole == result.pods_bound
    assert result.pending_slices + result.pending_whole == result.pods_pending
    assert result.devices_overcommitted == 0 and result.bound_without_allocation == 0
    assert result.allocated_not_bound == 0
    assert result.gpus_total == NODES * 8
    assert result.binds_per_s > 0 and result.pending_to_bound_ms["p99"] >= result.pending_to_bound_ms["p50"] > 0
    first = result.first_failure
    assert first is not None, "a claim failed: the run must say when"
    assert 0 <= first["stranded_mib"] <= first["free_mib"] <= result.memory_total_mib
    # the claims turned away by then are some of those waiting then: they can use no more of the free memory
    assert first["stranded_mib"] <= first["turned_away"]["stranded_mib"] <= first["turned_away"]["free_mib"]
    assert first["turned_away"]["free_mib"] == first["free_mib"] and first["turned_away"]["pending"] >= 1
    # in waves (the default) it is taken once the failed claim's wave settled: the claims pending are those turned away
    assert first["pending"] == first["turned_away"]["pending"]
    assert first["placed_before"] <= result.pods_bound
    assert 0 <= result.at_end["stranded_mib"] <= result.at_end["free_mib"]
    assert result.at_end["free_mib"] == result.memory_total_mib - result.memory_allocated_mib

    # the cluster's own account: every bound pod's claim allocated on its node, no device past its capacity
    bound = 0
    for pods, claims, slices in run.seen.values():
        capacity = {(s["spec"]["pool"]["name"], d["name"]): quantity.memory_mib(d["capacity"]["memory"]["value"])
                    for s in slices for d in s["spec"]["devices"]}
        claim_of = {c["metadata"]["name"]: c for c in claims}
        used: dict[tuple[str, str], int] = {}
        for pod in pods:
            node = pod["spec"].get("nodeName")
            claim = claim_of[dra_objects.claim_name(pod["metadata"]["name"])]
            results = dra_objects.allocated_devices(claim)
            if not node:
                assert not results, f"{pod['metadata']['name']} is pending with its claim allocated"
                continue
            bound += 1
            assert results and {pool for pool, _, _ in results} == {node}, pod["metadata"]["name"]
            reserved = [r["name"] for r in claim["status"].get("reservedFor") or []]
            assert reserved == [pod["metadata"]["name"]]
            for pool, device, mib in results:
                used[(pool, device)] = used.get((pool, device), 0) + (capacity[(pool, device)] if mib is None else mib)
        over = {key: (u, capacity[key]) for key, u in used.items() if u > capacity[key]}
        assert not over, f"devices over-committed: {over}"
    assert bound == result.pods_bound

    assert run.running, "the run's scheduler processes were not found while it ran"
    assert our_kube_schedulers() == [], "the run left its kube-scheduler running"
    assert our_services(config.run_id) == [], "the run left gpuplace's service processes running"
    assert not {t for t in await list_topics(kafka_bootstrap) if t.endswith(run.suffix)}, "the run left its topics"
    for cluster, apiserver in run.clusters.items():
        left = await _left(kubeconfigs[apiserver], run.namespace, config.run_id)
        assert not left, f"{cluster}: the run left {left}"


async def test_cli_reports_kube_scheduler_alone_as_json_and_markdown(kube_clusters: dict[str, client.ApiClient],
                                                                    tmp_path: Path) -> None:
    out = tmp_path / "dra.md"
    cli._register_all()
    result = await asyncio.to_thread(
        CliRunner().invoke, cli.app, ["bench", "dra", "--nodes", str(NODES), "--pods", str(PODS), "--schedulers",
                                      "kube-scheduler", "--out", str(out), "--json"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    printed = json.loads(result.stdout)  # progress and the per-side line go to stderr
    assert printed == json.loads(out.with_suffix(".json").read_text())
    ks = printed["sides"]["kube-scheduler"]
    assert ks["pods_bound"] + ks["pods_pending"] == PODS and ks["devices_overcommitted"] == 0
    assert printed["issue13_bar"]["met"] is None
    assert printed["setup"]["kube_scheduler"].startswith("Kubernetes v1.37")
    text = out.read_text()
    assert "| pods placed |" in text and "clientConnection.qps 5000, clientConnection.burst 10000" in text
