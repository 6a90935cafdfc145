"""DRA end to end on the real stack: gpuplace and kube-scheduler allocate ResourceClaims on the same GPUs.

KWOK nodes whose GPUs are published in ResourceSlices as the NVIDIA DRA driver publishes them (driver
gpu.nvidia.com, devices gpu-<index> sharing memory by consumable capacity, /work/notes/dra-format.md), no GPU
labels. kube-scheduler (default-scheduler) places claim pods first, gpuplace then places its own onto what is left,
then kube-scheduler places more. Checked from the apiserver, over every allocated claim of both schedulers: the
apiserver accepted gpuplace's allocations, no device's consumed memory exceeds its capacity, no claim is allocated
for more than one pod or on a node its pod is not bound to, no share is handed out twice; deleting a gpuplace pod
frees its share (the resourceclaim controller deallocates the claim) and the pod that waited for it is placed;
a claim gpuplace cannot allocate is refused with the reason on the pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import defaultdict
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.kube import quantity
from gpuplace.adapters.kube.cluster_api import ClaimConflict, KubeClusterApi, raw_json
from gpuplace.bootstrap import cluster_api
from gpuplace.harness.pipeline_run import FLEET_LABEL
from gpuplace.harness.shared_cluster import delete_quietly, gpuplace_running, inventory_seen, node_manifest
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from tests.integration.conftest import eventually, run_id

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

DRIVER = "gpu.nvidia.com"
GPU_MIB = 16384
GPUS = 2  # per node
NODES = 3
KUBE_SHARE, OURS_SHARE, LATE_SHARE = 10000, 6000, 4000  # MiB per claim


def device_class() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def resource_slice(node: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                  "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "allowMultipleAllocations": True, "attributes": {
                         "type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
                         "uuid": {"string": f"GPU-{uuid.uuid4()}"}, "index": {"int": i}},
                         "capacity": {"memory": {"value": f"{GPU_MIB}Mi"}}} for i in range(GPUS)]}}


def claim_template(name: str, memory_mib: int | None, **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}
    exactly.update(extra)
    if memory_mib is not None:
        exactly["capacity"] = {"requests": {"memory": f"{memory_mib}Mi"}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}


def claim_pod(name: str, template: str, run: str, scheduler: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeSelector": {FLEET_LABEL: run}, "terminationGracePeriodSeconds": 0,
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        "containers": [{"name": "c", "image": "registry.local/perception:1",
                        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "claims": [{"name": "gpu"}]}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


class Dra:
    """The resource.k8s.io/v1 calls the test makes (raw JSON)."""

    def __init__(self, api: KubeClusterApi) -> None:
        self.api = api
        self.resource = api.resource

    async def claims(self, namespace: str) -> list[dict[str, Any]]:
        body = await raw_json(await self.resource.list_namespaced_resource_claim(namespace, _preload_content=False))
        return list(body.get("items") or [])

    async def pods(self, namespace: str) -> dict[str, dict[str, Any]]:
        body = await raw_json(await self.api.core.list_namespaced_pod(namespace, _preload_content=False))
        return {p["metadata"]["name"]: p for p in body.get("items") or []}


def consumed_by_device(claims: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """MiB consumed per (pool, device), over every allocated claim, whoever allocated it."""
    used: dict[tuple[str, str], int] = defaultdict(int)
    for claim in claims:
        for result in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or ():
            memory = (result.get("consumedCapacity") or {}).get("memory")
            used[(result["pool"], result["device"])] += quantity.memory_mib(memory) if memory else GPU_MIB
    return used


def check_claims(claims: list[dict[str, Any]], pods: dict[str, dict[str, Any]]) -> None:
    """No device over its capacity; each allocated claim reserved for one pod, bound (if bound) on the claim's node;
    every share handed out once."""
    over = {device: mib for device, mib in consumed_by_device(claims).items() if mib > GPU_MIB}
    assert not over, f"devices over their {GPU_MIB} MiB: {over}"
    by_uid = {p["metadata"]["uid"]: p for p in pods.values()}
    share_ids: list[str] = []
    for claim in claims:
        status = claim.get("status") or {}
        allocation = status.get("allocation")
        if not allocation:
            continue
        reserved = status.get("reservedFor") or []
        assert len(reserved) <= 1, f"claim {claim['metadata']['name']} reserved for {reserved}"
        node = allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        for entry in reserved:
            pod = by_uid.get(entry["uid"])
            bound = pod and pod["spec"].get("nodeName")
            assert bound in (None, node), f"claim {claim['metadata']['name']} on {node}, its pod on {bound}"
        share_ids += [r["shareID"] for r in allocation["devices"]["results"]]
        assert all(r["pool"] == node for r in allocation["devices"]["results"])
    assert len(share_ids) == len(set(share_ids)), "a shareID handed out twice"


class AllocationLog:
    """Every allocation each claim of a namespace was seen with, from a watch: a claim allocated twice (another
    allocation over the first, or allocated, released and allocated again) shows as two entries."""

    def __init__(self, api: KubeClusterApi, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.seen: dict[str, list[tuple[tuple[str, str, str], ...]]] = defaultdict(list)  # claim uid -> allocations
        self.names: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None

    def _note(self, claim: dict[str, Any]) -> None:
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            return
        key = tuple(sorted((r["pool"], r["device"], r.get("shareID", "")) for r in allocation["devices"]["results"]))
        uid = claim["metadata"]["uid"]
        self.names[uid] = claim["metadata"]["name"]
        if not self.seen[uid] or self.seen[uid][-1] != key:
            self.seen[uid].append(key)

    async def _run(self) -> None:
        selector = {"field_selector": f"metadata.namespace={self.namespace}"}
        items, version = await self.api.list("resourceclaims", **selector)
        for item in items:
            self._note(item)
        while True:
            async for event in self.api.watch("resourceclaims", version, timeout_s=60, **selector):
                obj = event["object"]
                version = obj["metadata"].get("resourceVersion", version)
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._note(obj)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        await asyncio.sleep(1.0)  # the last writes reach the watch
        if self._task.done():
            self._task.result()  # a watch that failed fails the test
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def allocated_more_than_once(self) -> dict[str, int]:
        return {self.names[uid]: len(keys) for uid, keys in self.seen.items() if len(keys) > 1}


async def bound_with_claims(dra: Dra, namespace: str, names: list[str], *, timeout_s: float = 120) -> None:
    async def done() -> bool:
        pods = await dra.pods(namespace)
        return all((pods.get(n) or {}).get("spec", {}).get("nodeName") for n in names)
    await waited(dra, namespace, done, timeout_s=timeout_s, what=f"pods {names} bound")


async def waited(dra: Dra, namespace: str, probe: Any, *, timeout_s: float, what: str) -> Any:
    """`eventually`, failing with where every pod and claim of the namespace stands (a slow stack or a bug?)."""
    try:
        return await eventually(probe, timeout_s=timeout_s, what=what)
    except (AssertionError, pytest.fail.Exception) as exc:  # eventually fails through pytest.fail
        pods = {n: p["spec"].get("nodeName") or _unschedulable(p) or "pending" for n, p in
                (await dra.pods(namespace)).items()}
        claims = {c["metadata"]["name"]: [(r["pool"], r["device"]) for r in ((c.get("status") or {}).get(
            "allocation") or {}).get("devices", {}).get("results", [])] for c in await dra.claims(namespace)}
        raise AssertionError(f"{exc}; pods: {pods}; claims: {claims}") from exc


async def test_gpuplace_and_kube_scheduler_share_dra_gpus(kafka_bootstrap: str, database_url: str) -> None:
    run = run_id()
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    cluster, namespace = f"east-{run}", f"gpuplace-dra-{run}"
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=cluster,
                        kubeconfigs={cluster: kubeconfig}, topic_suffix=f".dra-{run}", namespace=namespace,
                        leader_election_namespace=namespace, node_label_selector=f"{FLEET_LABEL}={run}",
                        policy="gpuplace", defrag_enabled=False)
    nodes = [f"dra-{run}-{i}" for i in range(NODES)]
    async with cluster_api(kubeconfig) as api:
        dra = Dra(api)
        try:
            await raw_json(await api.resource.create_device_class(device_class(), _preload_content=False))
        except ApiException as exc:
            assert exc.status == 409, exc  # another test made it: shared, kept
        try:
            await raw_json(await api.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False))
            for name in nodes:
                await raw_json(await api.core.create_node(node_manifest(name, run), _preload_content=False))
                await raw_json(await api.resource.create_resource_slice(resource_slice(name), _preload_content=False))
            templates = {"kube": claim_template("kube", KUBE_SHARE), "ours": claim_template("ours", OURS_SHARE),
                         "late": claim_template("late", LATE_SHARE), "whole": claim_template("whole", None, count=2),
                         "cel": claim_template("cel", OURS_SHARE, selectors=[
                             {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].index == 0'}}])}
            for body in templates.values():
                await raw_json(await api.resource.create_namespaced_resource_claim_template(
                    namespace, body, _preload_content=False))

            async def create(name: str, template: str, scheduler: str | None) -> None:
                await raw_json(await api.core.create_namespaced_pod(
                    namespace, claim_pod(name, template, run, scheduler), _preload_content=False))

            log = AllocationLog(api, namespace)
            log.start()
            # 1. kube-scheduler takes 10000 MiB of two GPUs
            kube_pods = [f"kube-{i}" for i in range(2)]
            for name in kube_pods:
                await create(name, "kube", None)
            await bound_with_claims(dra, namespace, kube_pods)

            async with gpuplace_running(settings, kubeconfig):
                await inventory_seen(settings, NODES)
                # 2a. gpuplace: two whole GPUs of one node (kube-scheduler's shares left one node empty at least)
                await create("whole-0", "whole", "gpuplace")
                await bound_with_claims(dra, namespace, ["whole-0"])
                whole = next(c for c in await dra.claims(namespace) if c["metadata"]["name"].startswith("whole-0-"))
                results = whole["status"]["allocation"]["devices"]["results"]
                assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]
                # the whole device (the apiserver writes quantities canonically: 16Gi)
                assert {quantity.memory_mib(r["consumedCapacity"]["memory"]) for r in results} == {GPU_MIB}
                # 2b. gpuplace: as many 6000 MiB shares as fit in what kube-scheduler left, and one more
                free = {(node, f"gpu-{i}"): GPU_MIB for node in nodes for i in range(GPUS)}
                for device, mib in consumed_by_device(await dra.claims(namespace)).items():
                    free[device] -= mib
                fit = sum(mib // OURS_SHARE for mib in free.values())
                ours = [f"ours-{i}" for i in range(fit + 1)]
                for name in ours:
                    await create(name, "ours", "gpuplace")
                await create("refused", "cel", "gpuplace")

                async def settled() -> dict[str, dict[str, Any]] | None:
                    pods = await dra.pods(namespace)
                    bound = [n for n in ours if pods[n]["spec"].get("nodeName")]
                    waiting = [n for n in ours if _unschedulable(pods[n])]
                    return pods if len(bound) == fit and len(waiting) == 1 and _unschedulable(pods["refused"]) \
                        else None
                pods = await waited(dra, namespace, settled, timeout_s=180,
                                    what=f"{fit} gpuplace pods bound, 1 waiting")
                assert "CEL selectors" in (_unschedulable(pods["refused"]) or "")
                claims = await dra.claims(namespace)
                check_claims(claims, pods)
                ours_allocated = [c for c in claims if c["metadata"]["name"].startswith("ours-") and
                                  (c.get("status") or {}).get("allocation")]
                assert len(ours_allocated) == fit  # the waiting pod's claim stays unallocated
                assert all(dra_finalizer(c) for c in ours_allocated)
                waiting = next(n for n in ours if not pods[n]["spec"].get("nodeName"))

                # 3. kube-scheduler again: a 4000 MiB share where gpuplace left room (it sees gpuplace's claims)
                await create("late-0", "late", None)
                await bound_with_claims(dra, namespace, ["late-0"])
                check_claims(await dra.claims(namespace), await dra.pods(namespace))

                # 4. deleting a gpuplace pod frees its share: the waiting pod is placed (on that GPU or another)
                victim = next(n for n in ours if pods[n]["spec"].get("nodeName"))
                await raw_json(await api.core.delete_namespaced_pod(victim, namespace, grace_period_seconds=0,
                                                                    _preload_content=False))
                await bound_with_claims(dra, namespace, [waiting], timeout_s=180)
                final_claims, final_pods = await dra.claims(namespace), await dra.pods(namespace)
                check_claims(final_claims, final_pods)
                assert victim not in final_pods
                await log.stop()
                assert len(log.seen) == fit + 5  # kube-0, kube-1, whole-0, late-0, the fit ours, the waiting one
                assert not log.allocated_more_than_once(), log.allocated_more_than_once()
                assert not [c for c in final_claims if c["metadata"]["name"].startswith(f"{victim}-")
                            and (c.get("status") or {}).get("allocation")]
        finally:
            await delete_quietly(api.core.delete_namespace(namespace),
                                 *(api.resource.delete_resource_slice(f"{n}-{DRIVER}") for n in nodes),
                                 *(api.core.delete_node(n) for n in nodes))


def dra_finalizer(claim: dict[str, Any]) -> bool:
    return "resource.kubernetes.io/delete-protection" in (claim["metadata"].get("finalizers") or [])


def _unschedulable(pod: dict[str, Any]) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or "")
    return None




async def test_a_claim_is_allocated_once_and_released_after_a_failed_bind(kube: Any, namespace: str) -> None:
    """KubeClusterApi on the apiserver: the allocation is accepted by its validation; allocating again for the same
    pod and GPUs (a retry after a crash) writes nothing; for other GPUs it is a conflict, never a second allocation;
    releasing gives the claim back unallocated. The pod is not bound (no such node), so bind releases the claim."""
    api = KubeClusterApi(kube)
    try:
        await raw_json(await api.resource.create_device_class(device_class(), _preload_content=False))
    except ApiException as exc:
        assert exc.status == 409, exc
    body = claim_template("x", OURS_SHARE)["spec"]
    created = await raw_json(await api.resource.create_namespaced_resource_claim(
        namespace, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}, **body},
        _preload_content=False))
    ref = {"name": "c", "uid": created["metadata"]["uid"], "driver": DRIVER, "request": "gpu",
           "memory": f"{OURS_SHARE}Mi"}
    # a pod that uses the claim and that nothing schedules (the resourceclaim controller drops reservations of
    # pods that do not exist)
    pod = {**claim_pod("p", "unused", "none", "nobody"), "spec": {
        **claim_pod("p", "unused", "none", "nobody")["spec"], "resourceClaims": [{"name": "gpu",
                                                                                 "resourceClaimName": "c"}]}}
    uid = (await raw_json(await api.core.create_namespaced_pod(namespace, pod, _preload_content=False)))[
        "metadata"]["uid"]
    assignment = {"node": "n-x", "gpus": [{"index": 1, "memory_mib": OURS_SHARE, "share_milli": 366}]}
    await api.allocate_claim(namespace, "p", uid, "n-x", ref, assignment)
    first = (await Dra(api).claims(namespace))[0]
    assert first["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-1"
    assert first["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": uid}]
    assert dra_finalizer(first)
    await api.allocate_claim(namespace, "p", uid, "n-x", ref, assignment)  # idempotent
    again = (await Dra(api).claims(namespace))[0]
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    with pytest.raises(ClaimConflict):
        await api.allocate_claim(namespace, "p", uid, "n-x", ref,
                                 {**assignment, "gpus": [{**assignment["gpus"][0], "index": 0}]})
    await api.release_claim(namespace, "c", uid)
    released = (await Dra(api).claims(namespace))[0]
    assert "allocation" not in released["status"] and not released["status"].get("reservedFor")
    # a bind that fails (a namesake's uid: 409, the pod not bound to the node) gives the claim back
    outcome = await api.bind(namespace, "p", "another-uid", "n-x", assignment, claim=ref)
    assert outcome.value == "conflict"
    assert "allocation" not in (await Dra(api).claims(namespace))[0]["status"]
    with contextlib.suppress(ApiException):  # the finalizer would keep the namespace terminating
        latest = (await Dra(api).claims(namespace))[0]
        latest["metadata"]["finalizers"] = []
        await raw_json(await api.resource.replace_namespaced_resource_claim("c", namespace, latest,
                                                                            _preload_content=False))
