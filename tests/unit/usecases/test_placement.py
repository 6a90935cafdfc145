"""The placement use case against in-memory ports: reserve, bind, wait, retry, reconcile, resume."""

from __future__ import annotations

import asyncio
import json

import pytest

from gpuplace.contracts.events import HamiRequest
from gpuplace.usecases.decide import decider
from gpuplace.usecases.placement import PlacementService
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory


def service(uow_factory: FakeUnitOfWorkFactory, api: FakeClusterApi) -> PlacementService:
    return PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit")


def placement_kinds(uow_factory: FakeUnitOfWorkFactory, pod: str) -> list[str]:
    return [json.loads(row["payload"])["kind"] for row in uow_factory.db.outbox
            if json.loads(row["payload"])["pod"] == pod]


def assigned_mib(uow_factory: FakeUnitOfWorkFactory) -> dict[tuple[str, int], int]:
    return {(g["node"], g["index"]): g["memory_assigned_mib"] for g in uow_factory.db.gpus.values()}


async def test_a_pending_pod_is_reserved_then_bound_once(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1"))
    event = pod_event("slam-0")
    await placement.on_pod(event)
    await placement.drain()
    await placement.on_pod(event)  # the same event again: already processed
    await placement.on_pod(pod_event("slam-0", uid=event.uid))  # a new event for the same pod: already bound
    await placement.drain()

    assert api.bound == {("robots", "slam-0"): "n1"} and api.bind_calls == 1
    assert placement_kinds(uow_factory, "slam-0") == ["decided", "bound"]
    # best fit of 9420 MiB on two empty 16384 MiB GPUs: the first one
    assert assigned_mib(uow_factory) == {("n1", 0): 9420, ("n1", 1): 0}
    assert api.assignments[("robots", "slam-0")]["gpus"] == [{"index": 0, "memory_mib": 9420, "share_milli": 574}]


async def test_a_hami_vocabulary_pod_hands_its_hami_request_to_the_bind_and_other_pods_none(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1"))
    hami = HamiRequest(position=1, containers=2, gpu_count=1, memory_mib=9420, cores=30)
    await placement.on_pod(pod_event("hami-0", hami=hami))
    await placement.on_pod(pod_event("plain-0"))
    await placement.drain()
    assert api.hami_requests == {("robots", "hami-0"): hami.model_dump(mode="json"), ("robots", "plain-0"): None}


async def test_a_pod_that_fits_nowhere_waits_and_is_placed_when_a_node_arrives(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("small", gpu_memory_mib=8192))
    await placement.on_pod(pod_event("big-0", memory_mib=12000))
    await placement.drain()
    assert api.bound == {}
    assert placement_kinds(uow_factory, "big-0") == ["unschedulable"]
    reasons = next(json.loads(r["payload"])["reasons"] for r in uow_factory.db.outbox)
    assert "Tesla-V100-SXM2-16GB" in reasons  # reasons are grouped by node class (GPU product)

    await placement.on_node(node_event("large", gpu_memory_mib=16384))
    await placement.drain()
    assert api.bound == {("robots", "big-0"): "large"}


async def test_an_unparseable_request_is_reported_not_placed(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1"))
    await placement.on_pod(pod_event("odd", memory_mib=None, request_error="not a quantity: 'lots'"))
    await placement.drain()
    assert api.bind_calls == 0
    assert placement_kinds(uow_factory, "odd") == ["invalid_request"]
    assert uow_factory.db.pods[("east", next(iter(uow_factory.db.pods))[1])]["state"] == "invalid"


async def test_a_deleted_pod_frees_its_gpu_for_a_waiting_one(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))
    first = pod_event("first", memory_mib=10000)
    await placement.on_pod(first)
    await placement.on_pod(pod_event("second", memory_mib=10000))
    await placement.drain()
    assert list(api.bound) == [("robots", "first")]

    api.gone.add("first")  # gone from the apiserver: its deletion is believed
    await placement.on_pod(pod_event("first", uid=first.uid, kind="deleted"))
    await placement.drain()
    assert ("robots", "second") in api.bound
    assert assigned_mib(uow_factory) == {("n1", 0): 10000}


async def test_a_bind_conflict_elsewhere_releases_the_reservation(uow_factory, api):
    api.conflicts.add("taken")  # someone else bound it (read_pod shows no node of ours)
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1"))
    await placement.on_pod(pod_event("taken"))
    await placement.drain()
    assert placement_kinds(uow_factory, "taken") == ["decided", "bind_failed"]
    assert assigned_mib(uow_factory) == {("n1", 0): 0, ("n1", 1): 0}


class HangingApi(FakeClusterApi):
    async def bind(self, *args, **kwargs):
        await asyncio.Event().wait()  # the process dies while the bind is in flight


async def crash_with_survivor_reserved(uow_factory: FakeUnitOfWorkFactory) -> None:
    """A placement process that reserved pod `survivor` on n1 and died before its bind returned."""
    crashed = PlacementService(uow_factory, {"east": HangingApi()}, decider("bestfit"), policy="bestfit")
    await crashed.on_node(node_event("n1"))
    await crashed.on_pod(pod_event("survivor"))
    for task in list(crashed._binder.tasks):
        task.cancel()
    assert placement_kinds(uow_factory, "survivor") == ["decided"]  # committed, never bound


async def test_a_reservation_whose_bind_was_lost_is_bound_after_a_restart(uow_factory, api):
    await crash_with_survivor_reserved(uow_factory)

    restarted = service(uow_factory, api)
    await restarted.on_pod(pod_event("newcomer"))  # the first event of the cluster makes the worker resume it
    await restarted.drain()
    assert api.bound == {("robots", "survivor"): "n1", ("robots", "newcomer"): "n1"}
    assert placement_kinds(uow_factory, "survivor") == ["decided", "bound"]


async def test_an_api_error_on_bind_releases_and_retries_later(uow_factory, api):
    class FailingApi(FakeClusterApi):
        async def bind(self, *args, **kwargs):
            raise ConnectionError("apiserver unavailable")

    placement = PlacementService(uow_factory, {"east": FailingApi()}, decider("bestfit"), policy="bestfit")
    await placement.on_node(node_event("n1"))
    await placement.drain()  # the node's retry of waiting pods is over before the pod comes
    await placement.on_pod(pod_event("unlucky"))
    await placement.drain()
    assert placement_kinds(uow_factory, "unlucky") == ["decided", "bind_failed"]
    assert assigned_mib(uow_factory) == {("n1", 0): 0, ("n1", 1): 0}


async def test_when_the_database_refuses_the_view_is_reread_and_the_pod_placed_elsewhere(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=2))
    # Another worker takes 10000 MiB of GPU 0 behind this worker's back (its view still sees GPU 0 empty).
    uow_factory.db.gpus[("east", "n1", 0)]["memory_assigned_mib"] = 10000
    await placement.on_pod(pod_event("late", memory_mib=9420))  # best fit by the stale view: GPU 0
    await placement.drain()
    assert api.assignments[("robots", "late")]["gpus"][0]["index"] == 1
    assert assigned_mib(uow_factory) == {("n1", 0): 10000, ("n1", 1): 9420}



async def test_a_first_load_of_the_cluster_that_fails_is_tried_again(uow_factory, api):
    await crash_with_survivor_reserved(uow_factory)

    class DatabaseAway(Exception):
        pass

    restarted = service(uow_factory, api)
    rehydrate, calls = restarted._clusters.reread, []

    async def away_once(state):
        calls.append(state)
        if len(calls) == 1:
            raise DatabaseAway
        return await rehydrate(state)

    restarted._clusters.reread = away_once
    with pytest.raises(DatabaseAway):  # the first look at the cluster fails
        await restarted.on_pod(pod_event("newcomer"))
    await restarted.on_pod(pod_event("newcomer-2"))  # the next one loads and resumes it
    await restarted.drain()
    assert api.bound[("robots", "survivor")] == "n1"


async def test_a_worker_that_regains_a_cluster_reads_it_again_and_places_what_waits_there(uow_factory, api):
    # worker B knew the cluster, lost its partitions to worker A, and gets them back
    b = service(uow_factory, api)
    await b.on_node(node_event("n1", gpus=1, gpu_memory_mib=16384))
    a = service(uow_factory, api)
    await a.on_pod(pod_event("big", memory_mib=20000))  # fits nowhere: waits in A's queue, not in B's
    await a.drain()
    assert uow_factory.db.pods[("east", pod_named_uid(uow_factory, "big"))]["state"] == "unschedulable"

    b.reload_clusters()  # the rebalance gave B the cluster again
    await b.on_node(node_event("n2", gpus=1, gpu_memory_mib=40960))
    await b.drain()
    assert api.bound == {("robots", "big"): "n2"}


def pod_named_uid(uow_factory: FakeUnitOfWorkFactory, name: str) -> str:
    return next(uid for (_, uid), pod in uow_factory.db.pods.items() if pod["name"] == name)
