"""The one interface every placement policy implements (kube-scheduler's filter/score shape).

A policy is a small object built by a factory from a `PolicyContext`:
- `filter(snapshot, demand)` -> bool mask over nodes: where the pod may go at all;
- `score(snapshot, demand, candidates)` -> one number per candidate row, higher is better;
- `choose_gpus(snapshot, demand, node)` -> the GPU indices the pod takes on the chosen node.
The runtime (runtime.py) picks the highest score and, on a tie, the first candidate in node order.
Optionally, `verdicts(state: CycleState) -> list[Verdict]` gives its filters' answers one by one
(framework/verdicts.py): the runtime then filters with them and, for a pod that fits nowhere, builds each
node's reason from them (framework/diagnosis.py); a policy without it is filtered by `filter` and its
refusals read "filtered". DefaultSteps provides all but `score`.
Policies may keep caches between calls (FGD does), but never mutate the snapshot.

A policy that learns the arriving workload itself declares a class attribute `learns_online = True`
(see `learns_online`): it ignores PolicyContext.workload, counts every `score()` call as one arriving
pod, and follows changes of the cluster on its own. Its caller keeps one instance per cluster for
good (rebuilding it would forget what it learned) and scores hypothetical placements, a planner's,
on an instance of their own, so that they do not count as arrivals.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from gpuplace.core.arrays import BoolArray, IntArray, ScoreArray

if TYPE_CHECKING:
    from gpuplace.core.demand import Demand
    from gpuplace.core.model import GpuRequest
    from gpuplace.core.snapshot import ClusterSnapshot
    from gpuplace.core.workload import TypicalWorkload


class Code(enum.IntEnum):
    """Outcome of a filter on one node (kube's framework.Code, the subset placement needs)."""

    SUCCESS = 0
    UNSCHEDULABLE = 1
    """Not now: moving other pods could make room (the defragmenter may act)."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = 2
    """Never on this node, whatever moves (wrong GPU model, GPUs smaller than the request)."""


@dataclass(frozen=True)
class PerNode:
    """How a status says the numbers it keeps out of its reasons: `node` for one node (str.format with that node's
    numbers), `node_class` for several nodes of a class whose numbers differ (formatted with the largest of each).

    kube-scheduler's NodeResourcesFit does the same: its Status reason is "Insufficient nvidia.com/gpu" on every
    node, and the node's numbers stay apart in an InsufficientResource (Requested, Used, Capacity), "to avoid
    formatting a message on the fly" (pkg/scheduler/framework/plugins/noderesources/fit.go). A reason with a
    node's own numbers in it (a largest free hole) is one distinct string per node; one without them is one per
    GPU model, which is what kube's message counts."""

    node: str
    node_class: str


@dataclass(frozen=True)
class Status:
    """A filter's verdict on one node; `plugin` names the filter that gave it (kube's Status.Plugin()), so that
    `gpuplace explain` can say which rule kept a pod off a node class, not only what it said.

    With `per_node`, `reasons` leave out numbers that differ from node to node (what kube's message counts), and
    the node's numbers are said with `per_node.node` (framework/diagnosis.py keeps them per node)."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    per_node: PerNode | None = None

    def with_numbers(self, numbers: Sequence[int]) -> Status:
        """This status as one node says it: its per-node reason, formatted with that node's numbers."""
        if self.per_node is None:
            return self
        return Status(self.code, (self.per_node.node.format(*numbers),), self.plugin)

    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS


SUCCESS = Status()


@dataclass(frozen=True)
class PolicyContext:
    """What a policy factory may use: the typical workload (for fragmentation) and a seeded RNG."""

    workload: TypicalWorkload | None = None
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    expected_shapes: tuple[GpuRequest, ...] = ()
    """GPU requests the operator expects before they are seen (a training job's 8 GPUs): policies that learn the
    mix online count them from the start (gpuplace: shape_estimate.set_prior)."""
    whole_gpu_reserve: float | None = None
    """gpuplace's whole-GPU reserve (policies/gpuplace/whole_gpu_reserve.py): the scale of the shared demand still
    expected that the room in partly used GPUs must reach before a shared pod of more than half a GPU is kept from
    opening a whole GPU; None: the policy's default (WHOLE_GPU_RESERVE), 0: off."""


class Policy(Protocol):
    name: str

    def filter(self, snapshot: ClusterSnapshot, demand: Demand) -> BoolArray: ...

    def score(self, snapshot: ClusterSnapshot, demand: Demand, candidates: IntArray) -> ScoreArray: ...

    def choose_gpus(self, snapshot: ClusterSnapshot, demand: Demand, node: int) -> tuple[int, ...]: ...


def learns_online(policy: object) -> bool:
    """Whether `policy` (an instance, or the class a registry builds it from) learns the workload online."""
    return bool(getattr(policy, "learns_online", False))


__all__ = ["Code", "PerNode", "Policy", "PolicyContext", "SUCCESS", "Status", "learns_online"]
