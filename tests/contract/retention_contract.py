"""What pruning must do (ports.RetentionStore); subclassed once per implementation: `TestFakeRetention`
(tests/unit) and `TestPostgresRetention` (tests/integration) only say how to build a fresh store.

Every case writes rows in one unit of work, commits, and prunes in a later one, so "older than keep_s = 0" means
"written before this unit of work" on both clocks (the fake's counter and PostgreSQL's now()); keep_s = 3600
keeps them all. What pruning must never touch is checked beside what it removes: an outbox row not published,
a pod not deleted, a deleted pod that still holds a GPU.
"""

from __future__ import annotations

import inspect
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuplace.usecases.pod_states import PodState
from gpuplace.usecases.ports import GpuGrant, Retained
from tests.contract.covers import covers
from tests.contract.store_contract import CLUSTER, decision_row, node_row, pod_row, window_row

HOUR_S = 3600.0


class RetentionContract:
    """Subclasses define `make_uow_factory()` (sync or async): a fresh, empty store's unit-of-work factory, and
    `latency_window_pods(uow_factory)`: the pods of the latency windows it stores (no port method reads them)."""

    def make_uow_factory(self) -> Any:
        raise NotImplementedError

    async def latency_window_pods(self, uow_factory: Any) -> list[str]:
        raise NotImplementedError

    async def _fresh(self) -> Any:
        factory = self.make_uow_factory()
        return await factory if inspect.isawaitable(factory) else factory

    async def _prune_all(self, uow_factory: Any, kind: Retained, keep_s: float, limit: int) -> list[int]:
        """Prune batch after batch, each in its own unit of work, until one removes nothing: the batches' sizes."""
        sizes: list[int] = []
        while True:
            async with uow_factory() as uow:
                assert await uow.retention.take_pruning_turn()
                gone = await uow.retention.prune(kind, keep_s, limit)
                await uow.commit()
            sizes.append(gone)
            if gone == 0:
                return sizes

    @covers("take_pruning_turn")
    async def test_the_turn_is_taken_and_free_again_once_its_unit_of_work_ended(self) -> None:
        uow_factory = await self._fresh()
        for _ in range(2):
            async with uow_factory() as uow:
                assert await uow.retention.take_pruning_turn() is True

    @covers("prune", "pruned_before")
    async def test_event_ids_go_in_batches_oldest_first_and_a_pruned_id_can_be_claimed_again(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.events.claim_events("placement", [(f"e{i}", "d") for i in range(5)])
            await uow.commit()
        async with uow_factory() as uow:
            assert await uow.retention.pruned_before(Retained.PROCESSED_EVENTS) is None
            assert await uow.retention.prune(Retained.PROCESSED_EVENTS, HOUR_S, 10) == 0  # all younger than an hour
        assert await self._prune_all(uow_factory, Retained.PROCESSED_EVENTS, 0, 2) == [2, 2, 1, 0]
        async with uow_factory() as uow:
            assert await uow.retention.pruned_before(Retained.PROCESSED_EVENTS) is not None
            assert await uow.retention.pruned_before(Retained.DECISIONS) is None  # per kind
            # why retention must outlast what Kafka can redeliver: the store no longer knows the id
            assert await uow.events.claim_event("placement", "e0", "d") is True

    @covers("prune")
    async def test_published_outbox_rows_go_and_unpublished_ones_never(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.outbox.add_outbox_many([("t", f"k{i}", json.dumps({"n": i})) for i in range(4)])
            await uow.commit()
        async with uow_factory() as uow:
            rows = await uow.outbox.take_unpublished(10)
            await uow.outbox.mark_published([r["id"] for r in rows[:3]])
            await uow.commit()
        assert await self._prune_all(uow_factory, Retained.OUTBOX, 0, 2) == [2, 1, 0]
        async with uow_factory() as uow:
            assert [r["payload"]["n"] for r in await uow.outbox.take_unpublished(10)] == [3]

    @covers("prune", "pruned_before")
    async def test_decisions_older_than_kept_go(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.decisions.add_decisions([decision_row(f"d{i}", "a", "decided") for i in range(3)])
            await uow.commit()
        assert await self._prune_all(uow_factory, Retained.DECISIONS, HOUR_S, 10) == [0]
        async with uow_factory() as uow:
            assert len(await uow.decisions.decisions_of(CLUSTER, "a")) == 3
            assert await uow.retention.pruned_before(Retained.DECISIONS) is None  # nothing went: no mark
        assert await self._prune_all(uow_factory, Retained.DECISIONS, 0, 10) == [3, 0]
        async with uow_factory() as uow:
            assert await uow.decisions.decisions_of(CLUSTER, "a") == []
            assert await uow.retention.pruned_before(Retained.DECISIONS) is not None

    @covers("prune")
    async def test_latency_windows_go_by_their_end(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.latency.add_latency_window({**window_row("old"), "window_end": datetime(1960, 1, 1, tzinfo=UTC)})
            await uow.latency.add_latency_window({**window_row("new"), "window_end": datetime.now(UTC)})
            await uow.commit()
        assert await self._prune_all(uow_factory, Retained.LATENCY_WINDOWS, HOUR_S, 10) == [1, 0]
        assert await self.latency_window_pods(uow_factory) == ["new"]

    @covers("prune")
    async def test_only_deleted_pods_holding_nothing_go(self) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            await uow.nodes.upsert_node(node_row())
            for uid in ("live", "gone", "held"):
                await uow.pods.upsert_pod(pod_row(uid))
            assert await uow.allocations.reserve(cluster=CLUSTER, pod_uid="held", node="n1",
                                                 grants=[GpuGrant(0, 4096, 250)], cpu_milli=0, memory_mib=0,
                                                 decision_id="d-held") is None
            for uid in ("gone", "held"):  # `held`: deleted mid-plan, its GPU not released yet
                await uow.pods.set_pod_state(CLUSTER, uid, PodState.DELETED)
            await uow.commit()
        assert await self._prune_all(uow_factory, Retained.DELETED_PODS, 0, 10) == [1, 0]
        async with uow_factory() as uow:
            assert await uow.pods.get_pod(CLUSTER, "gone") is None
            assert (await uow.pods.get_pod(CLUSTER, "live") or {}).get("state") == PodState.PENDING
            assert (await uow.pods.get_pod(CLUSTER, "held") or {}).get("state") == PodState.DELETED

    @covers("prune")
    @pytest.mark.parametrize(("keep_s", "limit"), [(-1.0, 10), (0.0, 0)])
    async def test_a_negative_age_or_an_empty_batch_is_refused(self, keep_s: float, limit: int) -> None:
        uow_factory = await self._fresh()
        async with uow_factory() as uow:
            with pytest.raises(ValueError, match="keep_s must be >= 0 and limit >= 1"):
                await uow.retention.prune(Retained.DECISIONS, keep_s, limit)
