"""Filters: each module answers "may this pod go on this node?" for every node at once.

Each exports `NAME`, `mask(snapshot, demand) -> bool array (n_nodes,)` for the hot path, and
`status(snapshot, demand, node) -> Status` with the reason, for `explain` and unschedulable events.
"""

from gpuplace.core.filters import gpu_fit, gpu_model, resources_fit

FILTERS = (resources_fit, gpu_model, gpu_fit)
"""The standard filter chain, in the order reasons are reported."""

__all__ = ["FILTERS", "gpu_fit", "gpu_model", "latency_fit", "resources_fit"]
