"""The one interface every placement policy implements (kube-scheduler's filter/score shape).

A policy is a small object built by a factory from a `PolicyContext`:
- `filter(snapshot, demand)` -> bool mask over nodes: where the pod may go at all;
- `score(snapshot, demand, candidates)` -> one number per candidate row, higher is better;
- `choose_gpus(snapshot, demand, node)` -> the GPU indices the pod takes on the chosen node.
The runtime (runtime.py) picks the highest score and, on a tie, the first candidate in node order.
Optionally, `explain(snapshot, demand, node) -> Status` says why a node was filtered out (the
runtime reports it for unschedulable pods); DefaultSteps provides all but `score`.
Policies may keep caches between calls (FGD does), but never mutate the snapshot.

A policy that learns the arriving workload itself declares a class attribute `learns_online = True`
(see `learns_online`): it ignores PolicyContext.workload, counts every `score()` call as one arriving
pod, and follows changes of the cluster on its own. Its caller keeps one instance per cluster for
good (rebuilding it would forget what it learned) and scores hypothetical placements, a planner's,
on an instance of their own, so that they do not count as arrivals.
"""

from __future__ import annotations

import enum
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
class Status:
    """A filter's verdict on one node; `plugin` names the filter that gave it (kube's Status.Plugin()), so that
    `gpuplace explain` can say which rule kept a pod off a node class, not only what it said."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

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


class Policy(Protocol):
    name: str

    def filter(self, snapshot: ClusterSnapshot, demand: Demand) -> BoolArray: ...

    def score(self, snapshot: ClusterSnapshot, demand: Demand, candidates: IntArray) -> ScoreArray: ...

    def choose_gpus(self, snapshot: ClusterSnapshot, demand: Demand, node: int) -> tuple[int, ...]: ...


def learns_online(policy: object) -> bool:
    """Whether `policy` (an instance, or the class a registry builds it from) learns the workload online."""
    return bool(getattr(policy, "learns_online", False))


__all__ = ["Code", "Policy", "PolicyContext", "SUCCESS", "Status", "learns_online"]
