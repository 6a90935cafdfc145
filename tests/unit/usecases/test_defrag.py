"""The defragmentation executor on in-memory ports: reserve first, evict, adopt the promise, or abort;
and, after a restart mid-plan, complete or abort the plan from what the state recorded."""

import asyncio
import json
import time
from dataclasses import dataclass, field, replace

import pytest

from gpuplace.bootstrap import placement_worker
from gpuplace.core.defrag.model import Limits
from gpuplace.usecases.decide import decider
from gpuplace.usecases.defrag import DefragSettings
from gpuplace.usecases.ports import NO_METRICS, PlanState
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory

A100 = {"model": "NVIDIA-A100-SXM4-40GB", "gpu_memory_mib": 40960}


@dataclass
class DyingApi(FakeClusterApi):
    """The placement process dies inside its first call of `die_in` ("evict", "read_pod"): it never returns."""

    die_in: str = ""
    died: asyncio.Event = field(default_factory=asyncio.Event)

    async def evict(self, namespace, name, uid=None):
        if self.die_in == "evict" and not self.died.is_set():
            await self._die()
        return await super().evict(namespace, name, uid)

    async def read_pod(self, namespace, name):
        if self.die_in == "read_pod" and not self.died.is_set():
            await self._die()
        return await super().read_pod(namespace, name)

    async def _die(self):
        self.died.set()
        await asyncio.Event().wait()


@dataclass
class SlowEvictionApi(FakeClusterApi):
    """Evictions wait for `answer` to be set, then go as FakeClusterApi's do (refused for refuse_eviction)."""

    asked: asyncio.Event = field(default_factory=asyncio.Event)
    answer: asyncio.Event = field(default_factory=asyncio.Event)

    async def evict(self, namespace, name, uid=None):
        self.asked.set()
        await self.answer.wait()
        return await super().evict(namespace, name, uid)


def service(uow_factory, api, settings=None, clock=time.monotonic, metrics=NO_METRICS):
    return placement_worker(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit", metrics=metrics,
                            defrag=settings or DefragSettings(), clock=clock).service


async def fragmented_fleet(refuse: bool = False, api: FakeClusterApi | None = None,
                           owner: str | None = "ReplicaSet/victim", **service_args):
    """Three one-GPU nodes whose free memory (7384, 7384, 10960 MiB) adds up to far more than 12000 MiB,
    but no GPU has 12000 MiB free: moving the 9000 MiB victim from n1 to n3 opens a 16384 MiB hole."""
    uow_factory, api = FakeUnitOfWorkFactory(), api or FakeClusterApi()
    if refuse:
        api.refuse_eviction.add("victim-0")
    placement = service(uow_factory, api, **service_args)
    victim = pod_event("victim-0", memory_mib=9000, priority=0, deadline_ms=100.0)
    victim = victim.model_copy(update={"owner": owner})
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
    api.gone.add("victim-0")  # gone from the apiserver: its deletion is believed
    await placement.on_pod(pod_event("victim-0", uid=victim.uid, kind="deleted"))
    replacement = pod_event("victim-1", memory_mib=9000, priority=0).model_copy(update={"owner": "ReplicaSet/victim"})
    await placement.on_pod(replacement)
    await placement.drain()
    assert api.bound[("robots", "victim-1")] == "n3"
    assert assigned(uow_factory) == {"n1": 12000, "n2": 9000, "n3": 39000}
    assert not [p for p in uow_factory.db.pods.values() if p["state"] == "promised"]


