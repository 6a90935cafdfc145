"""Input placement must not believe or store as it comes (issue 40): a `bound` event that contradicts placement's
state is believed only when the apiserver agrees (one forged record kept a pending pod unplaced for good), and a
refusal's reason is cut to what an Event holds (a 250,000-character one was stored), and a node event that would let
more be placed (a capacity raised, a deletion) is believed only when the apiserver agrees."""

from __future__ import annotations

import pytest

from gpuplace.contracts.rejected import Rejected
from gpuplace.usecases.placement import REASON_MAX
from gpuplace.usecases.ports import NodeCapacity
from tests.builders import node_event, pod_event
from tests.unit.usecases.test_placement import service


async def test_a_forged_bound_event_for_a_waiting_pod_is_refused_and_the_pod_is_placed_later(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))
    await placement.on_pod(pod_event("big", memory_mib=12000))
    waiting = pod_event("waits", memory_mib=12000)
    await placement.on_pod(waiting)
    await placement.drain()
    assert set(api.bound) == {("robots", "big")}
    with pytest.raises(Rejected, match="not bound to n1 on the apiserver"):
        await placement.on_pod(pod_event("waits", uid=waiting.uid, kind="bound", node_name="n1", memory_mib=12000))
    assert uow_factory.db.pods[("east", waiting.uid)]["state"] == "unschedulable"

    api.gone.add("big")
    big = next(p for p in uow_factory.db.pods.values() if p["name"] == "big")
    await placement.on_pod(pod_event("big", uid=big["uid"], kind="deleted"))
    await placement.drain()
    assert api.bound[("robots", "waits")] == "n1"


async def test_a_forged_bound_event_before_the_pods_pending_event_is_refused_and_the_pod_placed(uow_factory, api):
    # found by `gpuplace bench chaos` (issue 40, build item 6): with no row for the pod yet the event went unchecked,
    # the pod was charged on the forged node and its pending event then found it "bound": never placed
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))
    await placement.on_node(node_event("n2", gpus=1))
    pending = pod_event("new", memory_mib=12000)
    with pytest.raises(Rejected, match="not bound to n2 on the apiserver"):
        await placement.on_pod(pod_event("new", uid=pending.uid, kind="bound", node_name="n2", memory_mib=12000))
    assert ("east", pending.uid) not in uow_factory.db.pods
    await placement.on_pod(pending)
    await placement.drain()
    assert ("robots", "new") in api.bound


async def test_a_refusal_quoting_a_huge_manifest_is_cut_to_what_an_event_holds(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1"))
    await placement.on_pod(pod_event("odd", memory_mib=None, request_error="not a quantity: '" + "9" * 250_000 + "'"))
    await placement.drain()
    [(_, _, _, report)] = api.reports
    stored = next(p for p in uow_factory.db.pods.values() if p["name"] == "odd")["reason"]
    assert len(report) == REASON_MAX and len(stored) == REASON_MAX and report.startswith("invalid GPU request: ")


async def test_a_forged_node_capacity_or_deletion_is_refused_and_the_real_one_kept(uow_factory, api):
    # issue 40: a forged record raised one GPU's memory and three 16 GiB pods landed on a 16 GiB GPU
    api.nodes["n1"] = NodeCapacity(64_000, 262_144, 1, 16_384)  # what the apiserver has
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))
    with pytest.raises(Rejected, match="the apiserver NodeCapacity"):
        await placement.on_node(node_event("n1", gpus=1, gpu_memory_mib=49_152))
    with pytest.raises(Rejected, match="still on the apiserver"):
        await placement.on_node(node_event("n1", gpus=1, deleted=True))
    for name in ("a", "b", "c"):
        await placement.on_pod(pod_event(name, memory_mib=16_384))
    await placement.drain()
    assert len(api.bound) == 1
    [gpu] = uow_factory.db.gpus.values()
    assert gpu["memory_total_mib"] == 16_384 and uow_factory.db.nodes[("east", "n1")]["absent_since"] is None


async def test_a_node_that_really_grew_is_taken_as_it_is_now(uow_factory, api):
    api.nodes["n1"] = NodeCapacity(64_000, 262_144, 1, 16_384)
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))
    api.nodes["n1"] = NodeCapacity(64_000, 262_144, 2, 16_384)  # a GPU was added
    await placement.on_node(node_event("n1", gpus=2))
    assert len(uow_factory.db.gpus) == 2
