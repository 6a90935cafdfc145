"""`gpuplace explain` on the real stack (issue 14), after test_defrag_e2e's run: kube-controller-manager recreates
the Deployment's evicted pod and enforces a PodDisruptionBudget, KWOK runs the pods.

Three one-GPU nodes are left with 7384, 7384 and 10960 MiB free. urgent-a (12000 MiB) fits nowhere; its plan to
move the Deployment's pod is refused by the budget, and it keeps waiting. Without the budget, urgent-b gets that
move: the Deployment pod is evicted from n1, its replacement takes the place promised on n3, urgent-b is bound on
n1. explain then answers for the bound filler, the waiting urgent-a and the moved pod, with their reasons.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import pytest
from kubernetes_asyncio import client

from gpuplace.adapters.kube.cluster_api import raw_json
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import cluster_api, database
from gpuplace.contracts import topics
from gpuplace.harness.pipeline_run import ensure_priority_classes
from gpuplace.usecases.explain import explain
from services.cluster_watcher import app as cluster_watcher
from services.placement import app as placement
from tests.integration.conftest import eventually
from tests.integration.test_defrag_e2e import (
    A100,
    V100,
    Fleet,
    _bound_app_pod,
    _budget_computed,
    _placement_event,
    fragment,
    scene_settings,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


async def test_explain_answers_for_a_bound_a_waiting_and_a_moved_pod(kafka_bootstrap: str,
                                                                     database_url: str) -> None:
    run, kubeconfig, settings = scene_settings(kafka_bootstrap, database_url, "explain")
    cluster, namespace = settings.cluster, settings.namespace
    await migrate.upgrade_async(database_url)
    stop = asyncio.Event()
    names = [f"x{run}-n1", f"x{run}-n2", f"x{run}-n3"]
    async with cluster_api(kubeconfig) as api:
        fleet = Fleet(api, namespace, run)
        await ensure_priority_classes(api)
        await raw_json(await api.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False))
        services = [asyncio.create_task(placement.run(settings, stop)),
                    asyncio.create_task(cluster_watcher.run(settings, stop, kubeconfig=kubeconfig))]
        try:
            first = await fragment(fleet, names)

            policy_api = client.PolicyV1Api(api.api_client)
            await policy_api.create_namespaced_pod_disruption_budget(namespace, {
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "victim"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "victim"}}}})
            await eventually(lambda: _budget_computed(policy_api, namespace), timeout_s=60, what="PDB status")
            await fleet.pod("urgent-a", 12000, 100, 33.0)
            await _placement_event(kafka_bootstrap, settings.topic(topics.PLACEMENTS), "defrag_aborted")
            await policy_api.delete_namespaced_pod_disruption_budget("victim", namespace)
            await fleet.pod("urgent-b", 12000, 100, 33.0)
            assert await eventually(lambda: fleet.node_of("urgent-b"), timeout_s=120, what="urgent-b") == names[0]
            replacement = await eventually(lambda: _bound_app_pod(fleet, names[2]), timeout_s=90,
                                           what="the victim's replacement on n3")
            await asyncio.sleep(1.0)  # the replacement's bound decision is recorded after its bind returns

            async with database(settings) as uow_factory:
                bound = await explain(uow_factory, f"{namespace}/filler-a")
                waiting = await explain(uow_factory, "urgent-a", namespace=namespace, cluster=cluster)
                moved = await explain(uow_factory, first["metadata"]["name"], namespace=namespace)
        finally:
            stop.set()
            await asyncio.gather(*services, return_exceptions=True)
            await raw_json(await api.core.delete_namespace(namespace, _preload_content=False))
            for name in names:
                try:
                    await raw_json(await api.core.delete_node(name, _preload_content=False))
                except Exception:  # noqa: BLE001 - a node the test never created
                    pass

    # the bound pod: where, which policy, when bound
    assert (bound.state, bound.node, bound.placed_by, bound.policy) == ("bound", names[1], "policy", "bestfit")
    assert [(g.index, g.model, g.memory_mib) for g in bound.gpus] == [(0, V100[0], 9000)]
    assert bound.score is not None and bound.waited_s is not None and bound.waited_s >= 0
    # the waiting pod: the filter that refused it on each node class, and the plan the budget refused
    assert waiting.waiting and set(waiting.reasons) == {V100[0], A100[0]}
    # the latest reasons, after urgent-b took n1: both V100 nodes' holes too small, said as one node says it where
    # their numbers are the same ("0 of 1 GPU(s) ..."), else as the largest of the two ("no GPU with ...")
    v100 = re.findall(r"(\d+) node\(s\): ((?:0 of 1 GPU\(s\)|no GPU) with [^()]*\(largest hole [^()]*\)) "
                      r"\((\w+)\)", waiting.reasons[V100[0]])
    assert sum(int(n) for n, _, _ in v100) == 2 and {f for _, _, f in v100} == {"GpuFit"}
    assert "largest hole" in waiting.reasons[A100[0]] and "(GpuFit)" in waiting.reasons[A100[0]]
    assert waiting.attempts >= 1 and waiting.first_attempt_at is not None
    assert waiting.defrag_plans and waiting.defrag_plans[0].outcome == "aborted"
    assert "PodDisruptionBudget" in (waiting.defrag_plans[0].reason or "")
    # the moved pod: evicted for urgent-b from n1, its replacement on n3
    assert moved.moved is not None
    assert (moved.moved.beneficiary, moved.moved.from_node, moved.moved.from_gpus, moved.moved.to_node) == \
        (f"{namespace}/urgent-b", names[0], [0], names[2])
    assert (moved.moved.replacement, moved.moved.replacement_node) == \
        (f"{namespace}/{replacement['metadata']['name']}", names[2])

    # the command line, as an operator runs it: text and --json
    env = {**os.environ, "GPUPLACE_DATABASE_URL": database_url}
    cli = [sys.executable, "-m", "gpuplace.cli.app", "explain"]
    text = subprocess.run([*cli, "urgent-a", "-n", namespace, "--cluster", cluster], env=env, capture_output=True,
                          text=True, timeout=60, check=True).stdout
    assert "waits because:" in text and "(GpuFit)" in text
    assert re.search(rf"{V100[0]}: \d node\(s\): (0 of 1 GPU\(s\)|no GPU) with ", text), text
    assert "aborted (eviction of" in text and "PodDisruptionBudget" in text
    answer = json.loads(subprocess.run([*cli, f"{namespace}/{first['metadata']['name']}", "--json"], env=env,
                                       capture_output=True, text=True, timeout=60, check=True).stdout)
    assert answer["moved"]["beneficiary"] == f"{namespace}/urgent-b" and answer["moved"]["to_node"] == names[2]
    missing = subprocess.run([*cli, f"{namespace}/nobody"], env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"gpuplace: error: gpuplace never saw a pod named 'nobody' (namespace {namespace})"