async def test_a_pod_of_no_owner_adopts_no_promise_not_even_one_a_pod_of_no_owner_left():
    """A bare pod is nobody's replacement: the place kept for a moved bare pod is not given to the next bare pod
    of the namespace (it waits, as it would without the promise)."""
    uow_factory, api, placement, victim = await fragmented_fleet(owner=None)
    await placement.on_pod(pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0))
    await placement.drain()
    assert api.evicted == ["victim-0"]
    assert [p["owner"] for p in uow_factory.db.pods.values() if p["state"] == "promised"] == [None]
    stray = pod_event("stray", memory_mib=9000, priority=0)
    owned = pod_event("owned", memory_mib=1000, priority=0).model_copy(update={"owner": "ReplicaSet/owned"})
    await placement.on_pods([stray, owned])  # read together: the batch looks promises up for its owned pod
    await placement.drain()
    assert ("robots", "stray") not in api.bound
    assert uow_factory.db.pods[("east", stray.uid)]["state"] == "unschedulable"
    assert [p["owner"] for p in uow_factory.db.pods.values() if p["state"] == "promised"] == [None]


async def test_a_move_a_disruption_budget_refuses_is_aborted_and_every_reservation_released():
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


async def test_the_hourly_eviction_budget_holds_a_second_move_back_until_the_hour_is_over():
    # A budget of one eviction an hour: the first blocked pod gets its move (victim-0, as above). A second
    # fleet-like corner then needs victim-2 moved from n4 to n5; within the hour nothing is planned or evicted,
    # an hour later the same pod is relieved by the move.
    now = [1000.0]
    budget = DefragSettings(limits=Limits(max_evictions_per_hour=1))
    uow_factory, api, placement, _ = await fragmented_fleet(settings=budget, clock=lambda: now[0])
    await placement.on_pod(pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0))
    await placement.drain()
    assert api.evicted == ["victim-0"] and api.bound[("robots", "urgent")] == "n1"

    # n4 (16384 MiB) takes victim-2 (9000), n5 (40960) a 30000 filler: 7384 and 10960 MiB free, no 12000 hole
    await placement.on_node(node_event("n4", gpus=1))
    victim = pod_event("victim-2", memory_mib=9000, priority=0, deadline_ms=100.0)
    await placement.on_pod(victim.model_copy(update={"owner": "ReplicaSet/other"}))
    await placement.on_node(node_event("n5", gpus=1, **A100))
    await placement.on_pod(pod_event("filler-2", memory_mib=30000, priority=1000, deadline_ms=10.0))
    await placement.drain()
    assert api.bound[("robots", "victim-2")] == "n4" and api.bound[("robots", "filler-2")] == "n5"
    planned = kinds(uow_factory).count("defrag_planned")

    now[0] += 3599.0  # the first eviction is 3599 s old: the hour's budget is spent
    await placement.on_pod(pod_event("urgent-2", memory_mib=12000, priority=100, deadline_ms=33.0))
    await placement.drain()
    assert api.evicted == ["victim-0"] and ("robots", "urgent-2") not in api.bound
    assert kinds(uow_factory).count("defrag_planned") == planned

    now[0] += 2.0  # 3601 s: the eviction has left the window; a retry (a node changes) plans the move
    await placement.on_node(node_event("n2", gpus=1))
    await placement.drain()
    assert api.evicted == ["victim-0", "victim-2"]
    assert api.bound[("robots", "urgent-2")] == "n4"


async def test_a_pod_whose_plan_aborts_after_the_queue_was_retried_waits_again():
    # the queue is retried (a node changes) while the plan's eviction is in flight; the plan then aborts
    api = SlowEvictionApi()
    uow_factory, api, placement, _ = await fragmented_fleet(refuse=True, api=api)
    await placement.on_pod(pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0))
    await api.asked.wait()
    await placement.on_node(node_event("n2", gpus=1))  # nothing frees: urgent is reserved by the plan meanwhile
    api.answer.set()
    await placement.drain()
    assert kinds(uow_factory)[-1] == "defrag_aborted"
    await placement.on_node(node_event("n4", gpus=1, **A100))
    await placement.drain()
    assert api.bound[("robots", "urgent")] == "n4"


