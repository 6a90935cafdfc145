"""ApiHealth: each watch's state as list_and_watch reports it, what a 401/403/404 means, and discovery's answer."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.kube import discovery
from gpuplace.adapters.kube.api_health import ApiHealth, ApiNotReady, failure_of
from gpuplace.adapters.kube.informer import list_and_watch


class Api:
    """Lists, watches, /version and discovery answered from a script, as the apiserver would."""

    def __init__(self, lists=(), watches=(), version_error=None, versions=None):
        self.lists, self.watches = list(lists), list(watches)
        self.version_error, self.versions = version_error, versions

    async def list(self, kind, **selectors):
        item = self.lists.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    async def watch(self, kind, resource_version, *, timeout_s, opened=None, **selectors):
        events = self.watches.pop(0)
        if isinstance(events, Exception):
            raise events
        if opened is not None:
            opened()
        for event in events:
            yield event

    async def version(self):
        if self.version_error is not None:
            raise self.version_error
        return {"gitVersion": "v1.37.2"}

    async def served_versions(self, group):
        item = self.versions.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


def test_each_status_says_what_it_means():
    assert failure_of(ApiException(status=401, reason="Unauthorized"))[0] == "unauthorized"
    assert "expired or was revoked" in failure_of(ApiException(status=401, reason="Unauthorized"))[1]
    reason, meaning = failure_of(ApiException(status=403, reason='pods is forbidden: User "x" cannot list'))
    assert reason == "forbidden" and "RBAC" in meaning and "cannot list" in meaning
    assert failure_of(ApiException(status=404, reason="Not Found"))[0] == "not_served"
    assert failure_of(ApiException(status=500, reason="boom")) == ("error", "HTTP 500: boom")
    assert failure_of(ConnectionRefusedError(111, "refused"))[0] == "unreachable"


async def test_a_watch_failing_with_401_is_reported_then_streams_again_once_it_opens():
    reported = []
    health = ApiHealth("east", report=lambda *failure: reported.append(failure))
    stop = asyncio.Event()
    api = Api(lists=[([], "5")], watches=[ApiException(status=401, reason="Unauthorized"),
                                          [{"type": "ADDED", "object": {"metadata": {"name": "a",
                                                                                     "resourceVersion": "6"}}}]])
    stream = list_and_watch(api, "pods", stop=stop, health=health, max_backoff_s=0.01)
    assert health.problems() == []  # nothing runs before the stream is read
    seen = []
    async for kind, _obj in stream:
        seen.append(kind)
        if kind == "ADDED":
            assert health.problems() == []  # the watch opened again: streaming
            stop.set()
    assert seen == ["ADDED"]
    assert reported == [("east", "pods", "unauthorized")]
    assert health.problems() == []  # ended with its stream


async def test_readiness_names_the_cluster_and_the_cause():
    health = ApiHealth("east")
    health.listing("nodes")
    with pytest.raises(ApiNotReady, match="apiserver of cluster east: nodes watch not listed yet"):
        await health.check(Api())
    health.streaming("nodes")
    await health.check(Api())  # listed and streaming, credentials accepted: ready
    health.failed("nodes", ApiException(status=403, reason="nodes is forbidden"))
    with pytest.raises(ApiNotReady, match=r"cluster east: nodes watch failing: forbidden \(403\)"):
        await health.check(Api())
    health.failed("pods", ApiException(status=403, reason="pods is forbidden"))
    assert health.problems() == ["nodes, pods watches failing: forbidden (403): the identity's RBAC does not allow "
                                 "it (deploy/k8s/rbac.yaml)"]  # one line per cause; the apiserver's words in the log
    reported = []
    health = ApiHealth("west", report=lambda *failure: reported.append(failure))
    with pytest.raises(ApiNotReady, match=r"apiserver of cluster west: credentials rejected \(401\)"):
        await health.check(Api(version_error=ApiException(status=401, reason="Unauthorized")))
    assert reported == [("west", "credentials", "unauthorized")]


async def test_a_404_raises_for_the_caller_to_discover_again_when_asked_to():
    health = ApiHealth("east")
    api = Api(lists=[ApiException(status=404, reason="the server could not find the requested resource")])
    with pytest.raises(ApiException):
        async for _ in list_and_watch(api, "resourceslices", stop=asyncio.Event(), health=health, not_served=True):
            pass


async def test_discovery_turns_dra_off_with_a_note_and_retries_a_rejected_request():
    health = ApiHealth("east")
    stop = asyncio.Event()
    api = Api(versions=[ApiException(status=401, reason="Unauthorized"), {"v1beta1"}, {"v1", "v1beta2"}])
    served = await discovery.discover(api, health, dra_wanted=True, stop=stop, max_backoff_s=0.01)
    assert served == discovery.ServedApis(dra=False)
    assert health.notes[discovery.DRA_API].startswith(
        "DRA off in cluster east: its apiserver serves no resource.k8s.io/v1 (it serves v1beta1 of resource.k8s.io")
    assert health.problems() == []  # the failed try is forgotten once discovery answered
    assert await discovery.discover(api, health, dra_wanted=True, stop=stop) == discovery.ServedApis(dra=True)
    assert discovery.DRA_API not in health.notes
    assert await discovery.discover(api, health, dra_wanted=False, stop=stop) == discovery.ServedApis(dra=False)
