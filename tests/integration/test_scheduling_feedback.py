"""Feedback in Kubernetes on the local cluster (DESIGN §3): what `kubectl describe pod` shows of gpuplace.

KubeClusterApi against a real pod with schedulerName gpuplace (nobody else places it) on a KWOK node:
- a waiting pod: PodScheduled=False/Unschedulable with the message, and one events.k8s.io FailedScheduling Event
  that repeats aggregate into (series.count 2), as client-go's events broadcaster does; lastTransitionTime
  moves only when the status flips;
- a bound pod: PodScheduled=True, set by kube-apiserver itself on the binding, and a Normal Scheduled Event
  naming the node and the GPUs; a late FailedScheduling report for it changes nothing;
- the core/v1 view of the same Events (what kubectl describe reads) shows them on the pod;
- feedback about a pod that does not exist, or into a namespace that does not exist, raises nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client

from gpuplace.adapters.kube.cluster_api import KubeClusterApi, raw_json
from gpuplace.usecases.ports import BindOutcome

from .conftest import eventually, unique_name

pytestmark = pytest.mark.integration

MESSAGE = "0/1 nodes are available: 1 0 of 8 GPU(s) with >= 9420 MiB free (largest hole 6860 MiB)."


async def _ready(core: client.CoreV1Api, node: str) -> bool:
    conditions = (await core.read_node(node)).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


async def _waiting_pod(core: client.CoreV1Api, namespace: str) -> tuple[str, str]:
    name = unique_name("slam")
    pod = await core.create_namespaced_pod(namespace, {
        "metadata": {"name": name, "annotations": {"gpuplace.io/gpu-memory": "9420Mi"}},
        "spec": {"schedulerName": "gpuplace", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "slam", "image": "registry.invalid/slam:1"}]},
    })
    return name, pod.metadata.uid


async def _pod_scheduled(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, Any] | None:
    pod = await raw_json(await core.read_namespaced_pod(name, namespace, _preload_content=False))
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None)


async def _events(kube: client.ApiClient, namespace: str, reason: str) -> list[dict[str, Any]]:
    listed = await raw_json(await client.EventsV1Api(kube).list_namespaced_event(namespace, _preload_content=False))
    return [e for e in listed["items"] if e["reason"] == reason]


async def test_a_waiting_pod_then_bound_shows_as_kube_scheduler_shows_it(
    kube: client.ApiClient, namespace: str, gpu_node: dict[str, Any]
) -> None:
    core, api = client.CoreV1Api(kube), KubeClusterApi(kube)
    node = gpu_node["metadata"]["name"]
    await eventually(lambda: _ready(core, node), what=f"node {node} Ready")
    name, uid = await _waiting_pod(core, namespace)

    await api.report_unschedulable(namespace, name, uid, MESSAGE)
    first = await _pod_scheduled(core, namespace, name)
    await api.report_unschedulable(namespace, name, uid, MESSAGE)  # the same news again: aggregated

    (failed,) = await _events(kube, namespace, "FailedScheduling")
    assert (failed["type"], failed["action"], failed["note"]) == ("Warning", "Scheduling", MESSAGE)
    assert failed["reportingController"] == "gpuplace" and failed["reportingInstance"].startswith("gpuplace-")
    assert failed["regarding"] == {"kind": "Pod", "namespace": namespace, "name": name, "uid": uid,
                                   "apiVersion": "v1"}
    assert failed["series"]["count"] == 2 and failed["series"]["lastObservedTime"] >= failed["eventTime"]
    condition = await _pod_scheduled(core, namespace, name)
    assert (condition["status"], condition["reason"], condition["message"]) == ("False", "Unschedulable", MESSAGE)
    assert condition == first  # nothing new to write the second time

    changed = MESSAGE.replace("6860", "4096")  # a new reason: a new Event; still False, so no transition
    await api.report_unschedulable(namespace, name, uid, changed)
    assert sorted(e["note"] for e in await _events(kube, namespace, "FailedScheduling")) == sorted([MESSAGE, changed])
    condition = await _pod_scheduled(core, namespace, name)
    assert condition["message"] == changed and condition["lastTransitionTime"] == first["lastTransitionTime"]

    assignment = {"node": node, "gpus": [{"index": 3, "memory_mib": 9420, "share_milli": 574}]}
    assert await api.bind(namespace, name, uid, node, assignment) is BindOutcome.BOUND
    bound = await core.read_namespaced_pod(name, namespace)  # one call: the Binding carried the assignment
    assert bound.spec.node_name == node
    assert json.loads(bound.metadata.annotations["gpuplace.io/gpu-assignment"]) == assignment
    await api.report_scheduled(namespace, name, uid, node, "(GPU 3: 9420 MiB)")

    (scheduled,) = await _events(kube, namespace, "Scheduled")
    assert (scheduled["type"], scheduled["action"]) == ("Normal", "Binding")
    assert scheduled["note"] == f"Successfully assigned {namespace}/{name} to {node} (GPU 3: 9420 MiB)"
    # kube-apiserver turned PodScheduled True when it stored the binding: no patch of ours did
    condition = await _pod_scheduled(core, namespace, name)
    assert condition["status"] == "True" and not condition.get("reason")

    await api.report_unschedulable(namespace, name, uid, MESSAGE)  # late news about a bound pod: stale
    assert (await _pod_scheduled(core, namespace, name))["status"] == "True"
    (failed,) = [e for e in await _events(kube, namespace, "FailedScheduling") if e["note"] == MESSAGE]
    assert failed["series"]["count"] == 2

    # What kubectl describe reads: the core/v1 view of the same Events, on the pod.
    described = await core.list_namespaced_event(namespace, field_selector=f"involvedObject.uid={uid}")
    assert {e.reason for e in described.items} == {"FailedScheduling", "Scheduled"}


async def test_feedback_that_cannot_land_raises_nothing(kube: client.ApiClient, namespace: str) -> None:
    api = KubeClusterApi(kube)
    await api.report_unschedulable(namespace, unique_name("never-created"), "no-such-uid", MESSAGE)
    assert await _events(kube, namespace, "FailedScheduling") == []  # gone pods get no Event either
    await api.report_scheduled(unique_name("no-such-namespace"), "p", "uid", "n1", "")  # 404: logged, swallowed