async def urgent_deleted_mid_eviction(refuse: bool):
    """The fragmented fleet and an urgent pod whose plan's eviction of victim-0 is in flight when the urgent
    pod is deleted; the eviction is still unanswered."""
    api = SlowEvictionApi()
    uow_factory, api, placement, victim = await fragmented_fleet(refuse=refuse, api=api)
    before = assigned(uow_factory)
    urgent = pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0)
    await placement.on_pod(urgent)
    await api.asked.wait()
    api.gone.add("urgent")  # gone from the apiserver: its deletion is believed
    await placement.on_pod(pod_event("urgent", uid=urgent.uid, kind="deleted"))
    return uow_factory, api, placement, victim, before


def holdings(uow_factory, name):
    uid = pod_named(uow_factory, name)["uid"]
    return {(a["node"], a["gpu_index"]) for a in uow_factory.db.allocations.values() if a["pod_uid"] == uid}


async def test_a_beneficiary_deleted_mid_plan_keeps_the_victims_gpus_until_the_victims_are_gone():
    uow_factory, api, placement, victim, _ = await urgent_deleted_mid_eviction(refuse=False)
    # 8000 MiB fits nowhere but on n1's GPU, where victim-0 still runs: it must wait
    await placement.on_pod(pod_event("late", memory_mib=8000, priority=0, deadline_ms=100.0))
    assert pod_named(uow_factory, "late")["state"] == "unschedulable" and not holdings(uow_factory, "late")
    assert pod_named(uow_factory, "urgent")["state"] == "deleted" and holdings(uow_factory, "urgent") == {("n1", 0)}

    api.answer.set()
    await placement.drain()
    assert api.evicted == ["victim-0"] and ("robots", "urgent") not in api.bound
    # once the victim has left, the plan releases the hold and the waiting pod takes the GPU at once
    assert kinds(uow_factory)[-4:] == ["evicted", "defrag_completed", "decided", "bound"]
    assert json.loads(uow_factory.db.outbox[-3]["payload"])["reasons"] == {"moves": "1", "beneficiary": "deleted"}
    assert api.bound[("robots", "late")] == "n1"
    assert assigned(uow_factory) == {"n1": 8000, "n2": 9000, "n3": 39000}  # the promise kept on n3
    assert pod_named(uow_factory, "urgent")["state"] == "deleted" and not holdings(uow_factory, "urgent")


def assert_aborted_for_deleted_urgent(uow_factory, before, reason):
    """The plan of `urgent`, deleted meanwhile, aborted: the victim back on n1 GPU 0, nothing held for urgent,
    no promise left, and urgent still deleted."""
    assert kinds(uow_factory)[-1] == "defrag_aborted"
    assert json.loads(uow_factory.db.outbox[-1]["payload"])["reasons"] == {
        "reason": reason, "evicted": "0", "beneficiary": "deleted"}
    assert assigned(uow_factory) == before and holdings(uow_factory, "victim-0") == {("n1", 0)}
    assert pod_named(uow_factory, "urgent")["state"] == "deleted" and not holdings(uow_factory, "urgent")
    assert not [p for p in uow_factory.db.pods.values() if p["state"] == "promised"]


async def test_a_beneficiary_deleted_mid_plan_stays_deleted_when_the_plan_aborts():
    uow_factory, api, placement, _, before = await urgent_deleted_mid_eviction(refuse=True)
    api.answer.set()
    await placement.drain()
    assert api.evicted == []
    assert_aborted_for_deleted_urgent(uow_factory, before, "eviction of victim-0 refused by a PodDisruptionBudget")

    # not requeued: room arrives, and nothing is placed for the deleted pod
    await placement.on_node(node_event("n4", gpus=1, **A100))
    await placement.drain()
    assert ("robots", "urgent") not in api.bound and not holdings(uow_factory, "urgent")


@pytest.mark.parametrize("priority", [0])
async def test_a_pod_below_the_priority_floor_triggers_no_moves(priority):
    uow_factory, api, placement, _ = await fragmented_fleet()
    await placement.on_pod(pod_event("meh", memory_mib=12000, priority=priority, deadline_ms=33.0))
    await placement.drain()
    assert api.evicted == [] and "defrag_planned" not in kinds(uow_factory)


