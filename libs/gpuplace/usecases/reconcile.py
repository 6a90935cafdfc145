"""Find where the fleet state in PostgreSQL and an apiserver disagree: what the event stream missed.

Events can be missed. A pod deleted while cluster-watcher is down is never sent as `deleted` (the re-list at
its restart sends what exists, not what went away), so its GPUs would stay charged for good; a pod bound while
its `bound` event was lost runs uncharged. Like a controller's periodic resync (client-go's informer
`resyncPeriod`, kube-scheduler's cache that re-lists on start), placement compares, when it takes a cluster and
every `GPUPLACE_RECONCILE_INTERVAL_S`, the pods PostgreSQL tracks with the pods the apiserver lists
(PlacementService.reconcile applies the result):

- gone: a tracked pod the list lacks, or lists finished, *and* that a GET by name confirms gone (absent, a
  namesake with another uid, or finished). The GET closes the race with a pod created after the list began:
  it is in the database but not in the list, and the GET finds it;
- bound elsewhere: a pod the apiserver shows on a node while the database has it waiting, or on another node.

Pods `reserved` are left to their bind, which records its own outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuplace.usecases.pod_states import WAITING, PodState
from gpuplace.usecases.ports import Json, PodReader, PodRow

FINISHED = ("Succeeded", "Failed")  # phases whose pods hold nothing (cluster-watcher sends them as deleted)


@dataclass(frozen=True)
class Drift:
    gone: tuple[PodRow, ...] = ()
    bound_elsewhere: tuple[tuple[PodRow, str], ...] = ()  # (row, the node the apiserver has it on)

    def __bool__(self) -> bool:
        return bool(self.gone or self.bound_elsewhere)

    def summary(self) -> str:
        return f"{len(self.gone)} pod(s) gone, {len(self.bound_elsewhere)} bound elsewhere"


async def find_drift(api: PodReader, rows: Sequence[PodRow]) -> Drift:
    """Compare `rows` (pods the database tracks, pod_states.TRACKED) with the apiserver's pods.

    Without rows there is nothing to drift, and the list (every pod of the cluster) is not read: a worker taking
    a new cluster during a burst would otherwise spend seconds decoding it."""
    if not rows:
        return Drift()
    items, _ = await api.list("pods")
    live = {pod["metadata"]["uid"]: pod for pod in items if pod.get("metadata", {}).get("uid")}
    gone: list[PodRow] = []
    moved: list[tuple[PodRow, str]] = []
    for row in rows:
        pod = live.get(row["uid"])
        if pod is None or _finished(pod):
            if await confirmed_gone(api, row["namespace"], row["name"], row["uid"]):
                gone.append(row)
            continue
        node = (pod.get("spec") or {}).get("nodeName")
        waiting = row["state"] in WAITING
        if node and (waiting or (row["state"] == PodState.BOUND and row["node"] != node)):
            moved.append((row, node))
    return Drift(tuple(gone), tuple(moved))


async def confirmed_gone(api: PodReader, namespace: str, name: str, uid: str) -> bool:
    """Whether the apiserver says pod `uid` holds nothing any more: absent, replaced by a namesake, or finished."""
    pod = await api.read_pod(namespace, name)
    if pod is None:
        return True
    live_uid = (pod.get("metadata") or {}).get("uid")
    return (live_uid is not None and live_uid != uid) or _finished(pod)


def _finished(pod: Json) -> bool:
    return (pod.get("status") or {}).get("phase") in FINISHED


__all__ = ["Drift", "find_drift", "confirmed_gone"]
