"""One placement cycle: filter -> score -> pick -> choose GPUs, and binding the result.

The pick is the highest score; ties go to the first candidate in the snapshot's node order (the
paper's harness: its scheduler breaks ties by the lowest node name, and names carry the seeded
order). `place` is what the placement service calls for one pending pod; the simulator calls
`decide` and `bind` on resolved demands directly.

GPU topology (core/topology.py) is applied here, for every policy alike: a multi-GPU pod's score on a node where
it must span GPU domains loses the policy's `span_penalty` (its own units; none declared: 0), such a node loses
every tie against one where the pod fits in one domain, and the chosen GPUs come from one domain when they fit
(gpu_selection.in_one_domain). On a cluster without topology none of it runs.

Filtering runs each of the policy's filters once over all nodes (framework/verdicts.py: one `CycleState` and
one `Verdict` per filter per decision); the decision keeps to the nodes every verdict passed. With `explain`
(the service's `place`), a decision also says why: a `Diagnosis` when the pod fits nowhere, whose per-node
statuses are built from those same verdicts when first read (framework/diagnosis.py), and the best-scored other
candidates (`runners_up`) when it fits, which `gpuplace explain` shows beside the chosen node's score.
Explaining never changes the choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from gpuplace.core import gpu_selection, topology
from gpuplace.core.arrays import BoolArray, IntArray, ScoreArray
from gpuplace.core.demand import Demand, resolve
from gpuplace.core.framework.diagnosis import Diagnosis
from gpuplace.core.framework.interface import Policy, Status
from gpuplace.core.framework.verdicts import CycleState, feasible, verdicts_of
from gpuplace.core.model import Assignment, Pod
from gpuplace.core.snapshot import ClusterSnapshot


@dataclass(frozen=True)
class Decision:
    """Where a pod goes (node and GPUs), or why it cannot go anywhere (`diagnosis`, when explained)."""

    pod_name: str
    node: int | None = None
    node_name: str | None = None
    gpu_indices: tuple[int, ...] = ()
    score: float | None = None
    runners_up: tuple[tuple[str, float], ...] = ()  # (node, score): the next best candidates, best first
    diagnosis: Diagnosis | None = field(default=None, repr=False, compare=False)

    @property
    def scheduled(self) -> bool:
        return self.node is not None

    @property
    def statuses(self) -> Mapping[str, Status]:
        """Node name -> why it refused the pod (empty unless the pod fits nowhere and was explained)."""
        return self.diagnosis.statuses if self.diagnosis is not None else {}

    @property
    def resolvable(self) -> bool:
        """False when no node could ever take the pod, whatever moved (defrag would not help)."""
        return self.scheduled or (self.diagnosis is not None and self.diagnosis.resolvable)


def decide(snapshot: ClusterSnapshot, demand: Demand, policy: Policy, *, explain: bool = False) -> Decision:
    """Choose a node and GPUs for `demand`; the snapshot is not changed."""
    verdicts = verdicts_of(policy, CycleState(snapshot, demand))
    feasible_rows = np.flatnonzero(feasible(verdicts))
    if not len(feasible_rows):
        return Decision(demand.pod_name, diagnosis=Diagnosis(snapshot, verdicts) if explain else None)
    scores = np.asarray(policy.score(snapshot, demand, feasible_rows))
    if scores.shape != feasible_rows.shape:
        raise ValueError(f"policy {policy.name} returned {scores.shape} scores for {feasible_rows.shape} nodes")
    spans = topology.spans(snapshot, demand, feasible_rows)
    penalty = span_penalty(policy)
    if spans is not None and penalty and spans.any():
        scores = scores - penalty * spans
    best = _pick(snapshot, demand, feasible_rows, scores, spans)
    node = int(feasible_rows[best])
    gpus = policy.choose_gpus(snapshot, demand, node)
    if spans is not None:
        gpus = gpu_selection.in_one_domain(snapshot, demand, node, tuple(gpus))
    runners_up = _runners_up(snapshot, feasible_rows, scores, best) if explain else ()
    return Decision(demand.pod_name, node, snapshot.node_names[node], tuple(gpus), float(scores[best]),
                    runners_up=runners_up)


RUNNERS_UP = 3  # how many other candidates an explained decision keeps


def _runners_up(snapshot: ClusterSnapshot, feasible: IntArray, scores: ScoreArray, best: int
                ) -> tuple[tuple[str, float], ...]:
    """The RUNNERS_UP best candidates other than the chosen one, by score then node order."""
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    picked = [i for i in order[:RUNNERS_UP + 1].tolist() if i != best][:RUNNERS_UP]  # not a loop over every node
    return tuple((snapshot.node_names[int(feasible[i])], float(scores[i])) for i in picked)


def span_penalty(policy: Policy) -> float:
    """What spanning GPU domains costs in `policy`'s score units (its `span_penalty`; core/topology.py)."""
    return float(getattr(policy, "span_penalty", topology.SPAN_PENALTY_DEFAULT))


def _pick(snapshot: ClusterSnapshot, demand: Demand, feasible: IntArray, scores: ScoreArray,
          spans: BoolArray | None = None) -> int:
    """The first maximum score; among equal scores a node where the pod fits in one GPU domain (`spans` False),
    then the node the pod's preferred affinity weighs most, then the first in node order (topology and preferred
    affinity break ties only: the policy's score comes first)."""
    best = int(np.argmax(scores))
    preferred = snapshot.preference(demand.rules)
    if preferred is None and spans is None:
        return best
    tied = np.flatnonzero(scores == scores[best])
    if spans is not None and spans[tied].any() and not spans[tied].all():
        tied = tied[~spans[tied]]
    if preferred is None:
        return int(tied[0])
    return int(tied[int(np.argmax(preferred[feasible[tied]]))])


def bind(snapshot: ClusterSnapshot, demand: Demand, decision: Decision) -> Assignment:
    """Charge the decision to the snapshot and return the assignment (ValueError if it over-commits)."""
    if decision.node is None:
        raise ValueError(f"pod {decision.pod_name} has no node to bind to")
    node = decision.node
    gpu_type = snapshot.gpu_type_id[node]
    share = int(demand.share_milli_by_type[gpu_type]) if decision.gpu_indices else 0
    memory = int(demand.gpu_memory_mib_by_type[gpu_type]) if decision.gpu_indices else 0
    if len(decision.gpu_indices) != demand.gpu_count:
        raise ValueError(f"pod {decision.pod_name} needs {demand.gpu_count} GPU(s), got {decision.gpu_indices}")
    snapshot.charge(node, decision.gpu_indices, demand.cpu_milli, demand.memory_mib, share, memory,
                    demand.kind_on(snapshot, node), demand.rules)
    count = len(decision.gpu_indices)
    return Assignment(demand.pod_name, snapshot.node_names[node], decision.gpu_indices,
                      (share,) * count, (memory,) * count)


def place(snapshot: ClusterSnapshot, pod: Pod, policy: Policy) -> Decision:
    """Decide for one pod, with its diagnosis when it cannot be placed (the service's entry point)."""
    return decide(snapshot, resolve(pod, snapshot), policy, explain=True)


__all__ = ["Decision", "RUNNERS_UP", "bind", "decide", "place", "span_penalty"]