async def restarted_mid_plan(die_in: str, *, urgent_deleted: bool = False):
    """The fragmented fleet, an urgent pod that needs a move, and the placement process killed inside its
    first `die_in` call of the plan (the urgent pod deleted just before, if `urgent_deleted`); returns the
    state, the API (no longer dying) and a restarted service that has loaded the cluster."""
    api = DyingApi(die_in=die_in)
    uow_factory, api, placement, victim = await fragmented_fleet(api=api)
    before = assigned(uow_factory)
    urgent = pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0)
    await placement.on_pod(urgent)
    await api.died.wait()
    if urgent_deleted:
        api.gone.add("urgent")  # gone from the apiserver: its deletion is believed
        await placement.on_pod(pod_event("urgent", uid=urgent.uid, kind="deleted"))
    for task in list(placement._background):
        task.cancel()
    await placement.drain()
    api.die_in = ""
    restarted = service(uow_factory, api)
    await restarted.load("east")  # the first look at the cluster resumes it
    await restarted.drain()
    return uow_factory, api, restarted, victim, before


def pod_named(uow_factory, name):
    return next(p for p in uow_factory.db.pods.values() if p["name"] == name)


async def test_a_restart_before_any_eviction_aborts_the_plan_and_gives_the_victim_its_gpu_back():
    uow_factory, api, restarted, victim, before = await restarted_mid_plan("evict")
    assert api.evicted == [] and ("robots", "urgent") not in api.bound
    assert kinds(uow_factory)[-3:] == ["unschedulable", "defrag_planned", "defrag_aborted"]
    assert json.loads(uow_factory.db.outbox[-1]["payload"])["reasons"] == {
        "reason": "placement restarted mid-plan", "evicted": "0"}
    assert assigned(uow_factory) == before  # the promise and the beneficiary's reservation are released
    assert {a["node"]: a["gpu_index"] for a in uow_factory.db.allocations.values()
            if a["pod_uid"] == victim.uid} == {"n1": 0}  # on its old GPU, and nowhere else
    assert not [p for p in uow_factory.db.pods.values() if p["state"] == "promised"]
    urgent = pod_named(uow_factory, "urgent")
    assert urgent["state"] == "unschedulable" and "placement restarted mid-plan" in urgent["reason"]

    # back in the queue: placed when room arrives, without a move
    await restarted.on_node(node_event("n4", gpus=1, **A100))
    await restarted.drain()
    assert api.bound[("robots", "urgent")] == "n4" and api.evicted == []


async def test_a_restart_after_every_eviction_completes_the_plan_and_binds_once():
    uow_factory, api, restarted, victim, _ = await restarted_mid_plan("read_pod")
    assert api.evicted == ["victim-0"]
    assert kinds(uow_factory)[-5:] == ["unschedulable", "defrag_planned", "evicted", "defrag_completed", "bound"]
    assert api.bound[("robots", "urgent")] == "n1"
    assert [d["kind"] for d in uow_factory.db.decisions if d["pod"] == "urgent"].count("bound") == 1
    assert assigned(uow_factory) == {"n1": 12000, "n2": 9000, "n3": 39000}
    promised = [p for p in uow_factory.db.pods.values() if p["state"] == "promised"]
    assert [p["owner"] for p in promised] == ["ReplicaSet/victim"]  # kept for the victim's replacement

    api.gone.add("victim-0")  # gone from the apiserver: its deletion is believed
    await restarted.on_pod(pod_event("victim-0", uid=victim.uid, kind="deleted"))
    replacement = pod_event("victim-1", memory_mib=9000, priority=0).model_copy(update={"owner": "ReplicaSet/victim"})
    await restarted.on_pod(replacement)
    await restarted.drain()
    assert api.bound[("robots", "victim-1")] == "n3"
    assert not [p for p in uow_factory.db.pods.values() if p["state"] == "promised"]


