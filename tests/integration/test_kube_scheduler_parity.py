"""gpuplace agrees with kube-scheduler on every rule it does not improve on: a differential test on the real
stack, kube-scheduler (v1.37.2, the stack's: deploy/local/kube/go.mod) running beside gpuplace.

300 random pod specs (nodeSelector, required and preferred node affinity, tolerations, host ports, CPU and
memory), each with a twin pair of random nodes (the same labels, taints, cordon and capacity; only the
hostname differs). The gpuplace copy of the pod is pinned to the first twin by a `kubernetes.io/hostname`
selector, the default-scheduler copy to the second. Each twin pair holds one pod of each scheduler and nothing
else, so every verdict is about the rules alone. Whenever gpuplace binds its copy, kube-scheduler must bind
its copy; whenever gpuplace refuses (the pod waits with PodScheduled=False and a reason), kube-scheduler
must refuse too. Some twins already run a host-network pod on port 8080 (of a third scheduler, bound with
`nodeName`), which gpuplace must see and charge like kube-scheduler does.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from gpuplace.bootstrap import cluster_api
from gpuplace.cli.pipeline_run import FLEET_LABEL
from gpuplace.cli.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from tests.integration.conftest import run_id
from tests.integration.shared_cluster import (
    HOSTNAME,
    create_all,
    delete_quietly,
    gpuplace_running,
    inventory_seen,
    node_manifest,
    settle,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

SPECS = 300
SEED = 20261201
LABELS = {"zone": ["a", "b", "c"], "disk": ["ssd", "hdd"], "rank": ["1", "3", "5", "7", "9"], "team": ["x", "y"]}
TAINTS = [("dedicated", "infra"), ("gpu", "true"), ("maintenance", "")]
EFFECTS = ["NoSchedule", "NoExecute", "PreferNoSchedule"]


def random_node(rng: random.Random) -> dict[str, Any]:
    labels = {k: rng.choice(v) for k, v in LABELS.items() if rng.random() < 0.7}
    taints = [{"key": k, "value": v, "effect": rng.choice(EFFECTS)} for k, v in TAINTS if rng.random() < 0.2]
    return {"labels": labels, "taints": taints, "unschedulable": rng.random() < 0.1,
            "cpu": rng.choice(["2", "4", "8"]), "memory": rng.choice(["4Gi", "8Gi", "16Gi"]),
            "port_taken": rng.random() < 0.15}


def _requirement(rng: random.Random) -> dict[str, Any]:
    key = rng.choice(list(LABELS))
    operator = rng.choice(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"])
    if operator in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": operator}
    if operator in ("Gt", "Lt"):
        return {"key": "rank", "operator": operator, "values": [rng.choice(["0", "4", "6", "10"])]}
    return {"key": key, "operator": operator, "values": rng.sample(LABELS[key], rng.randint(1, len(LABELS[key])))}


def random_pod_spec(rng: random.Random) -> dict[str, Any]:
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0}
    if rng.random() < 0.3:
        key = rng.choice(list(LABELS))
        spec["nodeSelector"] = {key: rng.choice(LABELS[key])}
    affinity: dict[str, Any] = {}
    if rng.random() < 0.4:
        terms = [{"matchExpressions": [_requirement(rng) for _ in range(rng.randint(1, 2))]}
                 for _ in range(rng.randint(1, 2))]
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if rng.random() < 0.3:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": rng.randint(1, 100), "preference": {"matchExpressions": [_requirement(rng)]}}]
    if affinity:
        spec["affinity"] = {"nodeAffinity": affinity}
    tolerations = []
    for key, value in TAINTS:
        if rng.random() < 0.3:
            toleration = {"key": key, "operator": rng.choice(["Equal", "Exists"])}
            if toleration["operator"] == "Equal":
                toleration["value"] = value if rng.random() < 0.8 else "other"
            if rng.random() < 0.5:
                toleration["effect"] = rng.choice(EFFECTS)
            tolerations.append(toleration)
    if rng.random() < 0.05:
        tolerations.append({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"})
    if rng.random() < 0.05:
        tolerations.append({"operator": "Exists"})
    if tolerations:
        spec["tolerations"] = tolerations
    container: dict[str, Any] = {"name": "c", "image": "registry.local/app:1", "resources": {"requests": {
        "cpu": rng.choice(["500m", "1", "3", "6"]), "memory": rng.choice(["1Gi", "3Gi", "6Gi", "12Gi"])}}}
    if rng.random() < 0.3:
        container["ports"] = [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}]
    spec["containers"] = [container]
    return spec


def pinned(spec: dict[str, Any], name: str, node: str, scheduler: str | None) -> dict[str, Any]:
    body = {**spec, "nodeSelector": {**spec.get("nodeSelector", {}), HOSTNAME: node}}
    if scheduler:
        body["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def port_holder(name: str, node: str) -> dict[str, Any]:
    """A pod bound directly with nodeName (no scheduler at all) that holds host port 8080."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "nodeName": node, "terminationGracePeriodSeconds": 0, "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "c", "image": "registry.local/app:1",
                        "ports": [{"containerPort": 8080, "hostPort": 8080}]}]}}


