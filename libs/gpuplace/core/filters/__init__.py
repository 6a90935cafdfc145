"""Filters: each module answers "may this pod go on this node?" for every node at once.

Each exports `NAME`, `mask(snapshot, demand) -> bool array (n_nodes,)` for the hot path, and
`status(snapshot, demand, node) -> Status` with the reason, for `explain` and unschedulable events.
"""

from gpuplace.core.filters import gpu_fit, gpu_model, node_rules, resources_fit

FILTERS = (node_rules, resources_fit, gpu_model, gpu_fit)
"""The standard filter chain, in the order reasons are reported (kube-scheduler's: the node's rules first)."""

__all__ = ["FILTERS", "gpu_fit", "gpu_model", "latency_fit", "node_rules", "resources_fit"]
