"""The vocabulary of defragmentation: who runs where, what may move, and what a plan says.

Rules of this module:
- every type is a frozen dataclass (Blocker is an enum); times are seconds on the caller's clock
  (`now_s`, `at_s`), never read here;
- a Plan is complete: the beneficiary's node and GPUs and, for every pod to move, the exact target
  (node, GPUs, share and memory per GPU) and wave. The executor reserves every target, then evicts
  wave by wave, binding each wave's pods at their targets, then binds the beneficiary (apply.py is
  that order on a snapshot); nothing is left to decide later;
- a Refusal always says why, with the Blocker the planner saw.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from gpuplace.core.model import Pod


class Blocker(enum.Enum):
    """Why a pod cannot be placed now (see blockers.py for how each is told apart)."""

    NONE = "none"
    """It fits now: nothing blocks it."""
    CAPACITY = "capacity"
    """The nodes it may use lack the free resources in total: moving pods cannot help."""
    FRAGMENTATION = "fragmentation"
    """The free resources exist in total, but no single node/GPU has them: moves may help."""
    LATENCY = "latency"
    """Room exists, but the latency filter rejects every place (a deadline would break)."""
    CONSTRAINT = "constraint"
    """No node could ever take it: GPU model not allowed, or GPUs/CPU/memory too small everywhere."""


@dataclass(frozen=True)
class RunningPod:
    """A bound pod as the planner sees it: where it runs and what moving it costs.

    `share_milli` and `memory_mib` are what each of its GPUs gives it; `owner` ("ReplicaSet/x") groups
    pods for per-owner eviction limits (None: the pod is its own owner).
    """

    uid: str
    pod: Pod
    node_name: str
    gpu_indices: tuple[int, ...] = ()
    share_milli: int = 0
    memory_mib: int = 0
    owner: str | None = None
    restart_s: float = 0.0


@dataclass(frozen=True)
class PastMove:
    """One eviction already made (for cool-downs and rate limits): which pod, whose, when."""

    uid: str
    owner: str | None
    at_s: float


@dataclass(frozen=True)
class Limits:
    """What a plan may never exceed. Windows end at `now_s`; counts include the plan's own moves."""

    max_victims_per_plan: int = 3
    pod_cooldown_s: float = 600.0
    """A pod moved less than this long ago does not move again."""
    max_moves_per_pod_per_hour: int = 2
    max_evictions_per_owner_per_hour: int = 2
    max_evictions_per_hour: int = 60
    """All evictions in the `history` the planner is given, whoever's. Only as wide as that history: the placement
    service gives one cluster's evictions made by its own process since it started (usecases/defrag.py), so there
    it caps each cluster per process and a restart starts it afresh; the defrag simulation gives all of its own."""
    max_chain_depth: int = 0
    """0: every pod moves to room free now. 1: a pod to move may itself have pods moved to make
    room for it (their evictions first: see Move.wave)."""

    def __post_init__(self) -> None:
        counts = (self.max_victims_per_plan, self.max_moves_per_pod_per_hour,
                  self.max_evictions_per_owner_per_hour, self.max_evictions_per_hour, self.max_chain_depth)
        if min(counts) < 0 or self.pod_cooldown_s < 0:
            raise ValueError(f"limits must be non-negative: {self}")


@dataclass(frozen=True)
class Move:
    """Evict pod `uid` from (`from_node`, `from_gpu_indices`) and bind it at the target.

    `wave` orders a chain: a wave-0 target is free now; a wave-w target uses room that evictions of
    earlier waves free. Plans made with `Limits.max_chain_depth == 0` have wave 0 only.
    """

    uid: str
    from_node: str
    from_gpu_indices: tuple[int, ...]
    to_node: str
    to_gpu_indices: tuple[int, ...]
    share_milli: int
    """Per target GPU."""
    memory_mib: int
    """Per target GPU."""
    cost: float
    wave: int = 0


@dataclass(frozen=True)
class Plan:
    """Place `beneficiary` on `node`/`gpu_indices` after `moves`; `cost` is the sum of the moves' costs."""

    beneficiary: str
    node: str
    gpu_indices: tuple[int, ...]
    share_milli: int
    """Per GPU the beneficiary takes."""
    memory_mib: int
    moves: tuple[Move, ...]
    cost: float
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refusal:
    """No plan: what blocks the pod and why no move set helps."""

    blocker: Blocker
    reason: str


def slack_ms(pod: Pod) -> float:
    """The pod's deadline slack: its deadline, or infinity without one (queue.py's order)."""
    return math.inf if pod.deadline_ms is None else float(pod.deadline_ms)


__all__ = ["Blocker", "Limits", "Move", "PastMove", "Plan", "Refusal", "RunningPod", "slack_ms"]