async def test_gpuplace_and_kube_scheduler_agree_on_every_pinned_pod(kafka_bootstrap: str, database_url: str) -> None:
    run = run_id()
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    cluster, namespace, holders_ns = f"east-{run}", f"gpuplace-parity-{run}", f"gpuplace-ports-{run}"
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=cluster,
                        kubeconfigs={cluster: kubeconfig}, topic_suffix=f".parity-{run}", namespace=namespace,
                        leader_election_namespace=namespace,
                        node_label_selector=f"{FLEET_LABEL}={run}", policy="gpuplace")
    rng = random.Random(SEED)
    nodes = [random_node(rng) for _ in range(SPECS)]
    specs = [random_pod_spec(rng) for _ in range(SPECS)]
    twins = [(f"parity-{run}-{i}-g", f"parity-{run}-{i}-k") for i in range(SPECS)]
    async with cluster_api(kubeconfig) as api:
        try:
            await create_all([api.core.create_namespace({"metadata": {"name": ns}}, _preload_content=False)
                              for ns in (namespace, holders_ns)])
            await create_all([api.core.create_node(node_manifest(
                name, run, cpu=n["cpu"], memory=n["memory"], labels=n["labels"], taints=n["taints"],
                unschedulable=n["unschedulable"]), _preload_content=False)
                for pair, n in zip(twins, nodes, strict=True) for name in pair])
            await create_all([api.core.create_namespaced_pod(holders_ns, port_holder(f"port-{node}", node),
                                                             _preload_content=False)
                              for pair, n in zip(twins, nodes, strict=True) if n["port_taken"] for node in pair])
            async with gpuplace_running(settings, kubeconfig):
                await inventory_seen(settings, 2 * SPECS)
                await create_all([api.core.create_namespaced_pod(namespace, body, _preload_content=False)
                                  for i, ((g, k), spec) in enumerate(zip(twins, specs, strict=True))
                                  for body in (pinned(spec, f"g-{i}", g, "gpuplace"), pinned(spec, f"k-{i}", k, None))])

                found = await settle(api, namespace, 2 * SPECS, timeout_s=300)
        finally:
            await delete_quietly(api.core.delete_namespace(namespace), api.core.delete_namespace(holders_ns),
                                 *(api.core.delete_node(name) for pair in twins for name in pair))

    disagreements = []
    for i, (g_node, k_node) in enumerate(twins):
        ours, theirs = found[f"g-{i}"], found[f"k-{i}"]
        assert ours.node in (None, g_node) and theirs.node in (None, k_node)
        if (ours.node is None) != (theirs.node is None):
            disagreements.append((i, nodes[i], specs[i], ours, theirs))
        if ours.node is None:
            assert ours.unschedulable, f"g-{i} waits without a reason"
    assert not disagreements, f"{len(disagreements)} disagreement(s), first: {disagreements[0]}"
    refused = sum(1 for i in range(SPECS) if found[f"g-{i}"].node is None)
    # Both outcomes must be common, or the comparison says little.
    assert SPECS // 5 <= refused <= SPECS - SPECS // 5, f"{refused} of {SPECS} refused: the generator is lopsided"
