"""The filter chain, GPU choice and explanation a policy gets unless it says otherwise.

Every paper policy filters the same way (node rules, CPU and memory, GPU model, GPUs with room) and, except FGD
and Random, picks GPUs by best fit; they differ only in how they score nodes. Subclasses set `name`
and implement `score`; a policy with a filter of its own extends `verdicts` (exclusive.py), never `filter`,
so that where a pod may go and why it may not come from one computation (framework/verdicts.py).
"""

from __future__ import annotations

from gpuplace.core import gpu_selection
from gpuplace.core.arrays import BoolArray
from gpuplace.core.demand import Demand
from gpuplace.core.filters import FILTERS
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.framework.verdicts import CycleState, Verdict, feasible
from gpuplace.core.snapshot import ClusterSnapshot


class DefaultSteps:
    name = "default"

    def __init__(self, context: PolicyContext | None = None) -> None:
        """The registry hands every policy its context; a policy that needs nothing from it keeps this."""
        del context

    def verdicts(self, state: CycleState) -> list[Verdict]:
        """The standard chain's verdicts for this decision, in the order reasons are reported."""
        return [plugin.verdict(state) for plugin in FILTERS]

    def filter(self, snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
        return feasible(self.verdicts(CycleState(snapshot, demand)))

    def choose_gpus(self, snapshot: ClusterSnapshot, demand: Demand, node: int) -> tuple[int, ...]:
        return gpu_selection.best_fit(snapshot, demand, node)


__all__ = ["DefaultSteps"]
