"""list_and_watch re-lists after 410 Gone and resumes from the last resourceVersion otherwise."""

import asyncio

from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.kube.informer import list_and_watch


class ScriptedApi:
    """Lists and watch streams played from a script, as the apiserver would answer them."""

    def __init__(self, lists, watches):
        self.lists, self.watches, self.watched_from = list(lists), list(watches), []

    async def list(self, kind, **selectors):
        return self.lists.pop(0)

    async def watch(self, kind, resource_version, *, timeout_s, **selectors):
        self.watched_from.append(resource_version)
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item


def _obj(name, rv):
    return {"metadata": {"name": name, "resourceVersion": rv}}


async def test_relist_after_410_and_resume_after_a_timeout():
    api = ScriptedApi(
        lists=[([_obj("a", "1")], "10"), ([_obj("a", "1"), _obj("b", "30")], "30")],
        watches=[
            [{"type": "ADDED", "object": _obj("b", "11")},
             {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}}],  # then a normal timeout
            [ApiException(status=410, reason="too old")],  # compacted away: re-list
            [{"type": "DELETED", "object": _obj("a", "31")}],
        ],
    )
    stop = asyncio.Event()
    seen = []
    async for kind, obj in list_and_watch(api, "pods", stop=stop):
        seen.append((kind, obj["metadata"]["name"]))
        if kind == "DELETED":
            stop.set()
    assert seen == [("SYNC", "a"), ("ADDED", "b"), ("SYNC", "a"), ("SYNC", "b"), ("DELETED", "a")]
    assert api.watched_from == ["10", "12", "30"]  # resumed from the bookmark, then from the new list


async def test_a_synced_marker_follows_each_whole_list():
    api = ScriptedApi(lists=[([], "5"), ([_obj("a", "7")], "7")],
                      watches=[[ApiException(status=410, reason="too old")],
                               [{"type": "ADDED", "object": _obj("b", "8")}]])
    stop = asyncio.Event()
    seen = []
    async for kind, obj in list_and_watch(api, "resourceslices", stop=stop, synced_marker=True):
        seen.append((kind, obj.get("metadata", {}).get("name")))
        if kind == "ADDED":
            stop.set()
    # an empty list is synced too: a consumer waiting for it must not wait for an object that never comes
    assert seen == [("SYNCED", None), ("SYNC", "a"), ("SYNCED", None), ("ADDED", "b")]
