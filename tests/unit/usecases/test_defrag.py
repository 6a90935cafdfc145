"""The defragmentation executor on in-memory ports: reserve first, evict, adopt the promise, or abort."""

import json

import pytest

from gpuplace.usecases.decide import decider
from gpuplace.usecases.defrag import Defragmenter
from gpuplace.usecases.placement import PlacementService
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory

A100 = {"model": "NVIDIA-A100-SXM4-40GB", "gpu_memory_mib": 40960}


async def fragmented_fleet(refuse: bool = False):
    """Three one-GPU nodes whose free memory (7384, 7384, 10960 MiB) adds up to far more than 12000 MiB,
    but no GPU has 12000 MiB free: moving the 9000 MiB victim from n1 to n3 opens a 16384 MiB hole."""
    uow_factory, api = FakeUnitOfWorkFactory(), FakeClusterApi()
    if refuse:
        api.refuse_eviction.add("victim-0")
    decide = decider("bestfit")
    placement = PlacementService(
        uow_factory, {"east": api}, decide, policy="bestfit",
        defrag=lambda host: Defragmenter(uow_factory, {"east": api}, host, decide.planner_policy))
    victim = pod_event("victim-0", memory_mib=9000, priority=0, deadline_ms=100.0)
    victim = victim.model_copy(update={"owner": "ReplicaSet/victim"})
    await placement.on_node(node_event("n1", gpus=1))
    await placement.on_pod(victim)
    await placement.on_node(node_event("n2", gpus=1))
    await placement.on_pod(pod_event("filler-0", memory_mib=9000, priority=1000, deadline_ms=10.0))
    await placement.on_node(node_event("n3", gpus=1, **A100))
    await placement.on_pod(pod_event("filler-1", memory_mib=30000, priority=1000, deadline_ms=10.0))
    await placement.drain()
    assert {name: node for (_, name), node in api.bound.items()} == {"victim-0": "n1", "filler-0": "n2",
                                                                     "filler-1": "n3"}
    return uow_factory, api, placement, victim


def kinds(uow_factory):
    return [json.loads(r["payload"])["kind"] for r in uow_factory.db.outbox]


def assigned(uow_factory):
    return {g["node"]: g["memory_assigned_mib"] for g in uow_factory.db.gpus.values()}


async def test_a_blocked_high_priority_pod_is_bound_after_a_move():
    uow_factory, api, placement, victim = await fragmented_fleet()
    await placement.on_pod(pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0))
    await placement.drain()
    assert api.evicted == ["victim-0"]
    assert api.bound[("robots", "urgent")] == "n1"
    assert kinds(uow_factory)[-5:] == ["unschedulable", "defrag_planned", "evicted", "defrag_completed", "bound"]
    # 9000 (victim's promise) + 30000 on n3; 12000 (urgent) on n1; nothing over capacity
    assert assigned(uow_factory) == {"n1": 12000, "n2": 9000, "n3": 39000}

    # The ReplicaSet's replacement adopts the place promised to its owner.
    await placement.on_pod(pod_event("victim-0", uid=victim.uid, kind="deleted"))
    replacement = pod_event("victim-1", memory_mib=9000, priority=0).model_copy(update={"owner": "ReplicaSet/victim"})
    await placement.on_pod(replacement)
    await placement.drain()
    assert api.bound[("robots", "victim-1")] == "n3"
    assert assigned(uow_factory) == {"n1": 12000, "n2": 9000, "n3": 39000}
    assert not [p for p in uow_factory.db.pods.values() if p["state"] == "promised"]


async def test_a_move_the_budget_forbids_is_aborted_and_every_reservation_released():
    uow_factory, api, placement, _ = await fragmented_fleet(refuse=True)
    before = assigned(uow_factory)
    await placement.on_pod(pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0))
    await placement.drain()
    assert api.evicted == [] and ("robots", "urgent") not in api.bound
    assert kinds(uow_factory)[-3:] == ["unschedulable", "defrag_planned", "defrag_aborted"]
    assert assigned(uow_factory) == before  # the victim has its GPU back, the promise and the reservation are gone
    assert not [p for p in uow_factory.db.pods.values() if p["state"] == "promised"]
    urgent = next(p for p in uow_factory.db.pods.values() if p["name"] == "urgent")
    assert urgent["state"] == "unschedulable" and "PodDisruptionBudget" in urgent["reason"]


@pytest.mark.parametrize("priority", [0])
async def test_a_pod_below_the_priority_floor_triggers_no_moves(priority):
    uow_factory, api, placement, _ = await fragmented_fleet()
    await placement.on_pod(pod_event("meh", memory_mib=12000, priority=priority, deadline_ms=33.0))
    await placement.drain()
    assert api.evicted == [] and "defrag_planned" not in kinds(uow_factory)
