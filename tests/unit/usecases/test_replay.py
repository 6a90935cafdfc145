"""Replay on a synthetic log: the placement service (in-memory ports) records a run, replay decides it again.

The log is what the service consumed (nodes.v1, pods.v1) and what it published (placements.v1, from its
outbox), in the order it happened. Replaying it with the recorded policy must give every recorded decision
again; a tampered decision must show as one difference on an unchanged state; another policy is a what-if.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuplace.contracts import topics
from gpuplace.contracts.events import NodeEvent, PlacementEvent, PodEvent
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.usecases.decide import decider, policy_options
from gpuplace.usecases.placement import PlacementService
from gpuplace.usecases.replay import Entry, Outcome, replay
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory


@dataclass
class Recorder:
    """Drives a PlacementService and keeps the log: each input, then the placements its outbox gained."""

    uow_factory: FakeUnitOfWorkFactory
    api: FakeClusterApi
    placement: PlacementService
    entries: list[Entry] = field(default_factory=list)
    published: int = 0

    def _stamp(self) -> int:
        return 1_000 * (len(self.entries) + 1)

    def _drain_outbox(self) -> None:
        for row in self.uow_factory.db.outbox[self.published:]:
            self.entries.append(Entry(topics.PLACEMENTS, self._stamp(), json.loads(row["payload"])))
        self.published = len(self.uow_factory.db.outbox)

    async def node(self, event: NodeEvent) -> None:
        self.entries.append(Entry(topics.NODES, self._stamp(), event.model_dump(mode="json", by_alias=True)))
        await self.placement.on_node(event)
        await self.placement.drain()
        self._drain_outbox()

    async def pod(self, event: PodEvent) -> None:
        if event.kind == "deleted":
            self.api.gone.add(event.name)  # gone from the apiserver: its deletion is believed
        self.entries.append(Entry(topics.PODS, self._stamp(), event.model_dump(mode="json", by_alias=True)))
        await self.placement.on_pod(event)
        await self.placement.drain()
        self._drain_outbox()


async def record(policy: str, *, pods: int = 60, seed: int = 3, options: PolicyContext | None = None) -> list[Entry]:
    uow_factory, api = FakeUnitOfWorkFactory(), FakeClusterApi()
    recorder = Recorder(uow_factory, api, PlacementService(uow_factory, {"east": api}, decider(policy, options=options),
                                                           policy=policy))
    for i in range(4):
        await recorder.node(node_event(f"n{i}", gpus=2))
    rng = random.Random(seed)
    running: list[PodEvent] = []
    for i in range(pods):
        event = pod_event(f"p-{i}", memory_mib=rng.choice([2048, 4096, 6000, 9420, 12000]),
                          frame_rate_hz=rng.choice([None, 15.0]), workload="slam")
        await recorder.pod(event)
        running.append(event)
        if i % 7 == 6:  # a pod leaves now and then: its GPU is free again and the waiting pods are tried
            gone = running.pop(rng.randrange(len(running)))
            await recorder.pod(gone.model_copy(update={"kind": "deleted", "event_id": f"del-{gone.uid}"}))
    await recorder.pod(pod_event("other-0", managed=False, kind="bound", node_name="n1", memory_mib=4096))
    await recorder.pod(pod_event("after-other", memory_mib=4096))
    return recorder.entries


def decided(entries: list[Entry]) -> list[dict[str, Any]]:
    return [dict(e.event) for e in entries if e.topic == topics.PLACEMENTS and e.event["kind"] == "decided"]


@pytest.mark.parametrize("policy", ["gpuplace", "bestfit", "fgd"])
async def test_replay_with_the_recorded_policy_reproduces_every_decision(policy):
    entries = await record(policy)
    result = replay("east", entries)
    unschedulable = sum(1 for e in entries if e.topic == topics.PLACEMENTS and e.event["kind"] == "unschedulable")

    assert result.policy == policy and not result.what_if
    assert unschedulable > 0  # the run had pods wait, so replay compared those too
    assert result.compared == len(decided(entries)) + unschedulable
    assert result.differences == []


async def test_a_replay_decides_with_the_policy_settings_placement_ran_with():
    """GPUPLACE_EXPECTED_SHAPES moves gpuplace's decisions: the replay given the same settings (as `gpuplace replay`
    reads them from the environment) reproduces every decision, the one without them does not."""
    options = policy_options("8xgpu")
    entries = await record("gpuplace", options=options)

    assert replay("east", entries, options=options).differences == []
    assert replay("east", entries).differences != []


async def test_decisions_carry_their_provenance():
    entries = await record("gpuplace", pods=10)
    first, second = decided(entries)[:2]
    assert first["provenance"]["policy_version"] and first["provenance"]["config_digest"]
    assert first["provenance"]["latency_model"] and first["provenance"]["last_node_event"]
    assert second["provenance"]["attempt"] > first["provenance"]["attempt"]  # counts unrecorded retries too
    assert first["provenance"]["view_digest"] != second["provenance"]["view_digest"]  # the first pod took room


async def test_a_tampered_decision_is_one_difference_on_the_same_state():
    entries = await record("bestfit")
    # the last decision: an earlier one would change the state every later decision is made on
    target = max(i for i, e in enumerate(entries) if e.topic == topics.PLACEMENTS and e.event["kind"] == "decided")
    event = dict(entries[target].event)
    node = "n3" if event["node"] != "n3" else "n2"
    entries[target] = Entry(entries[target].topic, entries[target].timestamp_ms, {**event, "node": node})

    result = replay("east", entries)

    assert len(result.differences) == 1
    difference = result.differences[0]
    assert difference.recorded == Outcome(node, tuple(g["index"] for g in event["gpus"]))
    assert difference.replayed.node == event["node"]
    assert difference.state_differed is False  # same state, different decision


async def test_what_if_applies_its_own_decisions():
    entries = await record("gpuplace", pods=80)
    result = replay("east", entries, policy="fgd")

    assert result.what_if and result.policy == "fgd" and result.recorded_policy == "gpuplace"
    assert result.compared == 0
    assert result.replayed.pods_placed > 0 and result.recorded.pods_placed > 0
    assert result.replayed.stranded_gpu_pct is not None
    assert len(result.replayed.pending_ms) == result.replayed.pods_placed


async def test_a_gpu_closed_by_an_slo_violation_is_closed_in_the_replay_too():
    uow_factory, api = FakeUnitOfWorkFactory(), FakeClusterApi()
    recorder = Recorder(uow_factory, api, PlacementService(uow_factory, {"east": api}, decider("bestfit"),
                                                           policy="bestfit"))
    await recorder.node(node_event("n0", gpus=2))
    first = pod_event("first", memory_mib=4096)
    await recorder.pod(first)
    async with uow_factory() as uow:  # what latency-ingest does on a deadline miss: close the GPU, publish it
        await uow.latency.flag_slo_violation("east", first.uid, "n0", 0)
        await uow.commit()
    violation = PlacementEvent(cluster="east", kind="slo_violation", namespace="robots", pod="first",
                               pod_uid=first.uid, node="n0", reasons={"gpu_index": "0"})
    recorder.entries.append(Entry(topics.PLACEMENTS, recorder._stamp(), violation.model_dump(mode="json")))
    await recorder.placement.on_placement(violation)
    await recorder.pod(pod_event("second", memory_mib=4096))  # best fit would share GPU 0; it is closed
    assert decided(recorder.entries)[-1]["gpus"][0]["index"] == 1

    result = replay("east", recorder.entries)
    assert result.compared == 2 and result.differences == []
    without = [e for e in recorder.entries if e.event.get("kind") != "slo_violation"]
    assert [str(d.replayed) for d in replay("east", without).differences] == ["n0 GPUs [0]"]
