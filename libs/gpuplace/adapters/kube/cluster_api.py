"""The Kubernetes API as gpuplace uses it: list/watch, annotate + bind, evict, read a pod, and feedback
(FailedScheduling / Scheduled Events, the PodScheduled condition) as kube-scheduler gives it.

Responses are read as raw JSON (`_preload_content=False`): it is several times faster than the client's
model deserialisation at fleet scale, and it sidesteps the client's Binding bug (the server answers a
binding with a Status, which the client fails to parse as V1Binding after the bind has succeeded;
kubernetes/kubernetes#80663).

KubeClusterApi implements the ClusterApi port (usecases/ports.py, which says what each method promises;
tests/contract/cluster_api_contract.py checks it here and on the fake). Outcomes a caller must act on are
values, not exceptions, each error status mapped in one table (BIND_ERRORS, EVICT_ERRORS): a 409 on bind means
the pod is bound already (reconcile, never retry blindly), a 429 on eviction is a PodDisruptionBudget refusal
to respect. Feedback is the exception the other way: it never raises (a failure is logged), so it cannot fail
placement.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import time
import urllib.parse
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
import aiohttp.helpers
import yarl
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters import dependencies
from gpuplace.adapters.kube import credentials, dra, hami, translate
from gpuplace.adapters.kube.vocabulary import ASSIGNMENT
from gpuplace.usecases.ports import BindOutcome, EvictOutcome, Json, NodeCapacity

log = logging.getLogger(__name__)
Outcome = TypeVar("Outcome", BindOutcome, EvictOutcome)

REPORTING_CONTROLLER = "gpuplace"
SERIES_WINDOW_S = 6 * 60  # client-go tools/events/event_broadcaster.go finishTime: a quiet series ends
EVENT_CACHE_SIZE = 4096  # Events this process may still add to (LRU); a forgotten one only means a new Event
NOTE_LIMIT_BYTES = 1024  # events.k8s.io validation NoteLengthLimit; kube-scheduler's truncateMessage
# kube-scheduler writes the condition's message whole; its reasons are generic ("Insufficient cpu"). GpuFit's are
# too (its per-node numbers stay out of the message), but some still carry a node's numbers (free CPU, a latency
# prediction), so a large fleet's histogram could make every waiting pod's status huge: capped here, well above
# the Event's note.
CONDITION_MESSAGE_LIMIT_BYTES = 8192
FEEDBACK_TIMEOUT_S = 10  # a slow apiserver delays feedback, never placement


# What an error status of a bind or an eviction means to the caller; any other error raises.
BIND_ERRORS = {
    409: BindOutcome.CONFLICT,  # bound already, or the uid precondition failed (a namesake)
    404: BindOutcome.GONE, 410: BindOutcome.GONE,
}
EVICT_ERRORS = {
    429: EvictOutcome.REFUSED,  # a PodDisruptionBudget
    404: EvictOutcome.GONE, 409: EvictOutcome.GONE,  # 409: the uid precondition failed (a namesake)
}


class ClaimConflict(RuntimeError):
    """A pod's ResourceClaim cannot be allocated as decided (allocated elsewhere, gone): decide the pod again."""


async def connect(kubeconfig: str, **in_cluster: Any) -> client.ApiClient:
    """An API client for one cluster, `kubeconfig` a path or "in-cluster", its credentials kept fresh
    (credentials.py); the caller closes it. `in_cluster`: the in-cluster loader's files and environment (tests)."""
    configuration = client.Configuration()
    with dependencies.reaching(dependencies.kubernetes(kubeconfig)):
        if kubeconfig != credentials.IN_CLUSTER and not os.path.isfile(kubeconfig):
            # kubernetes_asyncio would only say "Expected key current-context"
            raise FileNotFoundError(errno.ENOENT, "no such file", kubeconfig)
        await credentials.load(kubeconfig, configuration, **in_cluster)
    if configuration.proxy is None and configuration.host:
        configuration.proxy, configuration.proxy_headers = env_proxy(configuration.host)
    api_client = client.ApiClient(configuration)
    session = api_client.rest_client.pool_manager
    if getattr(session, "_trust_env", False):  # set by kubernetes_asyncio; no public setter (aiohttp 3.14)
        session._trust_env = False
    return api_client


