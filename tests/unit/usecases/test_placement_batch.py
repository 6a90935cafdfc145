"""Placement of a burst read at once (PlacementService.on_pods): one transaction decides and reserves a batch,
the database still refuses any over-commit, and every event keeps the effect it has on its own."""

from __future__ import annotations

import asyncio
import json

from gpuplace.contracts.events import PodEvent
from gpuplace.usecases.decide import decider
from gpuplace.usecases.placement import PlacementService
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWork, FakeUnitOfWorkFactory


class CountingFactory(FakeUnitOfWorkFactory):
    """Counts the units of work opened, to show a batch costs one."""

    opened = 0

    def __call__(self) -> FakeUnitOfWork:
        self.opened += 1
        return super().__call__()


def service(uow_factory: FakeUnitOfWorkFactory, api: FakeClusterApi) -> PlacementService:
    return PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit")


def kinds(uow_factory: FakeUnitOfWorkFactory) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for row in uow_factory.db.outbox:
        event = json.loads(row["payload"])
        found.setdefault(event["pod"], []).append(event["kind"])
    return found


def gpu_memory(uow_factory: FakeUnitOfWorkFactory) -> dict[tuple[str, int], int]:
    return {(g["node"], g["index"]): g["memory_assigned_mib"] for g in uow_factory.db.gpus.values()}


async def placed_with_news(placement: PlacementService, api: FakeClusterApi, count: int
                           ) -> tuple[list[PodEvent], list[PodEvent], dict[str, str]]:
    """`count` 4000 MiB pods placed and bound on a fresh 2-GPU node n1: the pending events, the watcher's `bound`
    news of them, and the node each was bound to, by pod name."""
    await placement.on_node(node_event("n1", gpus=2))
    pending = [pod_event(f"p{i}", memory_mib=4000) for i in range(count)]
    await placement.on_pods(pending)
    await placement.drain()
    nodes = {name: node for (_, name), node in api.bound.items()}
    return pending, [pod_event(e.name, uid=e.uid, kind="bound", node_name=nodes[e.name]) for e in pending], nodes


async def test_a_burst_is_decided_in_one_transaction_each_pod_seeing_the_ones_before_it():
    uow_factory, api = CountingFactory(), FakeClusterApi()
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1, gpu_memory_mib=16384))
    await placement.on_pod(pod_event("warm-up", memory_mib=1000))  # loads the cluster
    await placement.drain()
    opened = uow_factory.opened

    await placement.on_pods([pod_event(f"p{i}", memory_mib=6000) for i in range(3)])
    assert uow_factory.opened == opened + 1  # claim, record, decide and reserve the three: one transaction

    await placement.drain()
    # 1000 + 2 x 6000 fit in 16384 MiB; the third 6000 would not: it waits, though each alone would have fit
    assert sorted(api.bound) == [("robots", "p0"), ("robots", "p1"), ("robots", "warm-up")]
    assert gpu_memory(uow_factory) == {("n1", 0): 13000}
    assert kinds(uow_factory)["p2"] == ["unschedulable"]
    assert all(kinds(uow_factory)[p] == ["decided", "bound"] for p in ("p0", "p1"))


async def test_a_batch_the_database_refuses_is_rolled_back_and_each_pod_placed_on_its_own(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=2))
    await placement.on_pod(pod_event("warm-up", memory_mib=1000))
    await placement.drain()
    # another worker takes most of GPU 1 behind this worker's back: the view still sees 15384 MiB free there
    uow_factory.db.gpus[("east", "n1", 1)]["memory_assigned_mib"] = 15000
    await placement.on_pods([pod_event("a", memory_mib=9000), pod_event("b", memory_mib=6000)])
    await placement.drain()

    # by the stale view: a on GPU 1 (best fit), b on GPU 0; the database refused GPU 1, so one by one on the
    # re-read view: a on GPU 0 (1000 + 9000), b no longer fits anywhere (16384 - 10000 = 6384 > 6000 fits GPU 0)
    assert set(api.bound) == {("robots", "warm-up"), ("robots", "a"), ("robots", "b")}
    memory = gpu_memory(uow_factory)
    assert memory[("n1", 1)] == 15000 and memory[("n1", 0)] == 1000 + 9000 + 6000
    assert all(m <= 16384 for m in memory.values())