async def test_a_restart_aborts_an_open_plan_whose_moves_were_not_recorded():
    """Migration 0008 copies a plan whose decision's JSON it cannot read without moves: whom to give GPUs back
    is unknown, so a restart aborts it rather than bind the beneficiary over a victim that may still run."""
    api = DyingApi(die_in="evict")
    uow_factory, api, placement, victim = await fragmented_fleet(api=api)
    await placement.on_pod(pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0))
    await api.died.wait()
    for task in list(placement._background):
        task.cancel()
    await placement.drain()
    [(key, plan)] = uow_factory.db.plans.items()
    uow_factory.db.plans[key] = replace(plan, moves=())
    api.die_in = ""
    restarted = service(uow_factory, api)
    await restarted.load("east")
    await restarted.drain()
    assert ("robots", "urgent") not in api.bound and api.evicted == []
    assert uow_factory.db.plans[key].state is PlanState.ABORTED
    urgent = pod_named(uow_factory, "urgent")
    assert urgent["state"] == "unschedulable" and "its moves were not recorded" in urgent["reason"]
    assert not [a for a in uow_factory.db.allocations.values() if a["pod_uid"] == urgent["uid"]]


async def test_a_reserved_pod_no_plan_holds_is_still_bound_on_resume():
    class HangingApi(FakeClusterApi):
        async def bind(self, *args, **kwargs):
            await asyncio.Event().wait()  # the process dies while the bind is in flight

    uow_factory, api = FakeUnitOfWorkFactory(), FakeClusterApi()
    crashed = service(uow_factory, HangingApi())
    await crashed.on_node(node_event("n1"))
    await crashed.on_pod(pod_event("survivor", priority=100))
    for task in list(crashed._binder.tasks):
        task.cancel()
    assert pod_named(uow_factory, "survivor")["state"] == "reserved"

    restarted = service(uow_factory, api)
    await restarted.load("east")
    await restarted.drain()
    assert api.bound == {("robots", "survivor"): "n1"}
    assert kinds(uow_factory) == ["decided", "bound"]


async def test_a_restart_settles_the_plan_of_a_beneficiary_deleted_before_any_eviction():
    uow_factory, api, restarted, victim, before = await restarted_mid_plan("evict", urgent_deleted=True)
    assert api.evicted == []
    assert_aborted_for_deleted_urgent(uow_factory, before, "placement restarted mid-plan")
    await restarted.on_node(node_event("n4", gpus=1, **A100))
    await restarted.drain()
    assert ("robots", "urgent") not in api.bound


async def test_a_restart_releases_the_hold_of_a_beneficiary_deleted_after_every_eviction():
    uow_factory, api, restarted, victim, _ = await restarted_mid_plan("read_pod", urgent_deleted=True)
    assert api.evicted == ["victim-0"] and ("robots", "urgent") not in api.bound
    assert kinds(uow_factory)[-1] == "defrag_completed"
    assert assigned(uow_factory) == {"n1": 0, "n2": 9000, "n3": 39000}
    assert pod_named(uow_factory, "urgent")["state"] == "deleted" and not holdings(uow_factory, "urgent")
    promised = [p for p in uow_factory.db.pods.values() if p["state"] == "promised"]
    assert [p["owner"] for p in promised] == ["ReplicaSet/victim"]  # kept for the victim's replacement


async def two_victim_fleet(api):
    """n1's GPU holds two 5000 MiB victims; the urgent pod returned (12000 MiB, not yet sent) fits nowhere
    unless both leave (one to n2, one to n3)."""
    uow_factory = FakeUnitOfWorkFactory()
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))
    for name in ("victim-a", "victim-b"):
        victim = pod_event(name, memory_mib=5000, priority=0, deadline_ms=100.0)
        await placement.on_pod(victim.model_copy(update={"owner": f"ReplicaSet/{name}"}))
    await placement.on_node(node_event("n2", gpus=1))
    await placement.on_pod(pod_event("filler-0", memory_mib=9000, priority=1000, deadline_ms=10.0))
    await placement.on_node(node_event("n3", gpus=1, **A100))
    await placement.on_pod(pod_event("filler-1", memory_mib=30000, priority=1000, deadline_ms=10.0))
    await placement.drain()
    return uow_factory, placement, pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0)


