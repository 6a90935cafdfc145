"""The filter chain, GPU choice and explanation a policy gets unless it says otherwise.

Every paper policy filters the same way (CPU and memory, GPU model, GPUs with room) and, except FGD
and Random, picks GPUs by best fit; they differ only in how they score nodes. Subclasses set `name`
and implement `score`.
"""

from __future__ import annotations

from dataclasses import replace

from gpuplace.core import gpu_selection
from gpuplace.core.arrays import BoolArray
from gpuplace.core.demand import Demand
from gpuplace.core.filters import FILTERS
from gpuplace.core.framework.interface import SUCCESS, PolicyContext, Status
from gpuplace.core.snapshot import ClusterSnapshot


class DefaultSteps:
    name = "default"

    def __init__(self, context: PolicyContext | None = None) -> None:
        """The registry hands every policy its context; a policy that needs nothing from it keeps this."""
        del context

    def filter(self, snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
        feasible = FILTERS[0].mask(snapshot, demand)
        for plugin in FILTERS[1:]:
            feasible &= plugin.mask(snapshot, demand)
        return feasible

    def choose_gpus(self, snapshot: ClusterSnapshot, demand: Demand, node: int) -> tuple[int, ...]:
        return gpu_selection.best_fit(snapshot, demand, node)

    def explain(self, snapshot: ClusterSnapshot, demand: Demand, node: int) -> Status:
        """Why the pod may not go on `node`: the first failing filter's status, named for it, or SUCCESS."""
        for plugin in FILTERS:
            status = plugin.status(snapshot, demand, node)
            if not status.ok:
                return status if status.plugin else replace(status, plugin=plugin.NAME)
        return SUCCESS


__all__ = ["DefaultSteps"]
