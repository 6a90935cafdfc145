"""Kubernetes smoke tests on the local clusters (kube-apiserver + kube-controller-manager + kube-scheduler +
KWOK): the API surface gpuplace depends on behaves as DESIGN §3 assumes.

- a Node described by GPU Feature Discovery labels turns Ready, untainted (KWOK plays its kubelet);
- a pod with schedulerName gpuplace stays Pending (kube-scheduler leaves it alone) until a Binding names its
  node, then runs;
- a pod of the default scheduler (no schedulerName) is bound by kube-scheduler, then runs;
- an evicted Deployment pod is recreated by its owner as a new Pending pod (the defragmenter's premise);
- an eviction a PodDisruptionBudget forbids is refused with 429;
- deploy/k8s/rbac.yaml grants gpuplace's account what the services do, and not more (leases: in one namespace);
- every cluster of the stack answers, and each is its own cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from .conftest import eventually, unique_name

pytestmark = pytest.mark.integration

RBAC_YAML = Path(__file__).parents[2] / "deploy" / "k8s" / "rbac.yaml"
SCHEDULER = "gpuplace"


def _pod_template(app: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}, "annotations": {"gpuplace.io/gpu-memory": "9420Mi"}},
        "spec": {
            "schedulerName": SCHEDULER,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "perception", "image": "registry.invalid/perception:1"}],
        },
    }


async def _bind(core: client.CoreV1Api, namespace: str, pod: str, node: str) -> None:
    """POST pods/binding. The server answers with a Status that the generated client would fail to parse as
    a V1Binding (kubernetes/kubernetes#80663), so read the raw response and check its status ourselves."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    response = await core.create_namespaced_pod_binding(pod, namespace, binding, _preload_content=False)
    try:
        assert response.status == 201, f"bind {namespace}/{pod} -> {node}: {response.status} {await response.text()}"
    finally:
        response.release()


async def _evict(core: client.CoreV1Api, namespace: str, pod: str) -> None:
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
    await core.create_namespaced_pod_eviction(pod, namespace, eviction)


async def _pods(core: client.CoreV1Api, namespace: str, app: str) -> list[client.V1Pod]:
    return (await core.list_namespaced_pod(namespace, label_selector=f"app={app}")).items


async def _running(core: client.CoreV1Api, namespace: str, pod: str) -> client.V1Pod | None:
    current = await core.read_namespaced_pod(pod, namespace)
    return current if current.status.phase == "Running" else None


async def _ready_node(core: client.CoreV1Api, name: str) -> client.V1Node | None:
    node = await core.read_node(name)
    conditions = {condition.type: condition.status for condition in node.status.conditions or []}
    return node if conditions.get("Ready") == "True" else None


async def _deployment_bound_and_running(
    kube: client.ApiClient, namespace: str, node: str, app: str, replicas: int
) -> list[client.V1Pod]:
    """A Deployment of gpuplace pods, each bound by hand to `node` (we are the scheduler here), all Running."""
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    await apps.create_namespaced_deployment(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": app},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}}, "template": _pod_template(app)},
        },
    )

    async def created() -> list[client.V1Pod] | None:
        pods = await _pods(core, namespace, app)
        return pods if len(pods) == replicas else None

    pods = await eventually(created, what=f"{replicas} pods of deployment {app}")
    for pod in pods:
        await _bind(core, namespace, pod.metadata.name, node)
    return [
        await eventually(lambda p=pod: _running(core, namespace, p.metadata.name), what=f"{pod.metadata.name} Running")
        for pod in pods
    ]


async def test_gpu_node_turns_ready_without_taints(kube: client.ApiClient, gpu_node: dict[str, Any]) -> None:
    core = client.CoreV1Api(kube)
    name = gpu_node["metadata"]["name"]
    node = await eventually(lambda: _ready_node(core, name), what=f"node {name} Ready (KWOK)")

    assert node.metadata.labels["nvidia.com/gpu.product"] == "Tesla-V100-SXM2-16GB"
    assert node.metadata.labels["nvidia.com/gpu.memory"] == "16384"
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    # No node.kubernetes.io/not-ready:NoSchedule (the stack turns TaintNodesByCondition off).
    assert not node.spec.taints


async def test_pod_waits_for_gpuplace_then_runs_once_bound(
    kube: client.ApiClient, namespace: str, gpu_node: dict[str, Any]
) -> None:
    core = client.CoreV1Api(kube)
    node = gpu_node["metadata"]["name"]
    await eventually(lambda: _ready_node(core, node), what=f"node {node} Ready")
    pod = unique_name("slam")
    manifest = _pod_template(pod)
    manifest["metadata"]["name"] = pod
    await core.create_namespaced_pod(namespace, manifest)

    await asyncio.sleep(1.0)
    waiting = await core.read_namespaced_pod(pod, namespace)
    assert (waiting.status.phase, waiting.spec.node_name) == ("Pending", None), "no one but gpuplace may place it"

    await _bind(core, namespace, pod, node)
    running = await eventually(lambda: _running(core, namespace, pod), what=f"{pod} Running (KWOK)")
    assert running.spec.node_name == node