async def test_a_plan_stops_evicting_once_its_beneficiary_is_deleted():
    api = SlowEvictionApi()
    uow_factory, placement, urgent = await two_victim_fleet(api)
    await placement.on_pod(urgent)
    await api.asked.wait()  # the first eviction is in flight
    api.gone.add("urgent")  # gone from the apiserver: its deletion is believed
    await placement.on_pod(pod_event("urgent", uid=urgent.uid, kind="deleted"))
    api.answer.set()
    await placement.drain()
    assert len(api.evicted) == 1  # the second victim was left where it runs
    assert kinds(uow_factory)[-1] == "defrag_aborted"
    assert json.loads(uow_factory.db.outbox[-1]["payload"])["reasons"]["reason"] == "beneficiary deleted"
    left = ({"victim-a", "victim-b"} - set(api.evicted)).pop()
    assert holdings(uow_factory, left) == {("n1", 0)} and not holdings(uow_factory, "urgent")


async def test_a_plan_another_worker_settled_is_neither_carried_on_nor_settled_twice():
    # worker A evicts the first of two victims; worker B loads the cluster meanwhile (a new worker, or A's
    # replacement after a false death), finds the plan half done and aborts it
    api = SlowEvictionApi()
    uow_factory, placement, urgent = await two_victim_fleet(api)
    await placement.on_pod(urgent)
    await api.asked.wait()  # A's first eviction is in flight
    other = service(uow_factory, api)
    await other.load("east")  # B's first look at the cluster runs recover(): victims still there, abort
    assert kinds(uow_factory)[-1] == "defrag_aborted"
    api.answer.set()
    await placement.drain()
    await other.drain()
    assert len(api.evicted) == 1  # A stopped before its second eviction
    assert kinds(uow_factory).count("defrag_aborted") == 1 and "defrag_completed" not in kinds(uow_factory)
    assert ("robots", "urgent") not in api.bound
    assert not holdings(uow_factory, "urgent")
    # B's abort gave both victims their GPUs back: the one A then evicted is released when it goes
    evicted = pod_named(uow_factory, api.evicted[0])
    api.gone.add(evicted["name"])  # gone from the apiserver: its deletion is believed
    await placement.on_pod(pod_event(evicted["name"], uid=evicted["uid"], kind="deleted"))
    assert assigned(uow_factory)["n1"] == 5000


async def test_a_victim_still_running_after_the_eviction_wait_gets_its_gpu_back_and_the_plan_aborts():
    class StuckApi(FakeClusterApi):
        async def read_pod(self, namespace, name):  # evicted, but a finalizer keeps it terminating
            return {"metadata": {"name": name, "uid": stuck_uid}} if name == "victim-0" else \
                await super().read_pod(namespace, name)

    api = StuckApi()
    uow_factory, api, placement, victim = await fragmented_fleet(api=api, settings=DefragSettings(eviction_wait_s=0.3))
    stuck_uid = victim.uid
    before = assigned(uow_factory)
    await placement.on_pod(pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0))
    await placement.drain()
    assert api.evicted == ["victim-0"] and ("robots", "urgent") not in api.bound
    assert kinds(uow_factory)[-1] == "defrag_aborted"
    assert json.loads(uow_factory.db.outbox[-1]["payload"])["reasons"] == {
        "reason": "evicted pods still running after 0.3 s", "evicted": "0"}
    assert assigned(uow_factory) == before and holdings(uow_factory, "victim-0") == {("n1", 0)}
    assert not [p for p in uow_factory.db.pods.values() if p["state"] == "promised"]
