"""Why a pod fits nowhere: each node's status, from the decision's verdicts, built when first read.

kube-scheduler's `Diagnosis` (k8s.io/kubernetes pkg/scheduler/framework/types.go) maps every node to the Status
of the first Filter plugin that rejected it, and its `FitError` turns that map into the Event's histogram. Here a
node's status is likewise the first failing verdict's (framework/verdicts.py), but nothing is formatted until
someone reads the diagnosis, and then once per distinct status rather than per node (each filter formats one
string per distinct set of numbers in its reason): a pod that waits costs its reasons once per attempt, and the
counts a report needs (per status, per node class) are array operations, not loops over nodes.

A diagnosis describes the snapshot as it was decided on; reading it after a pod was charged to or refunded from
that snapshot is refused (RuntimeError), since its reasons would mix two states.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from gpuplace.core.arrays import IntArray
from gpuplace.core.framework.interface import Code, Status

if TYPE_CHECKING:
    from gpuplace.core.framework.verdicts import Verdict
    from gpuplace.core.snapshot import ClusterSnapshot

StatusGroup = tuple[Status, IntArray]
"""A status and the node rows that have it, ascending."""


class Diagnosis:
    """The statuses of the nodes that refused a pod, one per distinct status; see the module docstring.

    Held as columns: `distinct` statuses (in order of their first node) and `group_of_row`, each node row's index
    among them, so that counting nodes per status, per node class or per reason needs no loop over nodes."""

    def __init__(self, snapshot: ClusterSnapshot, verdicts: Sequence[Verdict]) -> None:
        self.snapshot = snapshot
        self._verdicts = tuple(verdicts)
        self._version = snapshot.version.copy()
        self._distinct: tuple[Status, ...] | None = None
        self._group_of_row: IntArray | None = None

    @property
    def distinct(self) -> tuple[Status, ...]:
        """Every distinct status of a refusing node, in order of its first node; computed on first read."""
        if self._distinct is None:
            self._distinct, self._group_of_row = self._diagnose()
        return self._distinct

    @property
    def group_of_row(self) -> IntArray:
        """Per node row, the index of its status in `distinct` (-1 where the node did not refuse the pod)."""
        if self._group_of_row is None:
            self._distinct, self._group_of_row = self._diagnose()
        return self._group_of_row

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
        """Node name -> status, for the nodes that refused the pod, in node order (built as it is read)."""
        return NodeStatuses(self)

    def status_of(self, row: int) -> Status | None:
        """The status of the node at `row`, None if it did not refuse the pod."""
        group = int(self.group_of_row[row])
        return self.distinct[group] if group >= 0 else None

    def counts_by(self, label_of_row: IntArray) -> tuple[IntArray, IntArray, IntArray, IntArray]:
        """For every (status, label) pair some refusing node has, given a label per node row (a node class, say):
        the status index, the label, how many nodes, the first node's row; four aligned arrays, what a report per
        class counts, without a loop over nodes."""
        group = self.group_of_row
        rows = np.flatnonzero(group >= 0)
        n_labels = int(label_of_row.max(initial=0)) + 1
        key = group[rows] * n_labels + label_of_row[rows]
        unique, first, count = np.unique(key, return_index=True, return_counts=True)
        return unique // n_labels, unique % n_labels, count, rows[first]

    def _diagnose(self) -> tuple[tuple[Status, ...], IntArray]:
        """Each refusing node's first failing verdict explains it; equal statuses from any verdict merge."""
        if not np.array_equal(self.snapshot.version, self._version):
            raise RuntimeError("the snapshot changed since this decision: its reasons would describe another state "
                               "(read the diagnosis before charging or refunding pods)")
        undecided = np.ones(self.snapshot.n_nodes, dtype=bool)
        group = np.full(self.snapshot.n_nodes, -1, dtype=np.int64)
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
        # number the statuses by their first node, so that reading them in order is reading the nodes in order
        present = np.flatnonzero(group >= 0)
        used, first = np.unique(group[present], return_index=True)  # every status some node has, its first row
        order = used[np.argsort(present[first], kind="stable")]  # status ids, by first row
        renumber = np.full(len(index), -1, dtype=np.int64)
        renumber[order] = np.arange(len(order))
        group[present] = renumber[group[present]]
        by_id = list(index)
        return tuple(by_id[i] for i in order.tolist()), group


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


__all__ = ["Diagnosis", "NodeStatuses", "StatusGroup"]