def env_proxy(host: str) -> tuple[str | None, dict[str, str] | None]:
    """The proxy to reach `host` through, from HTTPS_PROXY/HTTP_PROXY and NO_PROXY as aiohttp reads them, once.

    kubernetes_asyncio opens its aiohttp session with trust_env=True, and aiohttp then looks the proxy up again
    and parses ~/.netrc in a worker thread on every request: two thread hops per request, 7% of placement's CPU in
    a burst (py-spy, `bench pipeline --nodes 200 --pods 2000`). `connect` looks the proxy up once instead and turns
    trust_env off; netrc never authenticates to an apiserver (tokens and client certificates do)."""
    try:
        proxy, auth = aiohttp.helpers.get_env_proxy_for_url(yarl.URL(host))
    except LookupError:  # none set, or NO_PROXY covers the host
        return None, None
    return str(proxy), ({"Proxy-Authorization": auth.encode()} if auth is not None else None)


async def _json(response: Any) -> Json:
    """The body of a raw response; an error status raises ApiException as the preloading client would.

    With `_preload_content=False` the client returns aiohttp's response, 4xx/5xx included, instead of raising,
    so every raw call in gpuplace goes through here. `response` is Any because kubernetes_asyncio's stubs type
    every call as returning its model, `_preload_content=False` included.
    """
    try:
        body = await response.read()
    finally:
        response.release()
    if not 200 <= response.status <= 299:
        try:
            reason = json.loads(body).get("message", "")
        except ValueError:
            reason = body[:200].decode(errors="replace")
        raise ApiException(status=response.status, reason=reason)
    decoded: Json = json.loads(body)  # every call gpuplace makes answers a JSON object (a Status on a delete)
    return decoded


async def _found(call: Awaitable[Any]) -> Json | None:
    """A read's JSON body, None when the object is not there (404)."""
    try:
        return await _json(await call)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _segment(value: str) -> str:
    """A name as one path segment (kubernetes_asyncio quotes path parameters the same way)."""
    return urllib.parse.quote(value, safe="")


async def _outcome(response: Awaitable[Any], done: Outcome, errors: Mapping[int, Outcome]) -> Outcome:
    """`done` once the raw call succeeded, else what its error status means in `errors`; other errors raise."""
    try:
        await _json(await response)
    except ApiException as exc:
        if exc.status in errors:
            return errors[exc.status]
        raise
    return done


