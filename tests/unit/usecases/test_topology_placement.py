"""GPU topology through the placement service: the node's labels (translate) -> node event -> GPU rows ->
ClusterView.hydrate -> the core, and the pod's gpu-topology annotation -> its stored request -> the core."""

from __future__ import annotations

from gpuplace.adapters.kube.topology_labels import GPU_NUMA
from gpuplace.adapters.kube.translate import node_event, pod_event
from gpuplace.adapters.kube.vocabulary import GPUPLACE_TOPOLOGY
from gpuplace.core.model import Node
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.usecases.cluster_view import ClusterView
from gpuplace.usecases.decide import decider
from gpuplace.usecases.placement import PlacementService
from gpuplace.usecases.provenance import view_digest
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory

PLAIN_DIGEST = "6f384f1b0e5d966b"  # view_digest of one idle 4 x H100 node, computed on main before topology


def kube_node(name: str, labels: dict[str, str]) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                  "nvidia.com/gpu.memory": "81559", **labels}},
            "spec": {}, "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def kube_pod(name: str, gpus: int, annotations: dict[str, str] | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": "train", "uid": f"uid-{name}", "annotations": annotations or {}},
            "spec": {"schedulerName": "gpuplace", "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                            "requests": {"cpu": "1", "memory": "1Gi"}}}]}}


async def _placed(labels: dict[str, str]) -> tuple[list[tuple], ClusterView]:
    api = FakeClusterApi()
    uow_factory = FakeUnitOfWorkFactory()
    placement = PlacementService(uow_factory, {"east": api}, decider("gpuplace"), policy="gpuplace")
    await placement.on_node(node_event(kube_node("dgx", labels), cluster="east", region="eu"))
    for name, gpus in (("first", 2), ("second", 4)):
        await placement.on_pod(pod_event(kube_pod(name, gpus), cluster="east", region="eu"))
        await placement.drain()
    async with uow_factory() as uow:  # the view the service decides on, from the stored rows
        view = ClusterView.hydrate("east", await uow.nodes.load_nodes("east"), await uow.nodes.load_gpus("east"),
                                   [], [])
    return api.reports, view


async def test_a_labelled_node_keeps_a_4_gpu_pod_in_one_numa_node():
    reports, view = await _placed({GPU_NUMA: "0.0.0.0.1.1.1.1"})
    assert [r[-1] for r in reports] == ["(GPUs 0, 1: 81559 MiB each)", "(GPUs 4, 5, 6, 7: 81559 MiB each)"]
    assert view.snapshot is not None and view.snapshot.gpu_numa[0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


async def test_an_unlabelled_node_is_placed_as_before():
    reports, view = await _placed({})
    assert [r[-1] for r in reports] == ["(GPUs 0, 1: 81559 MiB each)", "(GPUs 2, 3, 4, 5: 81559 MiB each)"]
    assert view.snapshot is not None and not view.snapshot.any_topology


async def test_a_pod_that_requires_one_domain_waits_on_a_node_that_does_not_describe_it():
    api = FakeClusterApi()
    uow_factory = FakeUnitOfWorkFactory()
    placement = PlacementService(uow_factory, {"east": api}, decider("gpuplace"), policy="gpuplace")
    await placement.on_node(node_event(kube_node("dgx", {}), cluster="east", region="eu"))
    await placement.on_pod(pod_event(kube_pod("strict", 4, {GPUPLACE_TOPOLOGY: "required"}), cluster="east",
                                     region="eu"))
    await placement.drain()
    (report,) = api.reports
    assert report[:3] == ("unschedulable", "train", "strict")
    assert "node does not describe its GPU topology" in report[3]


def test_the_view_digest_tells_topologies_apart_and_leaves_clusters_without_one_as_they_were():
    plain = ClusterSnapshot([Node.with_gpus("n", 64000, 262144, 4, "H100", 81920)])
    numa = ClusterSnapshot([Node.with_gpus("n", 64000, 262144, 4, "H100", 81920, numa=(0, 0, 1, 1))])
    pairs = ClusterSnapshot([Node.with_gpus("n", 64000, 262144, 4, "H100", 81920, numa=(0, 1, 0, 1))])
    assert len({view_digest(plain), view_digest(numa), view_digest(pairs)}) == 3
    # the digest of a cluster without topology is the one recorded before topology existed (main at 34b54f7)
    assert view_digest(plain) == PLAIN_DIGEST
