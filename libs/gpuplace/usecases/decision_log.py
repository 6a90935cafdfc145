"""Decisions and their placements events, written in the transaction that makes them true.

Every change placement and defragmentation make to a pod (decided, unschedulable, bound, bind_failed, a plan's
steps) is a `decisions` row and a placements.v1 event in the outbox, written by the same unit of work as the
change itself: the event is published (by the outbox relay) exactly when the change committed. This is the one
writer of both, shared by the placement service, its binder and the defragmenter.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from gpuplace.contracts import topics
from gpuplace.contracts.events import GpuAssignment, PlacementEvent, PlacementKind, Provenance
from gpuplace.usecases.cluster_view import Placement
from gpuplace.usecases.ports import PodRow
from gpuplace.usecases.repositories import UnitOfWork


class DecisionLog:
    def __init__(self, policy: str, topic_suffix: str = "", outbox_written: Callable[[], None] = lambda: None
                 ) -> None:
        self._policy = policy
        self._topic = topics.PLACEMENTS + topic_suffix
        self._outbox_written = outbox_written  # wakes the outbox relay after a commit that wrote events

    async def record(self, uow: UnitOfWork, row: PodRow, kind: PlacementKind, *, hold: Placement | None = None,
                     reasons: dict[str, str] | None = None, decision_id: str | None = None,
                     node: str | None = None, seen: Provenance | None = None,
                     into: list[PlacementEvent] | None = None) -> None:
        """Write a decision and its placements event (outbox) in `uow`; with `into`, add it there instead, for
        write() to write with the rest of a batch."""
        decision_id = decision_id or uuid.uuid4().hex
        gpus = tuple(GpuAssignment(index=i, memory_mib=hold.gpu_memory_mib, share_milli=hold.share_milli)
                     for i in hold.gpu_indices) if hold else ()
        event = PlacementEvent(
            cluster=row["cluster"], kind=kind, namespace=row["namespace"], pod=row["name"], pod_uid=row["uid"],
            node=hold.node if hold else node, gpus=gpus, policy=self._policy, reasons=reasons or {},
            decision_id=decision_id, provenance=seen,
        )
        if into is not None:
            into.append(event)
        else:
            await self.write(uow, [event])

    async def write(self, uow: UnitOfWork, events: list[PlacementEvent]) -> None:
        """Inside `uow`: the decisions and their placements events, two statements however many."""
        await uow.decisions.add_decisions([{
            "id": e.event_id, "cluster": e.cluster, "namespace": e.namespace, "pod": e.pod, "pod_uid": e.pod_uid,
            "kind": e.kind, "node": e.node, "gpus": [g.model_dump() for g in e.gpus], "policy": self._policy,
            "reasons": e.reasons} for e in events])
        await uow.outbox.add_outbox_many([(self._topic, e.kafka_key().decode(), e.model_dump_json(by_alias=True))
                                         for e in events])

    async def commit(self, uow: UnitOfWork) -> None:
        """Commit `uow` and wake the outbox relay for the events it wrote."""
        await uow.commit()
        self._outbox_written()


__all__ = ["DecisionLog"]