class KubeClusterApi:
    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.events = client.EventsV1Api(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self._device_class_read: Json | None = None  # the gpu.nvidia.com DeviceClass, once read
        self.reporting_instance = f"{REPORTING_CONTROLLER}-{socket.gethostname()}"[:128]  # client-go NewRecorder
        self._series: OrderedDict[tuple[str, ...], _Series] = OrderedDict()

    def _lister(self, kind: str) -> Callable[..., Awaitable[Any]]:
        """The raw list call of `kind`: "pods" (all namespaces), "nodes", "resourceclaims" (all namespaces) or
        "resourceslices"; a watch is the same call."""
        listers: dict[str, Callable[..., Awaitable[Any]]] = {
            "pods": self.core.list_pod_for_all_namespaces, "nodes": self.core.list_node,
            "resourceclaims": self.resource.list_resource_claim_for_all_namespaces,
            "resourceslices": self.resource.list_resource_slice}
        return listers[kind]

    async def list(self, kind: str, **selectors: str) -> tuple[list[Json], str]:
        """All pods or nodes, with the list's resourceVersion to start a watch from."""
        body = await _json(await self._lister(kind)(_preload_content=False, **selectors))
        return body.get("items") or [], body["metadata"]["resourceVersion"]

    async def watch(self, kind: str, resource_version: str, *, timeout_s: int = 300,
                    opened: Callable[[], None] | None = None, **selectors: str) -> AsyncIterator[Json]:
        """Raw watch events (type + object), bookmarks included; ApiException(410) when too old. `opened` is
        called once the apiserver accepted the watch (before any event: a quiet watch may send none for minutes)."""
        response = await self._lister(kind)(watch=True, allow_watch_bookmarks=True, resource_version=resource_version,
                                timeout_seconds=timeout_s, _preload_content=False, **selectors)
        if response.status != 200:
            await _json(response)  # raises with the server's reason
        if opened is not None:
            opened()
        try:
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise ApiException(status=status.get("code", 500), reason=status.get("message", "watch error"))
                yield event
        finally:
            response.release()

    async def version(self, *, timeout_s: float = 5.0) -> Json:
        """GET /version: the apiserver's build. Every authenticated identity may read it (and so may anonymous
        ones, where allowed), so it tests the credentials alone: rejected ones answer 401 (ApiException)."""
        return await _json(await client.VersionApi(self.api_client).get_code(_preload_content=False,
                                                                             _request_timeout=timeout_s))

    async def served_versions(self, group: str) -> set[str]:
        """The versions of API `group` this apiserver serves (discovery: GET /apis/GROUP); empty when none."""
        path = "/apis/{group}/"
        response = await self.api_client.call_api(path, "GET", path_params={"group": group},
                                                  header_params={"Accept": "application/json"},
                                                  auth_settings=["BearerToken"], _preload_content=False,
                                                  _return_http_data_only=True, _request_timeout=10)
        try:
            body = await _json(response)
        except ApiException as exc:
            if exc.status == 404:
                return set()
            raise
        return {str(v.get("version")) for v in body.get("versions") or () if v.get("version")}

    async def read_pod(self, namespace: str, name: str) -> Json | None:
        return await _found(self.core.read_namespaced_pod(name, namespace, _preload_content=False))

    async def node_capacity(self, name: str) -> NodeCapacity | None:
        node = await _found(self.core.read_node(name, _preload_content=False))
        if node is None:
            return None
        event = translate.node_event(node, cluster="apiserver", region="apiserver")  # the watcher's reading
        return NodeCapacity(event.cpu_milli, event.memory_mib, event.gpu_count, event.gpu_memory_mib)

    async def bind(self, namespace: str, name: str, uid: str, node: str, assignment: Json,
                   hami_request: Json | None = None, claim: Json | None = None) -> BindOutcome:
        """Bind the pod to `node` with its GPU assignment, in one call.

        The apiserver copies a Binding's annotations onto the pod in the same write that sets its node
        (k8s.io/kubernetes v1.34 pkg/registry/core/pod/storage/storage.go, BindingREST.setPodNodeAndMetadata), so
        the device plugin never sees the pod bound without its GPUs, and gpuplace needs no `patch pods`. The uid
        precondition binds the pod we decided for, not a namesake.

        A pod asking in HAMi's vocabulary (`hami_request`, its PodEvent.hami) bound to a node HAMi's device plugin
        registered also gets HAMi's scheduler annotations (adapters/kube/hami.py), read from the node as it is now;
        on a node without the registration it is bound as any pod, and the log says HAMi's device plugin, if
        there is one, will not serve it.

        A pod with a DRA `claim` (one of its PodEvent.dra_claims) has the claim allocated on these GPUs and
        reserved for it first (allocate_claim); a bind that does not bind it gives the claim back."""
        if claim is not None:
            await self.allocate_claim(namespace, name, uid, node, claim, assignment)
        annotations = {ASSIGNMENT: json.dumps(assignment, separators=(",", ":"))}
        if hami_request is not None:
            annotations.update(await self._hami_annotations(namespace, name, node, assignment, hami_request))
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": name, "uid": uid, "annotations": annotations},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        outcome: BindOutcome | None = None
        try:
            outcome = await _outcome(self._post_json(f"/api/v1/namespaces/{_segment(namespace)}/pods/"
                                                     f"{_segment(name)}/binding", binding),
                                     BindOutcome.BOUND, BIND_ERRORS)
        finally:
            if claim is not None and outcome is not BindOutcome.BOUND and not await self._bound_to(
                    namespace, name, uid, node):
                await self.release_claim(namespace, claim["name"], uid)
        assert outcome is not None
        return outcome

    async def _bound_to(self, namespace: str, name: str, uid: str, node: str) -> bool:
        """Whether the pod is bound to `node` (a 409 or a lost answer may hide our own successful bind)."""
        try:
            live = await self.read_pod(namespace, name)
        except Exception:  # noqa: BLE001 - unknown: keep the claim; the resourceclaim controller cleans up
            return True
        return live is not None and live["metadata"].get("uid") == uid and \
            (live.get("spec") or {}).get("nodeName") == node

    # -- DRA: the claim's allocation, written before the Binding (adapters/kube/dra.py) ----------------------
    async def allocate_claim(self, namespace: str, pod: str, pod_uid: str, node: str, claim: Json,
                             assignment: Json) -> None:
        """Allocate the pod's ResourceClaim on `node`'s GPUs of `assignment` and reserve it for the pod, as
        kube-scheduler's DRA plugin does before binding (dynamicresources.go bindClaim): the finalizer in an
        update, then allocation and reservedFor in one status update, each with the claim's resourceVersion as
        precondition, so a claim is never allocated twice. A claim allocated already on these GPUs and reserved
        for this pod (a retry after a crash) is accepted as it is; allocated otherwise, deleted, or replaced
        (another uid) raises ClaimConflict: the pod's reservation is released and it is decided again."""
        indices = [int(g["index"]) for g in assignment["gpus"]]
        # per GPU: the memory charged, which for a whole-GPU claim is the GPU's whole capacity (what it consumes)
        memory = max((int(g["memory_mib"]) for g in assignment["gpus"]), default=0)
        for _attempt in range(5):
            current = await self._read_claim(namespace, claim["name"])
            if current is None or current["metadata"].get("uid") != claim["uid"]:
                raise ClaimConflict(f"ResourceClaim {namespace}/{claim['name']} is gone or replaced")
            if current["metadata"].get("deletionTimestamp"):
                raise ClaimConflict(f"ResourceClaim {namespace}/{claim['name']} is being deleted")
            status = current.get("status") or {}
            reserved = dra.reserved_for(current)
            if status.get("allocation"):
                if not dra.same_devices(current, node, indices):
                    raise ClaimConflict(f"ResourceClaim {namespace}/{claim['name']} got allocated elsewhere")
                if pod_uid in reserved:
                    return
            try:
                if dra.FINALIZER not in (current["metadata"].get("finalizers") or []):
                    current = {**current, "metadata": {**current["metadata"], "finalizers": [
                        *(current["metadata"].get("finalizers") or []), dra.FINALIZER]}}
                    current = await self._replace_claim(namespace, claim["name"], current)
                status = dict(current.get("status") or {})
                if not status.get("allocation"):
                    whole = await self._device_class()
                    status["allocation"] = dra.allocation(current, node, indices, memory, whole)
                status["reservedFor"] = [*(status.get("reservedFor") or []), dra.pod_reference(pod, pod_uid)]
                await self._replace_claim(namespace, claim["name"], {**current, "status": status}, status=True)
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise
        raise ClaimConflict(f"ResourceClaim {namespace}/{claim['name']} kept changing under five updates")

    async def release_claim(self, namespace: str, name: str, pod_uid: str) -> None:
        """Undo allocate_claim after a failed bind, as kube-scheduler's Unreserve does: drop the pod from
        reservedFor and, when nobody else holds the claim, its allocation. Never raises (logged): the
        resourceclaim controller releases a claim whose pod is gone anyway."""
        try:
            for _attempt in range(5):
                current = await self._read_claim(namespace, name)
                if current is None or pod_uid not in dra.reserved_for(current):
                    return
                status = dict(current.get("status") or {})
                status["reservedFor"] = [r for r in status.get("reservedFor") or () if r.get("uid") != pod_uid]
                if not status["reservedFor"]:
                    status.pop("allocation", None)
                    status.pop("reservedFor")
                try:
                    await self._replace_claim(namespace, name, {**current, "status": status}, status=True)
                    return
                except ApiException as exc:
                    if exc.status != 409:
                        raise
        except Exception as exc:  # noqa: BLE001 - the controller deallocates it once the pod is gone
            log.warning("releasing ResourceClaim %s/%s failed: %s", namespace, name, exc)

    async def _read_claim(self, namespace: str, name: str) -> Json | None:
        return await _found(self.resource.read_namespaced_resource_claim(name, namespace, _preload_content=False))

    async def _replace_claim(self, namespace: str, name: str, body: Json, *, status: bool = False) -> Json:
        """A PUT of a claim (or, with `status`, of its /status): the body's metadata.resourceVersion is the
        precondition."""
        replace = self.resource.replace_namespaced_resource_claim_status if status else \
            self.resource.replace_namespaced_resource_claim
        raw: Any = body  # the client serialises a dict as it is; its stubs want a V1ResourceClaim
        return await _json(await replace(name, namespace, raw, _preload_content=False))

    async def _device_class(self) -> Json | None:
        """The gpu.nvidia.com DeviceClass (its config goes into each allocation), read once; None if absent (and
        read again next time)."""
        if self._device_class_read is None:
            self._device_class_read = await _found(self.resource.read_device_class(dra.DEVICE_CLASS,
                                                                                   _preload_content=False))
        return self._device_class_read

    async def _hami_annotations(self, namespace: str, name: str, node: str, assignment: Json,
                                request: Json) -> dict[str, str]:
        """HAMi's scheduler annotations for the GPUs in `assignment`, or none when `node` has no HAMi registration.
        A registration that does not decode, or no longer has a chosen GPU, raises: the bind fails, the
        reservation is released and the pod is placed again (on what the node registers then)."""
        # a list by name, not a get: gpuplace's ClusterRole has nodes list/watch only (deploy/k8s/rbac.yaml)
        items = (await self.list("nodes", field_selector=f"metadata.name={node}"))[0]
        annotations = ((items[0].get("metadata") or {}).get("annotations") or {}) if items else {}
        devices = hami.registered_devices(annotations)
        if devices is None:
            log.warning("%s/%s asks for GPUs in HAMi's vocabulary but node %s has no %s: bound without HAMi's "
                        "annotations, so HAMi's device plugin (if it runs there) will not find it", namespace, name,
                        node, hami.REGISTER)
            return {}
        indices = [g["index"] for g in assignment.get("gpus") or ()]
        return hami.bind_annotations(request, devices, indices, node, int(time.time()))

    async def evict(self, namespace: str, name: str, uid: str | None = None) -> EvictOutcome:
        """Evict through pods/eviction so PodDisruptionBudgets hold."""
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)) if uid else None
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace),
                                     delete_options=options)
        return await _outcome(self.core.create_namespaced_pod_eviction(name, namespace, eviction,
                                                                       _preload_content=False),
                              EvictOutcome.EVICTED, EVICT_ERRORS)

    # -- feedback, as kube-scheduler gives it --------------------------------------------------------------
    async def report_unschedulable(self, namespace: str, name: str, uid: str, message: str) -> None:
        """PodScheduled=False/Unschedulable with `message` on the pod and a FailedScheduling Event, as
        kube-scheduler's handleSchedulingFailure does (pkg/scheduler/schedule_one.go: the Event's note truncated
        to 1 KiB; the condition's message whole, here up to CONDITION_MESSAGE_LIMIT_BYTES). Nothing when the pod
        is gone, a namesake, or bound meanwhile: that news is stale. Never raises."""
        try:
            current = await self._mark_unschedulable(namespace, name, uid, message)
        except Exception as exc:  # noqa: BLE001 - feedback must never fail placement
            log.warning("PodScheduled=False on %s/%s failed: %s", namespace, name, exc)
            current = True
        if current:
            await self._event(namespace, name, uid, "Warning", "FailedScheduling", "Scheduling", message)

    async def report_scheduled(self, namespace: str, name: str, uid: str, node: str, gpus_text: str) -> None:
        """A Scheduled Event, kube-scheduler's note ("Successfully assigned ns/pod to node") followed by the GPUs.

        No condition patch: kube-apiserver sets PodScheduled=True itself when it stores the binding
        (pkg/registry/core/pod/storage/storage.go, BindingREST.setPodHostAndAnnotations; checked on the local
        stack by tests/integration/test_scheduling_feedback.py). Never raises."""
        note = f"Successfully assigned {namespace}/{name} to {node}" + (f" {gpus_text}" if gpus_text else "")
        await self._event(namespace, name, uid, "Normal", "Scheduled", "Binding", note)

    async def report_warning(self, namespace: str, name: str, uid: str, reason: str, note: str) -> None:
        """A Warning Event (events.k8s.io/v1, aggregated as the others) with `reason` and `note`. Never raises."""
        await self._event(namespace, name, uid, "Warning", reason, "Binding", note)

    async def _mark_unschedulable(self, namespace: str, name: str, uid: str, message: str) -> bool:
        """Patch pods/status (strategic merge: conditions merge by type) unless it already says so; False when
        the pod is no longer the waiting pod we decided for. The resourceVersion read rides along as a
        precondition, so a bind landing in between turns the patch into a 409 and a re-read, never into
        PodScheduled=False on a bound pod."""
        for _attempt in range(3):
            pod = await self.read_pod(namespace, name)
            if pod is None or pod["metadata"].get("uid") != uid or (pod.get("spec") or {}).get("nodeName"):
                return False
            condition = pod_scheduled_condition(pod, "False", "Unschedulable",
                                                _truncate(message, CONDITION_MESSAGE_LIMIT_BYTES), datetime.now(UTC))
            if condition is None:
                return True
            patch = {"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]},
                     "status": {"conditions": [condition]}}
            try:
                await _json(await self.core.patch_namespaced_pod_status(
                    name, namespace, patch, _preload_content=False, _request_timeout=FEEDBACK_TIMEOUT_S))
                return True
            except ApiException as exc:
                if exc.status != 409:
                    raise
        return True

    async def _event(self, namespace: str, name: str, uid: str, type_: str, reason: str, action: str,
                     note: str) -> None:
        """Record an events.k8s.io/v1 Event about the pod, aggregated as client-go's events broadcaster does
        (tools/events/event_broadcaster.go, recordToSink / recordEvent / finishSeries): the first occurrence
        creates the Event; a repeat within SERIES_WINDOW_S of the last one patches its `series` (count 2 on the
        first repeat, then +1; lastObservedTime now) instead of creating another; a series patch that finds the
        Event gone (404) creates it whole. Unlike client-go's eventKey, the note is part of the key: a changed
        reason is a new Event, not a higher count under the old text. Never raises."""
        note = _truncate(note, NOTE_LIMIT_BYTES)
        key = (namespace, name, uid, type_, reason, action, note)
        now = time.time()
        series = self._series.get(key)
        if series is None or now - series.last_observed_s > SERIES_WINDOW_S:
            event_name = f"{name}.{time.time_ns():x}"  # client-go GenerateEventName, a uuid when too long
            series = _Series(event_name if len(event_name) <= 253 else str(uuid.uuid4()), now, now)
            self._series[key] = series
        else:
            series.count, series.last_observed_s = series.count + 1, now
        self._series.move_to_end(key)
        while len(self._series) > EVENT_CACHE_SIZE:
            self._series.popitem(last=False)
        event = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": series.name, "namespace": namespace},
            "eventTime": _micro_time(series.first_s), "type": type_, "reason": reason, "action": action,
            "note": note, "reportingController": REPORTING_CONTROLLER, "reportingInstance": self.reporting_instance,
            "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid},
        }
        try:
            await self._record_event(event, series)
        except Exception as exc:  # noqa: BLE001 - feedback must never fail placement
            log.warning("%s Event for %s/%s failed: %s", reason, namespace, name, exc)

    async def _record_event(self, event: Json, series: _Series) -> None:
        namespace, timeout = event["metadata"]["namespace"], FEEDBACK_TIMEOUT_S
        if series.count > 1:
            event["series"] = {"count": series.count, "lastObservedTime": _micro_time(series.last_observed_s)}
            try:
                await _json(await self.events.patch_namespaced_event(
                    series.name, namespace, {"series": event["series"]}, _preload_content=False,
                    _request_timeout=timeout))
                return
            except ApiException as exc:
                if exc.status != 404:  # client-go IsKeyNotFoundError: the Event expired or was deleted
                    raise
        await _json(await self._post_json(f"/apis/events.k8s.io/v1/namespaces/{_segment(namespace)}/events", event,
                                          timeout_s=timeout))

    async def _post_json(self, path: str, body: Json, *, timeout_s: float | None = None) -> aiohttp.ClientResponse:
        """POST `body` as JSON on the client's own session (its TLS, proxy and credentials, as its generated calls
        send them) and return the raw response, for _json or _outcome to read.

        The two calls placement makes per pod, its Binding and its Scheduled Event, go this way: a generated call
        builds models and walks the client's parameter machinery, about 100 us of CPU a call more than the request
        itself (300 -> 230-280 us an Event, medians of three rounds of 400 on the local stack). Other calls are
        rare and keep the generated API."""
        api = self.api_client
        headers = {**api.default_headers, "Accept": "application/json", "Content-Type": "application/json"}
        await api.update_params_for_auth(headers, [], ["BearerToken"])
        rest = api.rest_client
        extra: dict[str, Any] = {"proxy": rest.proxy, "proxy_headers": rest.proxy_headers} if rest.proxy else {}
        if rest.server_hostname:
            extra["server_hostname"] = rest.server_hostname
        response: aiohttp.ClientResponse = await rest.pool_manager.post(
            f"{api.configuration.host}{path}", data=json.dumps(body, separators=(",", ":")), headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout_s), **extra)
        return response


