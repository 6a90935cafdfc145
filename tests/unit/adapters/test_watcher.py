"""cluster-watcher's pumps: every pod bound to one of its nodes counts, whichever scheduler placed it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from gpuplace.adapters.kube.watcher import NodeGate, pump_nodes, pump_pods
from gpuplace.contracts.envelope import Envelope


def pod(name: str, *, scheduler: str | None = None, node: str | None = None, namespace: str = "robots",
        phase: str = "Pending", nominated: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if node:
        spec["nodeName"] = node
    status = {"phase": phase, **({"nominatedNodeName": nominated} if nominated else {})}
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"}, "spec": spec, "status": status}


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {}, "status": {"allocatable": {"cpu": "8", "memory": "8Gi"},
                                                              "conditions": [{"type": "Ready", "status": "True"}]}}


async def stream(*items: tuple[str, dict[str, Any]]) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    for item in items:
        yield item
        await asyncio.sleep(0)


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Envelope]] = []

    async def __call__(self, topic: str, event: Envelope) -> None:
        self.sent.append((topic, event))

    def pods(self) -> list[tuple[str, str, bool]]:
        return [(e.name, e.kind, e.managed) for t, e in self.sent if t == "pods"]


async def test_only_gpuplaces_pending_pods_and_every_bound_pod_are_published():
    sink, gate = Sink(), NodeGate()
    gate.node_seen("n1", deleted=False)
    await pump_pods(stream(
        ("ADDED", pod("mine", scheduler="gpuplace")),  # gpuplace's, pending: to place
        ("ADDED", pod("theirs-pending")),  # default-scheduler, pending: not ours to place or charge
        ("ADDED", pod("preemptor", nominated="n1")),  # pending, nominated for n1 after preemption: charged there
        ("ADDED", pod("theirs", node="n1")),  # default-scheduler, bound: charged
        ("MODIFIED", pod("theirs", node="n1", phase="Running")),  # same content: not published again
        ("MODIFIED", pod("theirs", node="n1", phase="Succeeded")),  # finished: gives its resources back
        ("DELETED", pod("theirs-pending")),  # never published: its deletion is not either
    ), sink, topic="pods", cluster="east", region="local", gate=gate)
    assert sink.pods() == [("mine", "pending", True), ("preemptor", "pending", False), ("theirs", "bound", False),
                           ("theirs", "deleted", False)]


async def test_a_pod_listed_before_its_node_is_held_until_the_node_is_published():
    sink, gate = Sink(), NodeGate()
    await pump_pods(stream(("ADDED", pod("theirs", node="n1")), ("ADDED", pod("elsewhere", node="n9"))),
                    sink, topic="pods", cluster="east", region="local", gate=gate)
    assert sink.pods() == []
    await pump_nodes(stream(("ADDED", node("n1"))), sink, topic="nodes", cluster="east", region="local",
                     gate=gate, pods_topic="pods")
    # n1 published, then the pod held for it; n9 is not this watcher's node (its selector): never published
    assert [(t, getattr(e, "name", None)) for t, e in sink.sent] == [("nodes", "n1"), ("pods", "theirs")]


async def test_gpuplace_pods_of_another_namespace_are_charged_not_placed():
    sink, gate = Sink(), NodeGate()
    gate.node_seen("n1", deleted=False)
    await pump_pods(stream(("ADDED", pod("other-team", scheduler="gpuplace", namespace="team-b")),
                           ("ADDED", pod("other-team-bound", scheduler="gpuplace", namespace="team-b", node="n1"))),
                    sink, topic="pods", cluster="east", region="local", namespace="robots", gate=gate)
    assert sink.pods() == [("other-team-bound", "bound", False)]


async def test_status_heartbeats_are_not_translated_and_every_change_translation_reads_still_is(monkeypatch):
    """A pod's status moving on (Running, conditions, IPs) is skipped before translation; a change to anything
    translation reads (its node, an annotation, a terminal phase, a nomination) is translated. What is published
    is exactly what translating every update publishes."""
    from gpuplace.adapters.kube import translate, watcher

    translated: list[str] = []
    real = translate.pod_event

    def counting(obj: dict[str, Any], **kwargs: Any) -> Any:
        translated.append(obj["metadata"]["name"])
        return real(obj, **kwargs)

    def updates() -> AsyncIterator[tuple[str, dict[str, Any]]]:
        running = pod("mine", scheduler="gpuplace", node="n1", phase="Running")
        running["status"]["podIP"] = "10.0.0.7"
        annotated = pod("mine", scheduler="gpuplace", node="n1", phase="Running")
        annotated["metadata"]["annotations"] = {"gpuplace.io/gpu-memory": "4Gi"}
        return stream(
            ("ADDED", pod("mine", scheduler="gpuplace")),
            ("MODIFIED", pod("mine", scheduler="gpuplace", nominated="n1")),  # nominated
            ("MODIFIED", pod("mine", scheduler="gpuplace", node="n1")),  # bound
            ("MODIFIED", running),  # heartbeats: skipped
            ("MODIFIED", pod("mine", scheduler="gpuplace", node="n1", phase="Running")),
            ("MODIFIED", annotated),  # a request changed
            ("MODIFIED", pod("mine", scheduler="gpuplace", node="n1", phase="Failed")),  # finished
            ("DELETED", pod("mine", scheduler="gpuplace", node="n1", phase="Failed")))  # always translated

    async def published() -> list[dict[str, Any]]:
        sink, gate = Sink(), NodeGate()
        gate.node_seen("n1", deleted=False)
        await pump_pods(updates(), sink, topic="pods", cluster="east", region="local", gate=gate)
        return [e.model_dump(exclude={"event_id", "occurred_at"}) for _, e in sink.sent]

    monkeypatch.setattr(translate, "pod_event", counting)
    skipping = await published()
    assert len(translated) == 6
    translated.clear()
    monkeypatch.setattr(watcher, "_translation_inputs", lambda kind, obj: None)
    assert skipping == await published()
    assert len(translated) == 8
    assert [e["kind"] for e in skipping] == ["pending", "pending", "bound", "bound", "deleted", "deleted"]
