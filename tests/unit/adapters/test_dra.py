"""DRA objects <-> gpuplace (adapters/kube/dra.py, translate.py, watcher.py): ResourceSlices as the NVIDIA DRA
driver publishes them become a node's GPUs, claims become requests or a refusal with its reason, and the
allocation gpuplace writes has the upstream allocator's fields (k8s.io/api@v0.37.2 resource/v1 types.go,
DeviceRequestAllocationResult; k8s.io/dynamic-resource-allocation@v0.37.2
structured/internal/incubating/allocator_incubating.go)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpuplace.adapters.kube import dra, translate
from gpuplace.adapters.kube.vocabulary import RequestError
from gpuplace.adapters.kube.watcher import DraCache, NodeGate, pump_nodes, pump_pods
from gpuplace.contracts.envelope import Envelope
from gpuplace.contracts.events import DraClaim, DraDevice
from gpuplace.usecases import dra as dra_usecase

NODE = "n1"


def device(index: int, memory: str = "81559Mi", **changes: Any) -> dict[str, Any]:
    body = {"name": f"gpu-{index}", "allowMultipleAllocations": True,
            "attributes": {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
                           "uuid": {"string": f"GPU-{index}"}, "index": {"int": index}},
            "capacity": {"memory": {"value": memory}}}
    body.update(changes)
    return body


def slice_(node: str = NODE, devices: list[dict[str, Any]] | None = None, *, pool: str | None = None,
           generation: int = 1, count: int = 1, name: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name or f"{node}-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
                     "devices": devices if devices is not None else [device(0), device(1)]}}


def claim(name: str = "c", *, memory: str | None = "6000Mi", count: int = 1, allocation: dict[str, Any] | None = None,
          reserved: list[str] = (), **exactly: Any) -> dict[str, Any]:  # type: ignore[assignment]
    request: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": count,
                               **exactly}
    if memory is not None:
        request["capacity"] = {"requests": {"memory": memory}}
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": "robots", "uid": f"uid-{name}",
                                         "resourceVersion": "7"},
                            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}, "status": {}}
    if allocation is not None:
        body["status"]["allocation"] = allocation
    if reserved:
        body["status"]["reservedFor"] = [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in reserved]
    return body


# -- slices -> inventory ---------------------------------------------------------------------------------------
def test_a_slice_as_the_nvidia_driver_publishes_it_is_the_nodes_gpus():
    inventory = dra.slice_inventory(NODE, [slice_()])
    assert (inventory.model, inventory.count, inventory.memory_mib) == ("NVIDIA H100 80GB HBM3", 2, 81559)
    assert inventory.uuids == ("GPU-0", "GPU-1")


def test_only_the_newest_complete_generation_counts():
    old = slice_(devices=[device(0, "40960Mi")], name="old")
    new = slice_(generation=2)
    assert dra.slice_inventory(NODE, [old, new]).memory_mib == 81559
    with pytest.raises(dra.SliceError, match="1 of 2 slices seen"):
        dra.slice_inventory(NODE, [slice_(generation=3, count=2)])


@pytest.mark.parametrize(("slices", "reason"), [
    ([slice_(pool="fabric")], "one pool named after the node"),
    ([slice_(devices=[device(0, name="mig-1g.10gb-0")])], "not named gpu-<index>"),
    ([slice_(devices=[device(0, attributes={"index": {"int": 3}, "productName": {"string": "x"}})])],
     "attribute index is 3"),
    ([slice_(devices=[device(0, allowMultipleAllocations=False)])], "does not allow multiple allocations"),
    ([slice_(devices=[device(0), device(1, "40960Mi")])], "mixes GPU models"),
    ([slice_(devices=[device(0, "80G")])], "not a whole number of MiB"),
    ([slice_(devices=[device(1)])], "are not 0..0"),
    ([slice_(devices=[device(0, taints=[{"key": "k", "effect": "NoSchedule"}])])], "has taints"),
    ([slice_(devices=[])], "publishes no device"),
])
def test_a_slice_gpuplace_cannot_place_on_exactly_is_refused_with_why(slices, reason):
    with pytest.raises(dra.SliceError, match=reason):
        dra.slice_inventory(NODE, slices)


def test_the_node_event_takes_its_gpus_from_the_slice():
    node = {"metadata": {"name": NODE, "labels": {}}, "spec": {}, "status": {"allocatable": {"cpu": "8"}}}
    event = translate.node_event(node, cluster="east", region="local",
                                 inventory=dra.slice_inventory(NODE, [slice_()]))
    assert (event.gpu_model, event.gpu_count, event.gpu_memory_mib, event.dra_driver) == (
        "NVIDIA H100 80GB HBM3", 2, 81559, "gpu.nvidia.com")
    assert dra_usecase.node_labels(event.labels, event.dra_driver) == {dra_usecase.DRA_NODE_LABEL: "gpu.nvidia.com"}


# -- claims -> requests ----------------------------------------------------------------------------------------
def test_a_memory_share_claim_is_a_memory_request_on_one_gpu():
    gpu, ref = dra.claim_request(claim(memory="6000Mi"))
    assert (gpu.gpu_count, gpu.memory_mib_per_gpu, gpu.share_milli_per_gpu) == (1, 6000, None)
    assert ref == DraClaim(name="c", uid="uid-c", driver="gpu.nvidia.com", request="gpu", memory="6000Mi")


def test_a_claim_without_capacity_takes_whole_gpus():
    gpu, ref = dra.claim_request(claim(memory=None, count=2))
    assert (gpu.gpu_count, gpu.memory_mib_per_gpu, gpu.share_milli_per_gpu, ref.memory) == (2, None, 1000, None)


def test_memory_is_rounded_up_to_mib():
    assert dra.claim_request(claim(memory="1G"))[0].memory_mib_per_gpu == 954


def _two_requests() -> dict[str, Any]:
    body = claim()
    body["spec"]["devices"]["requests"].append(copy.deepcopy(body["spec"]["devices"]["requests"][0]) | {"name": "b"})
    return body


def _first_available() -> dict[str, Any]:
    body = claim()
    body["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [{"name": "a",
                                                                              "deviceClassName": "gpu.nvidia.com"}]}]
    return body


def _constrained() -> dict[str, Any]:
    body = claim()
    body["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.nvidia.com/productName"}]
    return body


@pytest.mark.parametrize(("body", "reason"), [
    (_two_requests(), "2 device requests"),
    (_first_available(), "firstAvailable"),
    (_constrained(), "constraints"),
    (claim(deviceClassName="mig.nvidia.com"), "device class 'mig.nvidia.com'"),
    (claim(allocationMode="All"), "allocationMode All"),
    (claim(adminAccess=True), "adminAccess"),
    (claim(selectors=[{"cel": {"expression": "true"}}]), "CEL selectors"),
    (claim(tolerations=[{"operator": "Exists"}]), "tolerations"),
    (claim(count=65, memory=None), "count 65"),
    (claim(memory="0"), "memory '0'"),
    (claim(capacity={"requests": {"memory": "1Gi", "cores": "10"}}, memory=None), "cores"),
])
def test_a_claim_gpuplace_cannot_allocate_is_refused_with_why(body, reason):
    with pytest.raises(RequestError, match=reason):
        dra.claim_request(body)


# -- allocated claims ------------------------------------------------------------------------------------------
def upstream_allocation(node: str, devices: dict[int, str | None]) -> dict[str, Any]:
    """As kube-scheduler writes one (allocator_incubating.go Allocate; createNodeSelector)."""
    return {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": f"gpu-{i}", "shareID": f"s{i}",
         **({"consumedCapacity": {"memory": memory}} if memory else {})} for i, memory in devices.items()]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}


def test_an_allocated_claim_names_its_node_and_the_memory_each_gpu_gives():
    held = dra.allocated(claim(allocation=upstream_allocation(NODE, {0: "10000Mi", 1: None})))
    assert held is not None and held.node == NODE
    assert held.devices == (DraDevice(index=0, memory_mib=10000), DraDevice(index=1, memory_mib=None))
    assert dra.allocated(claim()) is None


def test_the_allocation_gpuplace_writes_has_the_upstream_fields():
    body = claim(memory="6000Mi")
    body["spec"]["devices"]["config"] = [{"requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com",
                                                                          "parameters": {"x": 1}}}]
    device_class = {"spec": {"config": [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {"y": 2}}}]}}
    written = dra.allocation(body, NODE, [1], 6000, device_class)
    (result,) = written["devices"]["results"]
    assert set(result) == {"request", "driver", "pool", "device", "shareID", "consumedCapacity"}
    assert (result["request"], result["driver"], result["pool"], result["device"]) == ("gpu", "gpu.nvidia.com",
                                                                                       NODE, "gpu-1")
    assert result["consumedCapacity"] == {"memory": "6000Mi"}  # the request as written (no requestPolicy)
    assert written["nodeSelector"] == upstream_allocation(NODE, {})["nodeSelector"]
    assert [c["source"] for c in written["devices"]["config"]] == ["FromClass", "FromClaim"]
    assert written["devices"]["config"][0]["requests"] == ["gpu"]
    # read back as any allocator's: the same GPUs
    assert dra.same_devices({**body, "status": {"allocation": written}}, NODE, [1])
    assert not dra.same_devices({**body, "status": {"allocation": written}}, NODE, [0])


def test_a_whole_gpu_claim_consumes_the_devices_whole_capacity():
    # fillEmptyRequest (consumable_capacity.go): no capacity requested -> the device's capacity value
    written = dra.allocation(claim(memory=None, count=2), NODE, [0, 1], 81559)
    assert [r["consumedCapacity"] for r in written["devices"]["results"]] == [{"memory": "81559Mi"}] * 2
    share_ids = [r["shareID"] for r in written["devices"]["results"]]
    assert len(set(share_ids)) == 2


def test_allocated_claims_are_charged_exactly():
    claims = [{"node": NODE, "devices": [{"index": 1, "memory_mib": 10000}]},
              {"node": "elsewhere", "devices": [{"index": 0, "memory_mib": 1}]}]
    assert dra_usecase.claimed_gpus(claims, NODE, 16384) == ((1,), 10000 * 1000 // 16384, 10000)
    assert dra_usecase.claimed_gpus([{"node": NODE, "devices": [{"index": 0, "memory_mib": None}]}], NODE,
                                    16384) == ((0,), 1000, 16384)
    assert dra_usecase.claimed_gpus(claims, "other", 16384) is None


# -- pods with claims --------------------------------------------------------------------------------------------
def pod(name: str = "p", *, scheduler: str | None = "gpuplace", node: str | None = None,
        claim_name: str | None = None, template_claim: str | None = "c", extra: dict[str, Any] | None = None
        ) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": "gpu"}
    status: dict[str, Any] = {"phase": "Pending"}
    if claim_name:
        ref["resourceClaimName"] = claim_name
    else:
        ref["resourceClaimTemplateName"] = "t"
        if template_claim:
            status["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": template_claim}]
    spec: dict[str, Any] = {"resourceClaims": [ref], "containers": [
        {"name": "c", "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}], **(extra or {})}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "robots", "uid": f"uid-{name}"}, "spec": spec, "status": status}


def lookup(*claims: dict[str, Any]) -> translate.ClaimLookup:
    found = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
    return lambda namespace, name: found.get((namespace, name))


def test_a_pending_gpuplace_pod_asks_through_its_claim():
    event = translate.pod_event(pod(), cluster="east", region="local", claims=lookup(claim()))
    assert event.request_error is None and event.gpu is not None and event.gpu.memory_mib_per_gpu == 6000
    assert [c.name for c in event.dra_claims] == ["c"]


def test_a_pod_whose_claim_is_not_created_yet_waits_for_it():
    with pytest.raises(translate.ClaimPending):
        translate.pod_event(pod(template_claim=None), cluster="east", region="local", claims=lookup(claim()))
    with pytest.raises(translate.ClaimPending):
        translate.pod_event(pod(claim_name="later"), cluster="east", region="local", claims=lookup(claim()))


@pytest.mark.parametrize(("body", "claims", "reason"), [
    (pod(extra={"limits": {"nvidia.com/gpu": "1"}}), [claim()], "both through a ResourceClaim"),
    (pod(), [claim(selectors=[{"cel": {"expression": "true"}}])], "CEL selectors"),
    (pod(), [claim(allocation=upstream_allocation(NODE, {0: "1Mi"}), reserved=["other"])], "allocated already"),
])
def test_a_gpuplace_pod_with_a_claim_it_cannot_allocate_gets_the_reason(body, claims, reason):
    event = translate.pod_event(body, cluster="east", region="local", claims=lookup(*claims))
    assert event.request_error is not None and reason in event.request_error


def test_another_schedulers_pod_is_charged_where_its_claim_is_allocated_before_it_is_bound():
    allocated = claim(allocation=upstream_allocation(NODE, {1: "10000Mi"}), reserved=["k"])
    event = translate.pod_event(pod("k", scheduler=None), cluster="east", region="local", claims=lookup(allocated))
    assert not event.managed and event.node_name is None and event.nominated_node_name == NODE
    assert event.dra_claims[0].devices == (DraDevice(index=1, memory_mib=10000),)


# -- the watcher ------------------------------------------------------------------------------------------------
async def timed(*items: tuple[float, str, dict[str, Any]]) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """Watch events at given times (seconds from the start), so two streams interleave as the test says."""
    start = asyncio.get_running_loop().time()
    for at, kind, obj in items:
        await asyncio.sleep(max(0.0, start + at - asyncio.get_running_loop().time()))
        yield kind, obj


class Sink:
    def __init__(self) -> None:
        self.sent: list[Envelope] = []
        self.topics: list[tuple[str, Envelope]] = []

    async def __call__(self, topic: str, event: Envelope) -> None:
        self.sent.append(event)
        self.topics.append((topic, event))


async def test_a_pod_is_published_when_its_claim_appears_and_its_deletion_when_the_claim_is_released():
    sink, gate = Sink(), NodeGate()
    gate.node_seen(NODE, deleted=False)
    reserved = claim(allocation=upstream_allocation(NODE, {0: "6000Mi"}), reserved=["p"])
    released = claim()
    await pump_pods(
        timed((0.0, "ADDED", pod()), (0.10, "MODIFIED", pod(node=NODE)), (0.15, "DELETED", pod(node=NODE))),
        sink, topic="pods", cluster="east", region="local", gate=gate,
        claims=timed((0.05, "ADDED", claim()), (0.08, "MODIFIED", reserved), (0.25, "MODIFIED", released)),
        cache=DraCache())
    kinds = [(e.kind, bool(e.dra_claims and e.dra_claims[0].devices)) for e in sink.sent]  # type: ignore[attr-defined]
    # pending once its claim exists; re-published with the allocation; bound; deleted only after the release
    assert kinds == [("pending", False), ("pending", True), ("bound", True), ("deleted", False)]


NODE_OBJECT = {"metadata": {"name": NODE, "labels": {}}, "spec": {}, "status": {"allocatable": {"cpu": "8"}}}


async def test_a_slice_that_arrives_after_its_node_publishes_the_node_again():
    sink = Sink()
    await pump_nodes(timed((0.0, "ADDED", NODE_OBJECT)), sink, topic="nodes", cluster="east", region="local",
                     slices=timed((0.0, "SYNCED", {}), (0.05, "ADDED", slice_()), (0.1, "DELETED", slice_())),
                     cache=DraCache())
    assert [(e.gpu_count, e.dra_driver) for e in sink.sent] == [  # type: ignore[attr-defined]
        (0, None), (2, "gpu.nvidia.com"), (0, None)]


async def test_nodes_wait_for_the_slices_list_so_pods_of_other_schedulers_are_charged_on_gpus():
    """At start-up the node list may come before the slice list: the node is published once the slices are
    listed, with its GPUs, and only then the pod bound there by kube-scheduler that the gate held for it (a node
    published without GPUs first got such pods charged on none, and gpuplace gave their GPUs away)."""
    sink, gate = Sink(), NodeGate()
    held = translate.pod_event(pod(node=NODE, scheduler=None), cluster="east", region="local")
    assert not gate.admit(held)  # listed before its node
    await pump_nodes(timed((0.0, "SYNC", NODE_OBJECT)), sink, topic="nodes", cluster="east", region="local",
                     gate=gate, pods_topic="pods",
                     slices=timed((0.05, "SYNC", slice_()), (0.06, "SYNCED", {})), cache=DraCache())
    assert [(t, getattr(e, "gpu_count", None)) for t, e in sink.topics] == [("nodes", 2), ("pods", None)]


def test_without_dra_watched_a_claim_pod_is_translated_as_before():
    event = translate.pod_event(pod(template_claim=None), cluster="east", region="local")
    assert event.gpu is None and event.dra_claims == () and event.request_error is None


async def test_a_cancelled_pump_stops_its_watches():
    stopped = asyncio.Event()

    async def endless() -> AsyncIterator[tuple[str, dict[str, Any]]]:
        try:
            while True:
                await asyncio.sleep(0.01)
                if False:  # an async generator that never yields
                    yield "ADDED", {}
        finally:
            stopped.set()

    task = asyncio.create_task(pump_pods(endless(), Sink(), topic="pods", cluster="east", region="local",
                                         claims=endless(), cache=DraCache()))
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.wait_for(stopped.wait(), 1.0)


def test_the_cache_finds_a_nodes_slices_by_node_and_forgets_deleted_ones():
    cache = DraCache()
    assert cache.saw_slice("ADDED", slice_()) == NODE
    assert cache.saw_slice("ADDED", slice_("n2", [device(0)])) == "n2"
    assert cache.saw_slice("ADDED", {"metadata": {"name": "other"}, "spec": {"driver": "x", "nodeName": NODE}}) is None
    assert [cache.inventory(n).count for n in (NODE, "n2")] == [2, 1]  # type: ignore[union-attr]
    cache.saw_slice("DELETED", slice_())
    assert cache.inventory(NODE) is None and cache.inventory("n2") is not None