@dataclass
class _Series:
    """What this process remembers of one Event it created: enough to patch its series."""

    name: str
    first_s: float
    last_observed_s: float
    count: int = 1


def pod_scheduled_condition(pod: Json, status: str, reason: str, message: str, now: datetime) -> Json | None:
    """The PodScheduled condition to write, or None when the pod already has exactly it.

    kube's podutil.UpdatePodCondition (pkg/api/v1/pod/util.go): lastTransitionTime changes only when the
    status flips (or the condition is new); nothing is written when status, reason and message are unchanged."""
    old = next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"),
               None)
    if old is not None and (old.get("status"), old.get("reason"), old.get("message")) == (status, reason, message):
        return None
    kept = old.get("lastTransitionTime") if old is not None and old.get("status") == status else None
    return {"type": "PodScheduled", "status": status, "reason": reason, "message": message,
            "lastProbeTime": None, "lastTransitionTime": kept or now.strftime("%Y-%m-%dT%H:%M:%SZ")}


def _micro_time(epoch_s: float) -> str:
    """metav1.MicroTime as the apiserver writes it (RFC 3339, microseconds)."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _truncate(text: str, limit_bytes: int) -> str:
    """kube-scheduler's truncateMessage: at most `limit_bytes` of UTF-8, ending " ..." when cut."""
    raw = text.encode()
    if len(raw) <= limit_bytes:
        return text
    return raw[:limit_bytes - 4].decode(errors="ignore") + " ..."


__all__ = ["KubeClusterApi", "ClaimConflict",
           "BIND_ERRORS", "EVICT_ERRORS", "connect", "env_proxy", "raw_json", "pod_scheduled_condition"]

raw_json = _json
