"""What every ClusterApi must do (usecases/ports.py); subclassed once per implementation.

`TestFakeClusterApi` (tests/unit, over tests/fakes.FakeClusterApi) and `TestKubeClusterApi` (tests/integration,
KubeClusterApi against the stack's kube-apiserver and a KWOK node) give the cases a `cluster` fixture, a
ClusterHarness: the API under test plus the few things a case must arrange or observe around it (a pod, a
deletion, a disruption budget, the Events). The assertions live here, so the fake cannot drift from the
apiserver unnoticed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Protocol

from gpuplace.adapters.kube.vocabulary import ASSIGNMENT
from gpuplace.usecases.ports import BindOutcome, ClusterApi, EvictOutcome, Json, NodeCapacity
from tests.contract.covers import covers

MESSAGE = "0/1 nodes are available: 1 0 of 8 GPU(s) with >= 9420 MiB free (largest hole 6860 MiB)."
EARLIER_UID = "5e1f3c9a-0000-4000-8000-000000000000"  # the uid of a deleted namesake


class ClusterHarness(Protocol):
    @property
    def api(self) -> ClusterApi: ...

    @property
    def namespace(self) -> str: ...

    @property
    def node(self) -> str:
        """A node pods may be bound to."""
        ...

    async def create_pod(self, name: str) -> str:
        """A pending pod nobody else places, in `namespace`; returns its uid."""
        ...

    async def delete_pod(self, name: str) -> None:
        """Delete the pod, returning once it is gone."""
        ...

    async def run(self, name: str) -> None:
        """Return once the bound pod runs (a PodDisruptionBudget protects running pods only)."""
        ...

    async def protect(self, name: str) -> None:
        """A PodDisruptionBudget that allows no disruption of the pod."""
        ...

    async def feedback(self, name: str) -> list[tuple[str, str]]:
        """(reason, note) of the Events about the pod, oldest first."""
        ...


def assignment(node: str) -> Json:
    return {"node": node, "gpus": [{"index": 1, "memory_mib": 9420, "share_milli": 575}]}


async def bound_pod(cluster: ClusterHarness, name: str) -> str:
    """A pod created and bound to the harness's node; returns its uid."""
    uid = await cluster.create_pod(name)
    outcome = await cluster.api.bind(cluster.namespace, name, uid, cluster.node, assignment(cluster.node))
    assert outcome is BindOutcome.BOUND
    return uid


