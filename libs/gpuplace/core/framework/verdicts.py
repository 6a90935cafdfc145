"""Filter verdicts: every filter's answer on every node, computed once per decision, explained only on demand.

Modelled on kube-scheduler's framework (k8s.io/kubernetes pkg/scheduler/framework): a decision carries a
`CycleState` (cycle_state.go: data a plugin writes once in PreFilter and reads many times), and each Filter plugin
answers with a `Status` per node (interface.go) that `findNodesThatPassFilters` (schedule_one.go) records in the
`Diagnosis` of a pod that fits nowhere (types.go). gpuplace's filters are vectorised, so a plugin answers for all
nodes at once: a `Verdict` is its pass/fail mask over the nodes plus a way to say why, for any set of failing
nodes. The mask and the reasons come from the same arrays, computed once, so they cannot disagree, and reasons
cost nothing for a pod that fits (issue 16: explaining one unplaceable pod on 1,200 nodes took 249 ms when each
node's reason recomputed the whole-cluster mask).

Order is the chain's: a node's status is that of the first verdict it fails (kube-scheduler stops at the first
failing Filter plugin of a node too), which framework/diagnosis.py builds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

import numpy as np
import numpy.typing as npt

from gpuplace.core.arrays import BoolArray, IntArray
from gpuplace.core.framework.interface import SUCCESS, Code, Status

if TYPE_CHECKING:
    from gpuplace.core.demand import Demand
    from gpuplace.core.snapshot import ClusterSnapshot

_T = TypeVar("_T")

Explained = tuple[Sequence[Status], IntArray]
"""Statuses, and for each row asked about the index of its status among them (aligned with the rows)."""
Explain = Callable[[IntArray], Explained]
"""Given node rows that all fail a verdict, why: one status per distinct reason, and which row has which."""
Numbers = Callable[[IntArray], IntArray]
"""Given node rows that all fail a verdict, each row's numbers (n_rows, k) that its status's `per_node` texts
format (interface.PerNode); at most MAX_NUMBERS per row."""
MAX_NUMBERS = 4


class CycleState:
    """What one decision (one pod, one snapshot) computes once and every step reads (kube's CycleState).

    `memo(key, compute)` is Read-or-Write: the first caller computes, the others share it (e.g. the GPUs with
    room for the pod, which GpuFit's verdict and the exclusive policy's both need). A state belongs to one
    snapshot in one state: charging a pod to the snapshot makes a new decision, with a new CycleState.
    """

    __slots__ = ("snapshot", "demand", "_data")

    def __init__(self, snapshot: ClusterSnapshot, demand: Demand) -> None:
        self.snapshot = snapshot
        self.demand = demand
        self._data: dict[str, object] = {}

    def memo(self, key: str, compute: Callable[[], _T]) -> _T:
        if key not in self._data:
            self._data[key] = compute()
        return cast(_T, self._data[key])


@dataclass(frozen=True, eq=False)
class Verdict:
    """One filter's answer for one decision: `passed` (n_nodes,) and `explain` for rows that failed.

    `plugin` names the filter; its statuses name it too (kube's Status.Plugin()), or the diagnosis fills it in.
    `numbers`, where some status has `per_node` texts, gives the failing rows' numbers those texts format."""

    plugin: str
    passed: BoolArray
    explain: Explain
    numbers: Numbers | None = None

    def status(self, node: int) -> Status:
        """The status of one node (SUCCESS where it passed), its numbers in its reason."""
        if self.passed[node]:
            return SUCCESS
        rows = np.array([node], dtype=np.int64)
        statuses, which = self.explain(rows)
        status = statuses[int(which[0])]
        if status.per_node is None or self.numbers is None:
            return status
        return status.with_numbers(self.numbers(rows)[0].tolist())


def feasible(verdicts: Sequence[Verdict]) -> BoolArray:
    """Nodes every verdict passed, (n_nodes,): a new array (verdicts' masks may be cached, never written)."""
    out: BoolArray = np.logical_and.reduce([v.passed for v in verdicts])
    return out


def verdicts_of(policy: object, state: CycleState) -> list[Verdict]:
    """The policy's verdicts, in its chain's order; a policy that only has `filter` gives one verdict whose
    every refusal reads "filtered" (no plugin named), as gpuplace always said for such a policy."""
    own = getattr(policy, "verdicts", None)
    if own is not None:
        verdicts: list[Verdict] = own(state)
        return verdicts
    passed: BoolArray = np.asarray(policy.filter(state.snapshot, state.demand), dtype=np.bool_)  # type: ignore[attr-defined]
    return [Verdict("", passed, lambda rows: one_status(Status(Code.UNSCHEDULABLE, ("filtered",)), rows))]


def all_pass(n_nodes: int) -> BoolArray:
    """A verdict's mask where the filter does not apply to the pod (a CPU-only pod and the GPU filters)."""
    return np.ones(n_nodes, dtype=bool)


def nothing_to_explain(rows: IntArray) -> Explained:
    """The `explain` of a verdict every node passes: it is never asked (only failing rows are)."""
    raise AssertionError(f"a verdict every node passed was asked to explain rows {rows.tolist()}")


def one_status(status: Status, rows: IntArray) -> Explained:
    """Every row for the same reason."""
    return [status], np.zeros(len(rows), dtype=np.int64)


def distinct(*keys: npt.NDArray[np.generic]) -> tuple[IntArray, IntArray]:
    """Rows told apart by equal `keys` (aligned arrays): (position of each distinct key's first row, for each row
    the index of its key among them). A filter formats one status per distinct key, not per node: on a fleet of a
    few GPU products most failing nodes share their reason's numbers. No loop over groups, so a filter's cost per
    distinct reason is the string it formats."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.lexsort(keys[::-1])  # by keys[0], then keys[1], ...; stable: a group's first member comes first
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for key in keys:
        ordered = key[order]
        change[1:] |= ordered[1:] != ordered[:-1]
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(change) - 1
    first: IntArray = order[change]
    return first, inverse


__all__ = ["CycleState", "Explain", "Explained", "MAX_NUMBERS", "Numbers", "Verdict", "all_pass", "distinct",
           "feasible", "nothing_to_explain", "one_status", "verdicts_of"]