async def test_default_scheduler_pod_is_bound_by_kube_scheduler(
    kube: client.ApiClient, namespace: str, gpu_node: dict[str, Any]
) -> None:
    core = client.CoreV1Api(kube)
    node = gpu_node["metadata"]["name"]
    await eventually(lambda: _ready_node(core, node), what=f"node {node} Ready")
    pod = unique_name("web")
    # No schedulerName: the default scheduler's. The selector keeps it on this test's node, not another's.
    await core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": pod},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {"name": "web", "image": "registry.invalid/web:1", "resources": {"requests": {"cpu": "500m"}}}
                ],
            },
        },
    )

    async def bound() -> client.V1Pod | None:
        current = await core.read_namespaced_pod(pod, namespace)
        return current if current.spec.node_name else None

    placed = await eventually(bound, timeout_s=15.0, what=f"kube-scheduler to bind {pod} (is it running?)")
    assert (placed.spec.scheduler_name, placed.spec.node_name) == ("default-scheduler", node)
    await eventually(lambda: _running(core, namespace, pod), what=f"{pod} Running (KWOK)")


async def test_evicted_deployment_pod_comes_back_pending(
    kube: client.ApiClient, namespace: str, gpu_node: dict[str, Any]
) -> None:
    core = client.CoreV1Api(kube)
    node, app = gpu_node["metadata"]["name"], unique_name("det")
    (victim,) = await _deployment_bound_and_running(kube, namespace, node, app, replicas=1)

    await _evict(core, namespace, victim.metadata.name)

    async def replacement() -> client.V1Pod | None:
        pods = [pod for pod in await _pods(core, namespace, app) if pod.metadata.uid != victim.metadata.uid]
        return pods[0] if pods else None

    new = await eventually(replacement, what=f"the ReplicaSet to recreate {victim.metadata.name}")
    assert (new.status.phase, new.spec.node_name, new.spec.scheduler_name) == ("Pending", None, SCHEDULER)

    async def victim_gone() -> bool:
        try:
            await core.read_namespaced_pod(victim.metadata.name, namespace)
        except ApiException as error:
            return error.status == 404
        return False

    await eventually(victim_gone, what=f"evicted {victim.metadata.name} removed (KWOK)")


async def test_eviction_a_disruption_budget_forbids_is_refused_with_429(
    kube: client.ApiClient, namespace: str, gpu_node: dict[str, Any]
) -> None:
    core, policy = client.CoreV1Api(kube), client.PolicyV1Api(kube)
    node, app = gpu_node["metadata"]["name"], unique_name("seg")
    first, second = await _deployment_bound_and_running(kube, namespace, node, app, replicas=2)
    await policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": app},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        },
    )

    # Until the disruption controller has computed the budget, every eviction is refused: wait for it.
    async def budget_computed() -> client.V1PodDisruptionBudget | None:
        pdb = await policy.read_namespaced_pod_disruption_budget(app, namespace)
        status = pdb.status
        computed = status and status.observed_generation == pdb.metadata.generation and status.current_healthy == 2
        return pdb if computed else None

    pdb = await eventually(budget_computed, what=f"PodDisruptionBudget {app} status")
    assert pdb.status.disruptions_allowed == 1  # 2 healthy - minAvailable 1

    await _evict(core, namespace, first.metadata.name)  # allowed: uses the one disruption
    with pytest.raises(ApiException) as refused:
        await _evict(core, namespace, second.metadata.name)
    assert refused.value.status == 429, refused.value.body


CLUSTER_WIDE = ("nodes", "resourceslices", "deviceclasses")
# What gpuplace's account may and may not do: (verb, resource, subresource, group, allowed).
RBAC_TABLE = [
    ("watch", "pods", "", "", True),
    ("list", "nodes", "", "", True),
    ("get", "pods", "", "", True),
    ("patch", "pods", "", "", False),  # the assignment travels in the Binding: no way to edit a running pod
    ("create", "pods", "binding", "", True),
    ("create", "pods", "eviction", "", True),
    ("list", "poddisruptionbudgets", "", "policy", False),  # the eviction API enforces them
    ("get", "nodes", "", "", False),  # nodes come from the watch
    ("patch", "pods", "status", "", True),
    ("create", "events", "", "events.k8s.io", True),
    ("patch", "events", "", "events.k8s.io", True),
    ("create", "events", "", "", False),  # core/v1 events: gpuplace writes events.k8s.io only
    ("update", "pods", "status", "", False),
    ("delete", "pods", "", "", False),
    ("create", "pods", "", "", False),
    ("update", "nodes", "", "", False),
    ("patch", "nodes", "", "", False),
    ("get", "secrets", "", "", False),
    ("delete", "poddisruptionbudgets", "", "policy", False),
    # DRA: read slices and claims, allocate a claim (finalizer, then status) as kube-scheduler does
    ("watch", "resourceclaims", "", "resource.k8s.io", True),
    ("update", "resourceclaims", "", "resource.k8s.io", True),
    ("update", "resourceclaims", "status", "resource.k8s.io", True),
    ("patch", "resourceclaims", "status", "resource.k8s.io", False),
    ("create", "resourceclaims", "", "resource.k8s.io", False),
    ("delete", "resourceclaims", "", "resource.k8s.io", False),
    ("watch", "resourceslices", "", "resource.k8s.io", True),
    ("update", "resourceslices", "", "resource.k8s.io", False),
    ("get", "deviceclasses", "", "resource.k8s.io", True),
    ("update", "deviceclasses", "", "resource.k8s.io", False),
]
# Leader election (the Role, in the lease namespace only): (verb, in the lease namespace?, allowed).
LEASE_TABLE = [
    ("get", True, True),
    ("create", True, True),
    ("update", True, True),
    ("patch", True, False),
    ("delete", True, False),  # a released Lease stays, holder emptied
    ("list", True, False),  # read by name
    ("watch", True, False),
    ("get", False, False),  # kube-node-lease (node heartbeats), kube-system (the control plane's leaders)
    ("update", False, False),
    ("create", False, False),
]


