"""Retention (usecases/retention.py) on the fakes: what placement wrote is pruned by age, a batch at a time, by the
replica holding the turn, and what is still in use (a bound pod, an unpublished event) is never touched."""

from __future__ import annotations

import asyncio

import pytest

from gpuplace.usecases.ports import Retained
from gpuplace.usecases.retention import DAY_S, Pruner, RetentionPolicy, prune_round
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeRetentionRepository, FakeUnitOfWorkFactory
from tests.unit.usecases.test_placement import service

EVERYTHING = {kind: 1e-9 for kind in Retained}  # every row written before the round is older than this


async def placed_and_deleted(uow_factory: FakeUnitOfWorkFactory, api: FakeClusterApi) -> None:
    """Three pods placed on n1; two of them deleted again (`stays` stays bound)."""
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))
    events = {name: pod_event(name, memory_mib=1000) for name in ("one", "two", "stays")}
    for event in events.values():
        await placement.on_pod(event)
    await placement.drain()
    for name in ("one", "two"):
        api.delete_pod("default", name)
        await placement.on_pod(pod_event(name, uid=events[name].uid, kind="deleted"))
    async with uow_factory() as uow:  # the relay's part: every event published
        await uow.outbox.mark_published([r["id"] for r in await uow.outbox.take_unpublished(1000)])
        await uow.commit()


async def test_a_round_prunes_what_placement_wrote_and_keeps_the_pod_still_bound(uow_factory, api):
    await placed_and_deleted(uow_factory, api)
    db = uow_factory.db
    assert db.processed and db.decisions and db.outbox and len(db.pods) == 3
    pruned = await prune_round(uow_factory, RetentionPolicy(EVERYTHING, batch_rows=2))
    assert pruned is not None
    assert pruned[Retained.DELETED_PODS] == 2 and pruned[Retained.DECISIONS] > 0
    assert not db.processed and not db.decisions and not db.outbox
    assert [p["name"] for p in db.pods.values()] == ["stays"] and db.allocations  # bound, holding its GPU


async def test_kinds_kept_for_ever_and_rows_younger_than_kept_are_left(uow_factory, api):
    await placed_and_deleted(uow_factory, api)
    db = uow_factory.db
    before = (len(db.processed), len(db.decisions), len(db.outbox))
    # decisions kept for ever (absent); the others kept a day, and everything here is seconds old
    policy = RetentionPolicy({Retained.PROCESSED_EVENTS: DAY_S, Retained.OUTBOX: DAY_S})
    assert await prune_round(uow_factory, policy) == {Retained.PROCESSED_EVENTS: 0, Retained.OUTBOX: 0}
    assert (len(db.processed), len(db.decisions), len(db.outbox)) == before


async def test_a_round_stops_after_max_batches_and_the_next_goes_on(uow_factory):
    async with uow_factory() as uow:
        await uow.events.claim_events("placement", [(f"e{i}", None) for i in range(10)])
        await uow.commit()
    policy = RetentionPolicy({Retained.PROCESSED_EVENTS: 1e-9}, batch_rows=3, max_batches=2)
    assert await prune_round(uow_factory, policy) == {Retained.PROCESSED_EVENTS: 6}  # 2 batches of 3
    assert await prune_round(uow_factory, policy) == {Retained.PROCESSED_EVENTS: 4}  # 3, then 1 < 3: done
    assert not uow_factory.db.processed


async def test_a_replica_without_the_turn_leaves_the_round_and_prunes_nothing(uow_factory, monkeypatch):
    async with uow_factory() as uow:
        await uow.events.claim_event("placement", "e1")
        await uow.commit()

    async def held_elsewhere(self: FakeRetentionRepository) -> bool:
        return False

    monkeypatch.setattr(FakeRetentionRepository, "take_pruning_turn", held_elsewhere)
    assert await prune_round(uow_factory, RetentionPolicy(EVERYTHING)) is None
    assert uow_factory.db.processed


def test_days_become_seconds_deleted_pods_follow_decisions_and_zero_keeps_for_ever():
    policy = RetentionPolicy.in_days(processed_events=15, outbox=1, decisions=0, latency_windows=0.5, batch_rows=7)
    assert policy.keep_s == {Retained.PROCESSED_EVENTS: 15 * 86_400.0, Retained.OUTBOX: 86_400.0,
                             Retained.LATENCY_WINDOWS: 43_200.0}  # decisions, and so deleted pods: for ever
    assert policy.batch_rows == 7


async def test_the_pruner_runs_rounds_until_stopped_and_outlives_a_failed_round(uow_factory, monkeypatch, caplog):
    calls = []

    async def flaky(self: FakeRetentionRepository, kind: Retained, keep_s: float, limit: int) -> int:
        calls.append(kind)
        if len(calls) == 1:
            raise ConnectionError("database away")
        return 0

    monkeypatch.setattr(FakeRetentionRepository, "prune", flaky)
    pruner = Pruner(uow_factory, RetentionPolicy({Retained.DECISIONS: 1.0}, interval_s=0.01))
    stop = asyncio.Event()
    task = asyncio.create_task(pruner.run(stop))
    while pruner.rounds < 2:
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 1.0)
    assert "pruning failed" in caplog.text and "database away" in caplog.text


@pytest.mark.parametrize("policy", [RetentionPolicy({Retained.DECISIONS: 1.0}, interval_s=0), RetentionPolicy()])
async def test_a_pruner_with_nothing_to_do_returns_at_once(uow_factory, policy):
    await asyncio.wait_for(Pruner(uow_factory, policy).run(asyncio.Event()), 0.5)
