"""A node deleted and registered again under its name while its pods run (kubelet re-registration, a repair, an
autoscaler) comes back charged with them: pods, not node records, hold reservations (issue 40)."""

from __future__ import annotations

from tests.builders import node_event, pod_event
from tests.unit.usecases.test_placement import service


async def test_a_node_that_returns_keeps_its_running_pods_gpus(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))  # one 16384 MiB GPU
    slam = pod_event("slam", memory_mib=12000)
    await placement.on_pod(slam)
    await placement.drain()
    assert api.bound == {("robots", "slam"): "n1"}

    await placement.on_node(node_event("n1", gpus=1, deleted=True))
    await placement.on_pod(pod_event("while-away", memory_mib=12000))
    await placement.drain()
    assert ("robots", "while-away") not in api.bound  # an absent node takes nothing

    await placement.on_node(node_event("n1", gpus=1))  # registered again; slam still runs there
    await placement.on_pod(pod_event("second", memory_mib=12000))
    await placement.drain()
    # 12000 + 12000 MiB on a 16384 MiB GPU would over-commit it: neither waiting pod is placed
    assert set(api.bound) == {("robots", "slam")}
    [gpu] = uow_factory.db.gpus.values()
    assert gpu["memory_assigned_mib"] == 12000

    api.gone.add("slam")  # slam ends: its GPU is free, and a waiting pod takes it
    await placement.on_pod(pod_event("slam", uid=slam.uid, kind="deleted"))
    await placement.drain()
    assert len(api.bound) == 2 and gpu["memory_assigned_mib"] == 12000


async def test_a_node_that_leaves_for_good_goes_with_its_last_pod(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))
    slam = pod_event("slam", memory_mib=12000)
    await placement.on_pod(slam)
    await placement.drain()
    await placement.on_node(node_event("n1", gpus=1, deleted=True))
    assert uow_factory.db.nodes[("east", "n1")]["absent_since"] is not None
    api.gone.add("slam")  # the pod garbage collector deletes the orphaned pod
    await placement.on_pod(pod_event("slam", uid=slam.uid, kind="deleted"))
    assert ("east", "n1") not in uow_factory.db.nodes and not uow_factory.db.gpus


async def test_a_gpu_that_really_shrinks_below_what_is_held_takes_nothing_new_until_its_pods_go(uow_factory, api):
    # issue 40: the watcher's correct, smaller value was refused by a database check and dead-lettered
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))  # 16384 MiB
    slam = pod_event("slam", memory_mib=12000)
    await placement.on_pod(slam)
    await placement.drain()
    await placement.on_node(node_event("n1", gpus=1, gpu_memory_mib=8192))  # the GPU now reports 8192 MiB
    [gpu] = uow_factory.db.gpus.values()
    assert (gpu["memory_reported_mib"], gpu["memory_total_mib"], gpu["memory_assigned_mib"]) == (8192, 12000, 12000)
    await placement.on_pod(pod_event("small", memory_mib=4000))
    await placement.drain()
    assert ("robots", "small") not in api.bound  # 4000 MiB would fit the old 16384, not the GPU as it is now
    api.gone.add("slam")
    await placement.on_pod(pod_event("slam", uid=slam.uid, kind="deleted"))
    await placement.drain()
    [gpu] = uow_factory.db.gpus.values()
    assert api.bound[("robots", "small")] == "n1" and gpu["memory_total_mib"] == 8192, gpu
