"""The in-memory cluster API passes the same contract as KubeClusterApi against a kube-apiserver."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpuplace.usecases.ports import ClusterApi, NodeCapacity
from tests.contract.cluster_api_contract import ClusterApiContract, ClusterHarness
from tests.fakes import FakeClusterApi


@dataclass
class FakeCluster:
    fake: FakeClusterApi = field(default_factory=lambda: FakeClusterApi(
        nodes={"n1": NodeCapacity(64_000, 524_288, 8, 16_384)}))
    namespace: str = "contract"
    node: str = "n1"

    @property
    def api(self) -> ClusterApi:
        return self.fake

    async def create_pod(self, name: str) -> str:
        return self.fake.create_pod(self.namespace, name)

    async def delete_pod(self, name: str) -> None:
        self.fake.delete_pod(self.namespace, name)

    async def run(self, name: str) -> None:
        """A bound pod runs at once here."""

    async def protect(self, name: str) -> None:
        self.fake.refuse_eviction.add(name)

    async def feedback(self, name: str) -> list[tuple[str, str]]:
        return [("FailedScheduling", r[3]) if r[0] == "unschedulable" else (r[3], r[4]) if r[0] == "warning"
                else ("Scheduled", f"{r[3]} {r[4]}") for r in self.fake.reports if r[1:3] == (self.namespace, name)]


class TestFakeClusterApi(ClusterApiContract):
    @pytest.fixture
    def cluster(self) -> ClusterHarness:
        return FakeCluster()