async def gone(cluster: ClusterHarness, name: str, timeout_s: float = 30.0) -> bool:
    """Whether read_pod answers None within timeout_s (an evicted pod may take its grace period)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while await cluster.api.read_pod(cluster.namespace, name) is not None:
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.2)
    return True


class ClusterApiContract:
    """Subclasses define the `cluster` fixture: a fresh ClusterHarness (its own namespace, on the real side)."""

    @covers("read_pod")
    async def test_a_pod_reads_as_its_json_and_a_deleted_one_as_none(self, cluster: ClusterHarness) -> None:
        uid = await cluster.create_pod("reader")
        pod = await cluster.api.read_pod(cluster.namespace, "reader")
        assert pod is not None
        assert (pod["metadata"]["name"], pod["metadata"]["namespace"], pod["metadata"]["uid"]) == \
            ("reader", cluster.namespace, uid)
        assert not pod["spec"].get("nodeName") and pod["status"]["phase"] == "Pending"
        await cluster.delete_pod("reader")
        assert await cluster.api.read_pod(cluster.namespace, "reader") is None

    @covers("node_capacity")
    async def test_a_node_reads_as_cluster_watcher_reads_it_and_a_missing_one_as_none(self,
                                                                                      cluster: ClusterHarness) -> None:
        # the harness's node: 8 x 16 GiB V100 by GPU Feature Discovery labels, 64 CPUs, 512 GiB
        assert await cluster.api.node_capacity(cluster.node) == NodeCapacity(64_000, 524_288, 8, 16_384)
        assert await cluster.api.node_capacity("no-such-node-here") is None

    @covers("bind")
    async def test_a_bind_lands_once_with_its_gpu_assignment(self, cluster: ClusterHarness) -> None:
        uid = await cluster.create_pod("binder")
        wanted = assignment(cluster.node)
        assert await cluster.api.bind(cluster.namespace, "binder", uid, cluster.node, wanted) is BindOutcome.BOUND
        pod = await cluster.api.read_pod(cluster.namespace, "binder")
        assert pod is not None and pod["spec"]["nodeName"] == cluster.node
        assert json.loads(pod["metadata"]["annotations"][ASSIGNMENT]) == wanted  # in the same write
        # not idempotent: the second bind of a bound pod is a conflict, to reconcile, never to retry
        again = await cluster.api.bind(cluster.namespace, "binder", uid, cluster.node, wanted)
        assert again is BindOutcome.CONFLICT

    @covers("bind")
    async def test_a_hami_request_on_a_node_hami_did_not_register_binds_as_any_pod(self,
                                                                                 cluster: ClusterHarness) -> None:
        uid = await cluster.create_pod("hami-here")
        wanted = assignment(cluster.node)
        request = {"position": 0, "containers": 1, "gpu_count": 1, "memory_mib": 3000, "memory_percent": None,
                   "cores": 30}
        outcome = await cluster.api.bind(cluster.namespace, "hami-here", uid, cluster.node, wanted, request)
        assert outcome is BindOutcome.BOUND
        pod = await cluster.api.read_pod(cluster.namespace, "hami-here")
        assert pod is not None and pod["spec"]["nodeName"] == cluster.node
        assert json.loads(pod["metadata"]["annotations"][ASSIGNMENT]) == wanted
        assert not [k for k in pod["metadata"]["annotations"] if k.startswith("hami.io/")]

    @covers("bind")
    async def test_binding_a_pod_gone_or_a_namesake_binds_nothing(self, cluster: ClusterHarness) -> None:
        uid = await cluster.create_pod("doomed")
        await cluster.delete_pod("doomed")
        wanted = assignment(cluster.node)
        assert await cluster.api.bind(cluster.namespace, "doomed", uid, cluster.node, wanted) is BindOutcome.GONE

        await cluster.create_pod("twin")  # the name is now another pod's: the uid precondition fails
        outcome = await cluster.api.bind(cluster.namespace, "twin", EARLIER_UID, cluster.node, wanted)
        assert outcome is BindOutcome.CONFLICT
        pod = await cluster.api.read_pod(cluster.namespace, "twin")
        assert pod is not None and not pod["spec"].get("nodeName")

    @covers("list")
    async def test_the_list_has_every_pod_with_its_uid_and_node(self, cluster: ClusterHarness) -> None:
        waiting = await cluster.create_pod("waiting")
        placed = await bound_pod(cluster, "placed")
        items, version = await cluster.api.list("pods")
        ours = {p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName"))
                for p in items if p["metadata"].get("namespace") == cluster.namespace}
        assert ours == {"waiting": (waiting, None), "placed": (placed, cluster.node)}
        assert isinstance(version, str) and version

    @covers("evict")
    async def test_an_eviction_deletes_the_pod_once(self, cluster: ClusterHarness) -> None:
        uid = await cluster.create_pod("victim")
        assert await cluster.api.evict(cluster.namespace, "victim", uid) is EvictOutcome.EVICTED
        assert await gone(cluster, "victim")
        assert await cluster.api.evict(cluster.namespace, "victim", uid) is EvictOutcome.GONE

    @covers("evict")
    async def test_an_eviction_spares_a_namesake(self, cluster: ClusterHarness) -> None:
        uid = await cluster.create_pod("twin")
        assert await cluster.api.evict(cluster.namespace, "twin", EARLIER_UID) is EvictOutcome.GONE
        pod = await cluster.api.read_pod(cluster.namespace, "twin")
        assert pod is not None and pod["metadata"]["uid"] == uid and not pod["metadata"].get("deletionTimestamp")

    @covers("evict")
    async def test_an_eviction_a_disruption_budget_forbids_is_refused(self, cluster: ClusterHarness) -> None:
        uid = await bound_pod(cluster, "guarded")
        await cluster.run("guarded")
        await cluster.protect("guarded")
        assert await cluster.api.evict(cluster.namespace, "guarded", uid) is EvictOutcome.REFUSED
        pod = await cluster.api.read_pod(cluster.namespace, "guarded")
        assert pod is not None and pod["metadata"]["uid"] == uid and not pod["metadata"].get("deletionTimestamp")

    @covers("report_unschedulable")
    async def test_a_waiting_pod_is_told_why_and_stale_news_is_dropped(self, cluster: ClusterHarness) -> None:
        uid = await cluster.create_pod("waiting")
        await cluster.api.report_unschedulable(cluster.namespace, "waiting", uid, MESSAGE)
        assert await cluster.feedback("waiting") == [("FailedScheduling", MESSAGE)]

        stale = MESSAGE.replace("6860", "4096")
        await cluster.api.report_unschedulable(cluster.namespace, "waiting", EARLIER_UID, stale)  # a namesake's
        placed = await bound_pod(cluster, "placed")
        await cluster.api.report_unschedulable(cluster.namespace, "placed", placed, stale)  # bound meanwhile
        doomed = await cluster.create_pod("doomed")
        await cluster.delete_pod("doomed")
        await cluster.api.report_unschedulable(cluster.namespace, "doomed", doomed, stale)  # gone
        assert await cluster.feedback("waiting") == [("FailedScheduling", MESSAGE)]
        assert await cluster.feedback("placed") == [] and await cluster.feedback("doomed") == []

    @covers("report_warning")
    async def test_a_warning_about_a_bound_pod_is_an_event_with_its_reason(self, cluster: ClusterHarness) -> None:
        uid = await bound_pod(cluster, "unenforced")
        note = f"nothing limits this pod's GPU memory on {cluster.node}"
        await cluster.api.report_warning(cluster.namespace, "unenforced", uid, "UnenforcedGpuSharing", note)
        assert await cluster.feedback("unenforced") == [("UnenforcedGpuSharing", note)]
        # never raises, even where it cannot land (no such namespace)
        await cluster.api.report_warning(f"{cluster.namespace}-none", "unenforced", uid, "UnenforcedGpuSharing", note)

    @covers("report_scheduled")
    async def test_a_bound_pod_is_reported_scheduled_on_its_node(self, cluster: ClusterHarness) -> None:
        uid = await bound_pod(cluster, "placed")
        await cluster.api.report_scheduled(cluster.namespace, "placed", uid, cluster.node, "(GPU 1: 9420 MiB)")
        ((reason, note),) = await cluster.feedback("placed")
        assert reason == "Scheduled" and cluster.node in note and note.endswith("(GPU 1: 9420 MiB)")
        # never raises, even where it cannot land (no such namespace)
        await cluster.api.report_scheduled(f"{cluster.namespace}-none", "placed", uid, cluster.node, "")