async def test_rbac_grants_gpuplace_what_it_uses_and_no_more(kube: client.ApiClient, namespace: str) -> None:
    """Apply deploy/k8s/rbac.yaml under unique names, then ask the RBAC authorizer about gpuplace's account."""
    core, rbac, authz = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube), client.AuthorizationV1Api(kube)
    documents = {doc["kind"]: doc for doc in yaml.safe_load_all(RBAC_YAML.read_text()) if doc}
    role_name = unique_name("gpuplace")
    account = documents["ServiceAccount"]["metadata"]["name"]

    role = {**documents["ClusterRole"], "metadata": {"name": role_name}}
    binding = documents["ClusterRoleBinding"]
    binding = {
        **binding,
        "metadata": {"name": role_name},
        "roleRef": {**binding["roleRef"], "name": role_name},
        "subjects": [{**binding["subjects"][0], "namespace": namespace}],
    }
    # The leader-election Role and its binding, in the test's namespace standing for the lease namespace.
    lease_role = {**documents["Role"], "metadata": {**documents["Role"]["metadata"], "namespace": namespace}}
    lease_binding = documents["RoleBinding"]
    lease_binding = {
        **lease_binding,
        "metadata": {**lease_binding["metadata"], "namespace": namespace},
        "subjects": [{**lease_binding["subjects"][0], "namespace": namespace}],
    }
    assert lease_binding["roleRef"]["name"] == lease_role["metadata"]["name"]
    await core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    await rbac.create_cluster_role(role)
    await rbac.create_cluster_role_binding(binding)
    await rbac.create_namespaced_role(namespace, lease_role)
    await rbac.create_namespaced_role_binding(namespace, lease_binding)
    try:
        user = f"system:serviceaccount:{namespace}:{account}"
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]

        async def allowed(verb: str, resource: str, subresource: str, group: str, where: str | None = None) -> bool:
            review = await authz.create_subject_access_review(
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {
                        "user": user,
                        "groups": groups,
                        "resourceAttributes": {
                            "namespace": where if where is not None else "" if resource in CLUSTER_WIDE else namespace,
                            "verb": verb,
                            "group": group,
                            "resource": resource,
                            "subresource": subresource,
                        },
                    },
                }
            )
            return bool(review.status.allowed)

        # The authorizer learns new bindings from its informer: wait until the first grants are visible.
        await eventually(lambda: allowed("watch", "pods", "", ""), what="the new ClusterRoleBinding to take effect")
        await eventually(lambda: allowed("get", "leases", "", "coordination.k8s.io"),
                         what="the new RoleBinding to take effect")
        answers = {row[:4]: await allowed(*row[:4]) for row in RBAC_TABLE}
        expected = {row[:4]: row[4] for row in RBAC_TABLE}
        assert answers == expected

        lease_answers = {(verb, own): await allowed(verb, "leases", "", "coordination.k8s.io",
                                                    namespace if own else "kube-node-lease")
                         for verb, own, _ in LEASE_TABLE}
        assert lease_answers == {(verb, own): grant for verb, own, grant in LEASE_TABLE}
    finally:
        with contextlib.suppress(ApiException):
            await rbac.delete_cluster_role_binding(role_name)
        with contextlib.suppress(ApiException):
            await rbac.delete_cluster_role(role_name)


async def test_every_cluster_answers_and_is_separate(kube_clusters: dict[str, client.ApiClient]) -> None:
    assert len(kube_clusters) >= 2, (
        f"only {list(kube_clusters)}: multi-cluster tests need two clusters (GPUPLACE_STACK_CLUSTERS='east west')"
    )
    versions = {name: (await client.VersionApi(api).get_code()).git_version for name, api in kube_clusters.items()}
    assert all(version.startswith("v1.") for version in versions.values()), versions

    (first, first_api), (second, second_api) = list(kube_clusters.items())[:2]
    marker = unique_name("only-in")
    await client.CoreV1Api(first_api).create_namespace({"metadata": {"name": marker}})
    try:
        with pytest.raises(ApiException) as missing:
            await client.CoreV1Api(second_api).read_namespace(marker)
        assert missing.value.status == 404, f"namespace created in {first} is visible in {second}"
    finally:
        await client.CoreV1Api(first_api).delete_namespace(marker)
