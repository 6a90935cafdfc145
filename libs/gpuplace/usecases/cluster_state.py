"""What a placement worker holds of one cluster between events, beside the database: its in-memory view, the
queue of pods that fit nowhere yet, the binds in flight and their outcomes not yet recorded.

One ClusterState per cluster the worker owns (usecases/clusters.py); everything that reads or changes it holds
the cluster (Clusters.held), except the bind calls themselves (usecases/binder.py), which run outside it so a
slow apiserver never stalls decisions.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

from gpuplace.core.model import Pod
from gpuplace.usecases.cluster_view import ClusterView, Placement
from gpuplace.usecases.ports import NodeCapacity, PodRow

RECENT_PODS = 2_000  # the pods decided last in a cluster: the typical workload its stranded GPU is measured against


@dataclass(frozen=True)
class BindOutcomeToRecord:
    """A bind's outcome waiting to be recorded with others in one transaction (Binder._record)."""

    row: PodRow
    hold: Placement
    outcome: str  # a BindOutcome's value, or "error"
    recorded: asyncio.Future[None]  # set once the outcome is committed (or its recording failed)


@dataclass
class ClusterState:
    view: ClusterView
    waiting: dict[str, PodRow] = field(default_factory=dict)  # uid -> pod row, pods that fit nowhere yet
    last_reasons: dict[str, dict[str, str]] = field(default_factory=dict)
    loaded: bool = False  # read from the database and resumed; until then every caller tries again
    stale: bool = False  # the database changed under the view (a node, another scheduler's pod): re-read first
    awaiting_nodes: set[str] = field(default_factory=set)  # nodes pods were bound to before placement knew them
    retry: asyncio.Task[None] | None = None  # the retry of waiting pods after a burst of node events
    changed_nodes: set[str] = field(default_factory=set)  # nodes changed since that retry last looked
    binding: set[str] = field(default_factory=set)  # uids whose bind call is in flight
    recent: OrderedDict[str, Pod] = field(default_factory=OrderedDict)  # uid -> pod, the arriving workload M
    outcomes: list[BindOutcomeToRecord] = field(default_factory=list)  # bind outcomes not recorded yet
    flusher: asyncio.Task[None] | None = None  # records `outcomes`, a batch at a time
    recorded_bound: dict[str, str] = field(default_factory=dict)  # uid -> node: pods this worker recorded bound
    attempts: int = 0  # decisions made in this cluster by this worker (a decision's provenance)
    last_pod_event: str | None = None  # the last pods.v1 / nodes.v1 event applied here (provenance)
    last_node_event: str | None = None
    model_read_at: float = float("-inf")  # time.monotonic() when the latency model was last read into the view
    # what placement holds each node's capacity to be (NodeEvent's units): kept as node events are applied and set
    # from the rows at each re-read, so a node event raising it is checked before the view is re-read
    capacities: dict[str, NodeCapacity] = field(default_factory=dict)
    planned: set[str] = field(default_factory=set)  # pods a defragmentation plan in flight holds (PlanStarted)

    def remember(self, uid: str, pod: Pod) -> None:
        """Count a pod once in the cluster's recent workload, however often it is tried, dropping the oldest."""
        if uid not in self.recent:
            self.recent[uid] = pod
            if len(self.recent) > RECENT_PODS:
                self.recent.popitem(last=False)


__all__ = ["BindOutcomeToRecord", "ClusterState"]
