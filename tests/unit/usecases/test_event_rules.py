"""usecases/event_rules: the placement service (through its database, here the fake) and replay (in memory) apply
one cluster's events by the same rules, so the same log leaves both with the same view: the same nodes, the same
free CPU, memory, GPU share and GPU memory on each, the same holds and the same pods waiting. The log exercises
every rule: other schedulers' pods charged where they run (nominated, then moved; over-committing GPUs; bound to a
node not known yet; with an unreadable GPU request), a node re-registered smaller, a node deleted while a pod
still runs there (kept absent until it goes), and pods deleted."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpuplace.contracts.events import GpuRequest
from gpuplace.usecases.cluster_view import ClusterView
from gpuplace.usecases.clusters import Clusters
from gpuplace.usecases.decide import decider
from gpuplace.usecases.event_rules import CHARGE, CONFIRM, MOVE, bound_change
from gpuplace.usecases.messages import MessageBus
from gpuplace.usecases.placement import PlacementService
from gpuplace.usecases.pod_states import WAITING
from gpuplace.usecases.replay import Replayer
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory
from tests.unit.usecases.test_replay import Recorder


async def _record(uow_factory: FakeUnitOfWorkFactory, api: FakeClusterApi) -> Recorder:
    recorder = Recorder(uow_factory, api, PlacementService(uow_factory, {"east": api}, decider("bestfit"),
                                                           policy="bestfit"))
    for i in range(4):
        await recorder.node(node_event(f"n{i}", gpus=2))
    ours = [pod_event(f"p-{i}", memory_mib=m) for i, m in enumerate([9420, 4096, 12000, 6000, 2048, 9420])]
    for event in ours[:4]:
        await recorder.pod(event)
    # another scheduler's pod: charged where it is nominated, then moved where it is bound
    nominated = pod_event("o-moved", managed=False, memory_mib=12000, nominated_node_name="n1")
    await recorder.pod(nominated)
    moved = nominated.model_copy(update={"kind": "bound", "node_name": "n2", "event_id": "o-moved-bound"})
    api.runs_elsewhere(moved)
    await recorder.pod(moved)
    # two whole GPUs on a node gpuplace's pods share: the GPUs without room are over-committed, not charged
    await recorder.pod(pod_event("o-big", managed=False, kind="bound", node_name="n0",
                                 gpu=GpuRequest(gpu_count=2, memory_mib_per_gpu=16000)))
    # bound to a node placement does not know yet: charged when the node arrives
    await recorder.pod(pod_event("o-early", managed=False, kind="bound", node_name="n9", memory_mib=8000))
    await recorder.node(node_event("n9", gpus=1))
    # a GPU request gpuplace cannot read, run by another scheduler: its CPU and memory still count
    await recorder.pod(pod_event("o-odd", managed=False, kind="bound", node_name="n3", memory_mib=None,
                                 request_error="unknown vocabulary", cpu_milli=60000))
    await recorder.node(node_event("n0", gpus=2, cpu_milli=32000))  # re-registered, smaller
    await recorder.node(node_event("n2", deleted=True))  # o-moved runs there: kept, absent
    for event in ours[4:]:
        await recorder.pod(event)
    for gone in (ours[1], moved):  # the last pod on n2 goes: n2 goes with it
        await recorder.pod(gone.model_copy(update={"kind": "deleted", "event_id": f"del-{gone.uid}"}))
    await recorder.pod(pod_event("after", memory_mib=16000))
    return recorder


def _figures(view: ClusterView) -> dict[str, Any]:
    snapshot = view.snapshot
    assert snapshot is not None
    per_node = {name: (int(snapshot.cpu_free_milli[at]), int(snapshot.memory_free_mib[at]),
                       snapshot.free_share_milli[at].tolist(), np.where(snapshot.gpu_exists[at],
                                                                        snapshot.free_memory_mib[at], -1).tolist(),
                       bool(snapshot.facts[at].present) if snapshot.facts else True)
                for at, name in enumerate(snapshot.node_names)}
    holds = {uid: (h.node, h.gpu_indices, h.share_milli, h.gpu_memory_mib) for uid, h in view.holds.items()}
    return {"nodes": per_node, "holds": holds}


async def test_the_service_and_replay_leave_the_same_view_after_the_same_events(
        uow_factory: FakeUnitOfWorkFactory, api: FakeClusterApi):
    recorder = await _record(uow_factory, api)
    replayer = Replayer("east")
    result = replayer.feed(recorder.entries)
    async with Clusters(uow_factory, MessageBus()).held("east") as state:  # the database's view, read afresh
        service = _figures(state.view)
    async with uow_factory() as uow:
        waiting = {r["uid"] for r in await uow.pods.pods_in_state("east", WAITING)}

    final = replayer.final_state()
    assert result.compared > 0 and result.differences == []
    assert _figures(final.view) == service
    assert {r["uid"] for r in final.waiting} == waiting
    assert "n2" not in service["nodes"] and service["nodes"]["n9"][2] != [1000]  # n2 went, o-early charged on n9


@pytest.mark.parametrize(("state", "node", "kind", "expected"), [
    (None, None, "bound", CHARGE),  # never seen: charged where it runs
    ("invalid", None, "bound", CHARGE),  # refused by placement, run by another scheduler
    ("bound", "n1", "bound", MOVE),  # recorded on another node
    ("bound", "n2", "bound", None),  # where it is recorded: no news
    ("reserved", "n2", "bound", CONFIRM),  # gpuplace's bind happened
    ("reserved", "n1", "bound", None),  # reserved elsewhere: the bind's outcome says
])
def test_what_a_pod_seen_bound_changes(state, node, kind, expected):
    event = pod_event("p", kind=kind, node_name="n2")
    assert bound_change(event, state, node) == expected
    assert bound_change(pod_event("p", kind="pending"), state, node) is None  # nowhere yet: nothing
