"""The Kubernetes API as gpuplace uses it: list/watch, annotate + bind, evict, read a pod.

Responses are read as raw JSON (`_preload_content=False`): it is several times faster than the client's
model deserialisation at fleet scale, and it sidesteps the client's Binding bug (the server answers a
binding with a Status, which the client fails to parse as V1Binding after the bind has succeeded;
kubernetes/kubernetes#80663).

Outcomes a caller must act on are values, not exceptions: a 409 on bind means someone else bound the pod
(reconcile, never retry blindly), a 429 on eviction is a PodDisruptionBudget refusal to respect.
"""

from __future__ import annotations

import enum
import json
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.kube.vocabulary import ASSIGNMENT

Json = dict[str, Any]


class BindOutcome(enum.Enum):
    BOUND = "bound"
    CONFLICT = "conflict"  # already bound (by us earlier, or by someone else): reconcile
    GONE = "gone"  # the pod no longer exists, or is another pod with the same name


class EvictOutcome(enum.Enum):
    EVICTED = "evicted"
    REFUSED = "refused"  # 429: a PodDisruptionBudget does not allow it now
    GONE = "gone"


async def connect(kubeconfig: str) -> client.ApiClient:
    """An API client for one cluster; the caller closes it."""
    configuration = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return client.ApiClient(configuration)


async def _json(response: Any) -> Json:
    """The body of a raw response; an error status raises ApiException as the preloading client would.

    With `_preload_content=False` the client returns 4xx/5xx responses instead of raising, so every raw
    call in gpuplace goes through here.
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
    return json.loads(body)


class KubeClusterApi:
    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)

    async def list(self, kind: str, **selectors: str) -> tuple[list[Json], str]:
        """All pods or nodes, with the list's resourceVersion to start a watch from."""
        lister = self.core.list_pod_for_all_namespaces if kind == "pods" else self.core.list_node
        body = await _json(await lister(_preload_content=False, **selectors))
        return body.get("items") or [], body["metadata"]["resourceVersion"]

    async def watch(self, kind: str, resource_version: str, *, timeout_s: int = 300,
                    **selectors: str) -> AsyncIterator[Json]:
        """Raw watch events (type + object), bookmarks included; ApiException(410) when too old."""
        lister = self.core.list_pod_for_all_namespaces if kind == "pods" else self.core.list_node
        response = await lister(watch=True, allow_watch_bookmarks=True, resource_version=resource_version,
                                timeout_seconds=timeout_s, _preload_content=False, **selectors)
        if response.status != 200:
            await _json(response)  # raises with the server's reason
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

    async def read_pod(self, namespace: str, name: str) -> Json | None:
        try:
            return await _json(await self.core.read_namespaced_pod(name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def bind(self, namespace: str, name: str, uid: str, node: str, assignment: Json) -> BindOutcome:
        """Write the GPU assignment on the pod (for the device plugin), then bind it to `node`."""
        patch = {"metadata": {"annotations": {ASSIGNMENT: json.dumps(assignment, separators=(",", ":"))}}}
        try:
            # The uid precondition makes sure we annotate the pod we decided for, not a namesake.
            patch["metadata"]["uid"] = uid
            await _json(await self.core.patch_namespaced_pod(name, namespace, patch, _preload_content=False))
            binding = client.V1Binding(
                metadata=client.V1ObjectMeta(name=name, uid=uid),
                target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
            )
            await _json(await self.core.create_namespaced_pod_binding(name, namespace, binding,
                                                                      _preload_content=False))
            return BindOutcome.BOUND
        except ApiException as exc:
            if exc.status == 409:
                return BindOutcome.CONFLICT
            if exc.status in (404, 410):
                return BindOutcome.GONE
            raise

    async def evict(self, namespace: str, name: str, uid: str | None = None) -> EvictOutcome:
        """Evict through pods/eviction so PodDisruptionBudgets hold."""
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)) if uid else None
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace),
                                     delete_options=options)
        try:
            await _json(await self.core.create_namespaced_pod_eviction(name, namespace, eviction,
                                                                       _preload_content=False))
            return EvictOutcome.EVICTED
        except ApiException as exc:
            if exc.status == 429:
                return EvictOutcome.REFUSED
            if exc.status in (404, 409):
                return EvictOutcome.GONE
            raise


__all__ = ["KubeClusterApi", "BindOutcome", "EvictOutcome", "connect", "raw_json"]

raw_json = _json
