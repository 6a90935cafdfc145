"""Why a pod fits nowhere: each node's status, from the decision's verdicts, built when first read.

kube-scheduler's `Diagnosis` (k8s.io/kubernetes pkg/scheduler/framework/types.go) maps every node to the Status
of the first Filter plugin that rejected it, and its `FitError` turns that map into the Event's histogram. Here a
node's status is likewise the first failing verdict's (framework/verdicts.py), but nothing is formatted until
someone reads the diagnosis, and then once per distinct status rather than per node (each filter formats one
string per distinct set of numbers in its reason): a pod that waits costs its reasons once per attempt, and the
counts a report needs (per status, per node class) are array operations, not loops over nodes.

A status whose numbers differ on every node (GpuFit's largest free hole) keeps them out of its reasons, as kube's
NodeResourcesFit does ("Insufficient nvidia.com/gpu", its numbers apart): the diagnosis holds them as an array
per node, a node's status says them (`status_of`, `statuses`), and a report per node class gives their range
(`counts_by`), so kube's message and the per-class reasons cost one string per GPU model, not one per node.

A diagnosis describes the snapshot as it was decided on; reading it after a pod was charged to or refunded from
that snapshot is refused (RuntimeError), since its reasons would mix two states.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from gpuplace.core.arrays import IntArray
from gpuplace.core.framework.interface import Code, Status
from gpuplace.core.framework.verdicts import MAX_NUMBERS

if TYPE_CHECKING:
    from gpuplace.core.framework.verdicts import Verdict
    from gpuplace.core.snapshot import ClusterSnapshot

StatusGroup = tuple[Status, IntArray]
"""A status and the node rows that have it, ascending."""


@dataclass(frozen=True)
class Counts:
    """Refusing nodes counted per (status, label) pair, e.g. per status and node class: aligned arrays, one entry
    per pair some node has. `low` and `high` (n_pairs, MAX_NUMBERS) are the smallest and largest of each of the
    pair's nodes' numbers (zeros for statuses without `per_node`)."""

    status: IntArray  # index in Diagnosis.distinct
    label: IntArray
    nodes: IntArray  # how many nodes
    first: IntArray  # the first node's row
    low: IntArray
    high: IntArray


class Diagnosis:
    """The statuses of the nodes that refused a pod, one per distinct status; see the module docstring.

    Held as columns: `distinct` statuses (in order of their first node), `group_of_row`, each node row's index
    among them, and `numbers`, each row's numbers for the statuses that keep them out of their reasons
    (interface.PerNode), so that counting nodes per status, per node class or per reason needs no loop over nodes
    and no string per node."""

    def __init__(self, snapshot: ClusterSnapshot, verdicts: Sequence[Verdict]) -> None:
        self.snapshot = snapshot
        self._verdicts = tuple(verdicts)
        self._version = snapshot.version.copy()
        self._read: tuple[tuple[Status, ...], IntArray, IntArray] | None = None

    @property
    def distinct(self) -> tuple[Status, ...]:
        """Every distinct status of a refusing node, in order of its first node; computed on first read. A status
        with `per_node` is shared by nodes whose numbers differ (its reasons leave them out)."""
        return self._columns()[0]

    @property
    def group_of_row(self) -> IntArray:
        """Per node row, the index of its status in `distinct` (-1 where the node did not refuse the pod)."""
        return self._columns()[1]

    @property
    def numbers(self) -> IntArray:
        """Per node row, the numbers its status's `per_node` texts format, (n_nodes, MAX_NUMBERS); zeros elsewhere."""
        return self._columns()[2]

    def counted(self) -> list[tuple[Status, int]]:
        """Each distinct status with how many nodes have it (what kube's FitError histogram counts)."""
        group = self.group_of_row
        nodes = np.bincount(group[group >= 0], minlength=len(self.distinct)).tolist()
        return list(zip(self.distinct, nodes, strict=True))

    @property
    def groups(self) -> tuple[StatusGroup, ...]:
        """Each distinct status with its node rows (one pass per status: for reading a small cluster, tests)."""
        group = self.group_of_row
        return tuple((status, np.flatnonzero(group == i)) for i, status in enumerate(self.distinct))

    @property
    def resolvable(self) -> bool:
        """Whether some node could take the pod if other pods moved (a status UNSCHEDULABLE, not UNRESOLVABLE)."""
        return any(status.code == Code.UNSCHEDULABLE for status in self.distinct)

    @property
    def statuses(self) -> Mapping[str, Status]:
        """Node name -> status, for the nodes that refused the pod, in node order (built as it is read), each with
        its own numbers in its reason."""
        return NodeStatuses(self)

    def status_of(self, row: int) -> Status | None:
        """The status of the node at `row` as that node says it (its numbers in its reason), None if it did not
        refuse the pod."""
        group = int(self.group_of_row[row])
        if group < 0:
            return None
        status = self.distinct[group]
        return status.with_numbers(self.numbers[row].tolist()) if status.per_node is not None else status

    def counts_by(self, label_of_row: IntArray) -> Counts:
        """For every (status, label) pair some refusing node has, given a label per node row (a node class, say):
        how many nodes, the first one, the range of their numbers; what a report per class counts, without a loop
        over nodes."""
        group, numbers = self.group_of_row, self.numbers
        rows = np.flatnonzero(group >= 0)
        n_labels = int(label_of_row.max(initial=0)) + 1
        key = group[rows] * n_labels + label_of_row[rows]
        unique, first, inverse, count = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
        low = np.full((len(unique), MAX_NUMBERS), np.iinfo(np.int64).max, dtype=np.int64)
        high = np.full((len(unique), MAX_NUMBERS), np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(low, inverse, numbers[rows])
        np.maximum.at(high, inverse, numbers[rows])
        return Counts(unique // n_labels, unique % n_labels, count, rows[first], low, high)

    def _columns(self) -> tuple[tuple[Status, ...], IntArray, IntArray]:
        if self._read is None:
            self._read = self._diagnose()
        return self._read

    def _diagnose(self) -> tuple[tuple[Status, ...], IntArray, IntArray]:
        """Each refusing node's first failing verdict explains it; equal statuses from any verdict merge."""
        if not np.array_equal(self.snapshot.version, self._version):
            raise RuntimeError("the snapshot changed since this decision: its reasons would describe another state "
                               "(read the diagnosis before charging or refunding pods)")
        undecided = np.ones(self.snapshot.n_nodes, dtype=bool)
        group = np.full(self.snapshot.n_nodes, -1, dtype=np.int64)
        numbers = np.zeros((self.snapshot.n_nodes, MAX_NUMBERS), dtype=np.int64)
        index: dict[Status, int] = {}
        for verdict in self._verdicts:
            failed = undecided & ~verdict.passed
            if not failed.any():
                continue
            undecided &= ~failed
            rows = np.flatnonzero(failed)
            statuses, which = verdict.explain(rows)
            plugin = verdict.plugin
            ids = [index.setdefault(replace(s, plugin=plugin) if plugin and not s.plugin else s, len(index))
                   for s in statuses]
            group[rows] = np.asarray(ids, dtype=np.int64)[which]
            if verdict.numbers is not None and any(s.per_node is not None for s in statuses):
                values = verdict.numbers(rows)
                if values.ndim != 2 or values.shape[0] != len(rows) or values.shape[1] > MAX_NUMBERS:
                    raise ValueError(f"verdict {plugin}: numbers of shape {values.shape} for {len(rows)} rows "
                                     f"(at most {MAX_NUMBERS} per row)")
                numbers[rows, :values.shape[1]] = values
        # number the statuses by their first node, so that reading them in order is reading the nodes in order
        present = np.flatnonzero(group >= 0)
        used, first = np.unique(group[present], return_index=True)  # every status some node has, its first row
        order = used[np.argsort(present[first], kind="stable")]  # status ids, by first row
        renumber = np.full(len(index), -1, dtype=np.int64)
        renumber[order] = np.arange(len(order))
        group[present] = renumber[group[present]]
        by_id = list(index)
        return tuple(by_id[i] for i in order.tolist()), group, numbers


class NodeStatuses(Mapping[str, Status]):
    """A diagnosis read as {node name: status} (Decision.statuses); nothing is copied per node until asked."""

    def __init__(self, diagnosis: Diagnosis) -> None:
        self._diagnosis = diagnosis

    def __getitem__(self, name: str) -> Status:
        snapshot = self._diagnosis.snapshot
        status = self._diagnosis.status_of(snapshot.index_of(name)) if snapshot.has_node(name) else None
        if status is None:
            raise KeyError(name)
        return status

    def __iter__(self) -> Iterator[str]:
        names = self._diagnosis.snapshot.node_names
        return (names[row] for row in np.flatnonzero(self._diagnosis.group_of_row >= 0).tolist())

    def __len__(self) -> int:
        return int((self._diagnosis.group_of_row >= 0).sum())


__all__ = ["Counts", "Diagnosis", "NodeStatuses", "StatusGroup"]
