"""What the event stream cannot be trusted with (issue 20): deletions are checked against the apiserver, events
for clusters nobody here serves are refused, reused event ids are refused, and what the stream missed is found by
reconciling the database with the apiserver (usecases/reconcile)."""

from __future__ import annotations

import pytest

from gpuplace.contracts.events import GpuRequest
from gpuplace.contracts.rejected import Rejected
from gpuplace.usecases.placement import PlacementService
from gpuplace.usecases.reconcile import find_drift
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory
from tests.unit.usecases.test_placement import service


def gpu_memory(uow_factory: FakeUnitOfWorkFactory, node: str) -> int:
    return sum(g["memory_assigned_mib"] for g in uow_factory.db.gpus.values() if g["node"] == node)


def state_of(uow_factory: FakeUnitOfWorkFactory, uid: str) -> str:
    return uow_factory.db.pods[("east", uid)]["state"]


async def placed(uow_factory, api, *names: str) -> tuple[PlacementService, list]:
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))
    events = [pod_event(name, memory_mib=6000) for name in names]
    for event in events:
        await placement.on_pod(event)
    await placement.drain()
    return placement, events


async def test_a_deletion_of_a_pod_the_apiserver_still_runs_is_refused_and_frees_nothing(uow_factory, api):
    placement, (slam,) = await placed(uow_factory, api, "slam")
    with pytest.raises(Rejected, match="still runs on the apiserver"):
        await placement.on_pod(pod_event("slam", uid=slam.uid, kind="deleted"))
    assert state_of(uow_factory, slam.uid) == "bound" and gpu_memory(uow_factory, "n1") == 6000
    api.gone.add("slam")  # now it is gone: the same deletion is applied
    await placement.on_pod(pod_event("slam", uid=slam.uid, kind="deleted"))
    assert state_of(uow_factory, slam.uid) == "deleted" and gpu_memory(uow_factory, "n1") == 0


async def test_a_deletion_of_a_finished_pod_or_of_a_namesakes_predecessor_is_applied(uow_factory, api):
    class FinishedApi(FakeClusterApi):
        async def read_pod(self, namespace, name):
            pod = await super().read_pod(namespace, name)
            return pod and {**pod, "status": {"phase": "Succeeded"}}

    finished = FinishedApi()
    placement, (job,) = await placed(uow_factory, finished, "job")
    await placement.on_pod(pod_event("job", uid=job.uid, kind="deleted"))
    assert state_of(uow_factory, job.uid) == "deleted"

    placement, (slam,) = await placed(FakeUnitOfWorkFactory(), api, "slam")
    api.uids[("robots", "slam")] = "uid-of-a-new-slam"  # deleted, and created again under the same name
    await placement.on_pod(pod_event("slam", uid=slam.uid, kind="deleted"))


async def test_events_of_a_cluster_this_worker_does_not_serve_are_refused_before_any_write(uow_factory, api):
    placement = service(uow_factory, api)
    with pytest.raises(Rejected, match="'north' is not one this placement worker serves"):
        await placement.on_node(node_event("n1", cluster="north"))
    with pytest.raises(Rejected, match="not one this placement worker serves"):
        await placement.on_pod(pod_event("slam", cluster="north"))
    assert not uow_factory.db.nodes and not uow_factory.db.pods and not uow_factory.db.processed


async def test_an_event_id_reused_for_other_content_is_refused(uow_factory, api):
    placement, (slam,) = await placed(uow_factory, api, "slam")
    await placement.on_pod(slam)  # a redelivery: skipped
    forged = slam.model_copy(update={"priority": 1000})
    with pytest.raises(Rejected, match="reused id"):
        await placement.on_pod(forged)


async def test_reconciliation_releases_pods_deleted_while_nothing_watched(uow_factory, api):
    placement, (slam, vio) = await placed(uow_factory, api, "slam", "vio")
    api.gone.add("slam")  # deleted while cluster-watcher was down: no event ever comes
    drift = await placement.reconcile("east")
    assert [row["uid"] for row in drift.gone] == [slam.uid] and not drift.bound_elsewhere
    assert state_of(uow_factory, slam.uid) == "deleted" and state_of(uow_factory, vio.uid) == "bound"
    assert gpu_memory(uow_factory, "n1") == 6000
    assert not await placement.reconcile("east")  # nothing left to do


async def test_reconciliation_frees_room_for_a_waiting_pod(uow_factory, api):
    placement, (slam, vio, late) = await placed(uow_factory, api, "slam", "vio", "late")
    assert state_of(uow_factory, late.uid) == "unschedulable"  # 6000 + 6000 of 16384: no room for a third
    api.gone.add("slam")
    await placement.reconcile("east")
    await placement.drain()
    assert api.bound[("robots", "late")] == "n1" and state_of(uow_factory, late.uid) == "bound"


async def test_reconciliation_charges_a_pod_where_the_apiserver_has_it(uow_factory, api):
    placement = service(uow_factory, api)
    for name in ("n1", "n2"):
        await placement.on_node(node_event(name, gpus=1))
    whole = GpuRequest(gpu_count=1, share_milli_per_gpu=1000)
    trainer = pod_event("trainer", kind="bound", node_name="n1", gpu=whole, managed=False)
    await placement.on_pod(trainer)
    # kube-scheduler's pod actually runs on n2 (its event for n2 was lost); and a waiting pod of ours was bound
    api.bound[("robots", "trainer")], api.uids[("robots", "trainer")] = "n2", trainer.uid
    drift = await placement.reconcile("east")
    assert [(row["uid"], node) for row, node in drift.bound_elsewhere] == [(trainer.uid, "n2")]
    shares = {g["node"]: g["share_assigned_milli"] for g in uow_factory.db.gpus.values()}
    assert shares == {"n1": 0, "n2": 1000}
    assert uow_factory.db.pods[("east", trainer.uid)]["node"] == "n2"


async def test_a_cluster_taken_is_reconciled_at_once_when_resync_is_on(uow_factory, api):
    _, (slam,) = await placed(uow_factory, api, "slam")
    api.gone.add("slam")
    restarted = PlacementService(uow_factory, {"east": api}, service(uow_factory, api)._decide, policy="bestfit",
                                 resync_s=300)
    await restarted.load("east")
    await restarted.drain()
    assert state_of(uow_factory, slam.uid) == "deleted" and gpu_memory(uow_factory, "n1") == 0


async def test_nothing_tracked_means_no_list_of_the_clusters_pods():
    class NoList:
        async def list(self, kind: str, **selectors: str):
            raise AssertionError(f"listed {kind} with nothing to compare")

        async def read_pod(self, namespace: str, name: str):
            raise AssertionError("read a pod with nothing to compare")

    assert not await find_drift(NoList(), [])
