"""Filters: each module answers "may this pod go on this node?" for every node at once.

Each exports `NAME` and `verdict(state: CycleState) -> Verdict` (framework/verdicts.py): the pass mask over all
nodes and, from the same arrays, the reasons of the nodes that fail, built only when a diagnosis is read.
`mask(snapshot, demand)` and `status(snapshot, demand, node)` are the verdict's two halves for callers outside a
decision (the defragmenter, tests). The latency filter (latency_fit) is not in the chain: it needs the GPUs'
co-runners, and policies/latency_aware.py adds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from gpuplace.core.filters import gpu_fit, gpu_model, gpu_topology, node_rules, resources_fit

if TYPE_CHECKING:
    from gpuplace.core.arrays import BoolArray
    from gpuplace.core.demand import Demand
    from gpuplace.core.framework.interface import Status
    from gpuplace.core.framework.verdicts import CycleState, Verdict
    from gpuplace.core.snapshot import ClusterSnapshot


class Filter(Protocol):
    """What a filter module provides (the modules satisfy it as they are: a module is an object too)."""

    NAME: str

    def verdict(self, state: CycleState) -> Verdict: ...

    def mask(self, snapshot: ClusterSnapshot, demand: Demand) -> BoolArray: ...

    def status(self, snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status: ...


FILTERS: tuple[Filter, ...] = (node_rules, resources_fit, gpu_model, gpu_fit, gpu_topology)
"""The standard filter chain, in the order reasons are reported (kube-scheduler's: the node's rules first)."""

__all__ = ["FILTERS", "Filter", "gpu_fit", "gpu_model", "gpu_topology", "latency_fit", "latency_room", "node_rules",
           "resources_fit"]
