"""KubeClusterApi passes the shared contract (tests/contract/cluster_api_contract.py) against the stack's
kube-apiserver: each case in a fresh namespace, with a KWOK node of its own to bind to.

The pods name a scheduler nobody runs, so nothing but the case itself binds them (not even a gpuplace
placement service a bench may be running on the same stack).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio import client

from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.usecases.ports import ClusterApi
from tests.contract.cluster_api_contract import ClusterApiContract, ClusterHarness, gone
from tests.integration.conftest import eventually

pytestmark = pytest.mark.integration

SCHEDULER = "gpuplace-contract"  # no scheduler of this name runs


@dataclass
class KubeCluster:
    kube: client.ApiClient
    namespace: str
    node: str

    def __post_init__(self) -> None:
        self.api: ClusterApi = KubeClusterApi(self.kube)  # typed: the adapter satisfies the port
        self.core = client.CoreV1Api(self.kube)

    async def create_pod(self, name: str) -> str:
        pod = await raw_json(await self.core.create_namespaced_pod(self.namespace, {
            "metadata": {"name": name, "labels": {"contract": name}},
            "spec": {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": "registry.invalid/contract:1"}]},
        }, _preload_content=False))
        return str(pod["metadata"]["uid"])

    async def delete_pod(self, name: str) -> None:
        await raw_json(await self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0,
                                                             _preload_content=False))
        assert await gone(self, name), f"pod {name} still there 30 s after its deletion"

    async def run(self, name: str) -> None:
        async def running() -> bool:
            pod = await self.api.read_pod(self.namespace, name)
            return pod is not None and pod["status"].get("phase") == "Running"

        await eventually(running, what=f"KWOK to run pod {name}")

    async def protect(self, name: str) -> None:
        await raw_json(await client.PolicyV1Api(self.kube).create_namespaced_pod_disruption_budget(self.namespace, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"contract": name}}},
        }, _preload_content=False))

    async def feedback(self, name: str) -> list[tuple[str, str]]:
        listed = await raw_json(await client.EventsV1Api(self.kube).list_namespaced_event(
            self.namespace, _preload_content=False))
        ours = [e for e in listed["items"]
                if e["regarding"].get("name") == name and e.get("reportingController") == "gpuplace"]
        return [(e["reason"], e["note"]) for e in sorted(ours, key=lambda e: e["eventTime"])]


class TestKubeClusterApi(ClusterApiContract):
    @pytest.fixture
    def cluster(self, kube: client.ApiClient, namespace: str, gpu_node: dict[str, Any]) -> ClusterHarness:
        return KubeCluster(kube, namespace, gpu_node["metadata"]["name"])
