"""Filters: each module answers "may this pod go on this node?" for every node at once.

Each exports `NAME`, `mask(snapshot, demand) -> bool array (n_nodes,)` for the hot path, and
`status(snapshot, demand, node) -> Status` with the reason, for `explain` and unschedulable events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from gpuplace.core.filters import gpu_fit, gpu_model, gpu_topology, node_rules, resources_fit

if TYPE_CHECKING:
    from gpuplace.core.arrays import BoolArray
    from gpuplace.core.demand import Demand
    from gpuplace.core.framework.interface import Status
    from gpuplace.core.snapshot import ClusterSnapshot


class Filter(Protocol):
    """What a filter module provides (the modules satisfy it as they are: a module is an object too)."""

    NAME: str

    def mask(self, snapshot: ClusterSnapshot, demand: Demand) -> BoolArray: ...

    def status(self, snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status: ...


FILTERS: tuple[Filter, ...] = (node_rules, resources_fit, gpu_model, gpu_fit, gpu_topology)
"""The standard filter chain, in the order reasons are reported (kube-scheduler's: the node's rules first)."""

__all__ = ["FILTERS", "Filter", "gpu_fit", "gpu_model", "gpu_topology", "latency_fit", "node_rules", "resources_fit"]