async def test_events_that_are_not_plain_pending_pods_keep_their_order_and_effect(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))
    first = pod_event("first", memory_mib=10000)
    await placement.on_pods([first, pod_event("second", memory_mib=10000)])
    await placement.drain()
    assert list(api.bound) == [("robots", "first")]

    api.gone.add("first")
    # a deletion between two pending pods: "third" is decided after the deletion freed the GPU, "second" too
    await placement.on_pods([pod_event("first", uid=first.uid, kind="deleted"),
                             pod_event("invalid", memory_mib=None, request_error="not a quantity: 'lots'"),
                             pod_event("third", memory_mib=5000)])
    await placement.drain()
    assert ("robots", "second") in api.bound and ("robots", "third") in api.bound
    assert kinds(uow_factory)["invalid"] == ["invalid_request"]
    assert gpu_memory(uow_factory) == {("n1", 0): 15000}


async def test_a_redelivered_batch_binds_nothing_twice(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=2))
    burst = [pod_event(f"p{i}", memory_mib=4000) for i in range(4)]
    await placement.on_pods(burst)
    await placement.drain()
    await placement.on_pods(burst)  # read again after a crash before the offsets were committed
    await placement.drain()
    assert api.bind_calls == 4
    assert all(k == ["decided", "bound"] for k in kinds(uow_factory).values())


async def test_the_watchers_news_of_pods_this_worker_bound_is_acknowledged_without_reading_them(uow_factory, api):
    placement = service(uow_factory, api)
    burst, bound, nodes = await placed_with_news(placement, api, 3)
    await placement.on_pods(bound)
    assert all(("placement", e.event_id) in uow_factory.db.processed for e in bound)  # claimed
    assert all(k == ["decided", "bound"] for k in kinds(uow_factory).values())  # and nothing else recorded

    # one that the watcher saw land elsewhere is not news to skip: it is charged where it runs
    await placement.on_node(node_event("n2", gpus=1))
    await placement.drain()
    moved = pod_event("p0", uid=burst[0].uid, kind="bound", node_name="n2", memory_mib=4000)
    api.bound.pop(("robots", "p0"))
    api.runs_elsewhere(moved)
    await placement.on_pods([moved, pod_event("p1", uid=burst[1].uid, kind="bound", node_name=nodes["p1"])])
    assert uow_factory.db.pods[("east", burst[0].uid)]["node"] == "n2"
    assert gpu_memory(uow_factory)[("n2", 0)] == 4000


async def test_pending_pods_are_one_batch_though_news_of_bound_pods_comes_between_them():
    uow_factory, api = CountingFactory(), FakeClusterApi()
    placement = service(uow_factory, api)
    _, news, _ = await placed_with_news(placement, api, 2)
    opened = uow_factory.opened

    # as a burst reads: pending, bound, pending, bound, pending
    await placement.on_pods([pod_event("q0", memory_mib=4000), news[0], pod_event("q1", memory_mib=4000), news[1],
                             pod_event("q2", memory_mib=4000)])
    assert uow_factory.opened == opened + 2  # one for the three pending pods, one for the two bound
    await placement.drain()
    assert {name for _, name in api.bound} == {"p0", "p1", "q0", "q1", "q2"}
    assert all(("placement", e.event_id) in uow_factory.db.processed for e in news)


async def test_news_of_pods_bound_while_their_outcomes_are_not_recorded_yet_is_one_batch_too():
    """The watcher's news often outruns the transaction that records a bind's outcome: those events are this
    worker's own binds all the same (same node, bind in flight), claimed together, not a transaction each."""
    class HeldApi(FakeClusterApi):
        released = asyncio.Event()

        async def bind(self, *args, **kwargs):
            outcome = await super().bind(*args, **kwargs)
            await self.released.wait()  # the apiserver bound it; the answer has not reached placement yet
            return outcome

    uow_factory, api = CountingFactory(), HeldApi()
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=2))
    pending = [pod_event(f"p{i}", memory_mib=4000) for i in range(3)]
    await placement.on_pods(pending)
    for _ in range(10):
        await asyncio.sleep(0)
    assert len(api.bound) == 3
    news = [pod_event(e.name, uid=e.uid, kind="bound", node_name=api.bound[("robots", e.name)]) for e in pending]
    opened = uow_factory.opened

    await placement.on_pods(news)
    assert uow_factory.opened == opened + 1
    assert all(("placement", e.event_id) in uow_factory.db.processed for e in news)
    api.released.set()
    await placement.drain()
    assert {uid: row["state"] for (_, uid), row in uow_factory.db.pods.items()} == \
        {e.uid: "bound" for e in pending}
