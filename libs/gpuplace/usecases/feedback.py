"""Feedback in Kubernetes, as kube-scheduler gives it: the words (usecases/report_queue sends them).

A waiting pod gets a `FailedScheduling` Event and `PodScheduled=False` whose message is kube-scheduler's
("0/3 nodes are available: 1 <reason>, 2 <reason>."); a bound pod gets a `Scheduled` Event. The placements topic
keeps its own per-node-class reasons; the kube message travels beside them on `Unschedulable.message`.

Reports run after the commit, in the background, through the cluster API's `report_unschedulable` /
`report_scheduled` (adapters/kube/cluster_api.py), queued by usecases/report_queue: they never fail or block
placement, and under a flood they are merged per pod rather than dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any


class Unschedulable(dict[str, str]):
    """Why a pod waits: per node class (the placements topic's `reasons`, unchanged), plus kube's message.

    A dict, so it compares, serialises and deduplicates exactly as the plain reasons did."""

    message: str

    def __init__(self, reasons: Mapping[str, str], message: str) -> None:
        super().__init__(reasons)
        self.message = message


def fit_error_message(n_nodes: int, statuses: Mapping[str, Any]) -> str:
    """kube-scheduler's FitError.Error() (pkg/scheduler/framework/types.go), Filter part, from per-node statuses.

    Every reason of every node's status counts once per node; each histogram entry reads "<count> <reason>"
    and the entries are sorted as strings (Go's sort.Strings over the formatted entries: not by count, so
    "10 x" comes before "2 y"), joined by ", ". A status without reasons counts under its code's name.
    """
    return fit_error_message_of(n_nodes, ((status, 1) for status in statuses.values()))


def fit_error_message_of(n_nodes: int, counted: Iterable[tuple[Any, int]]) -> str:
    """fit_error_message from (status, how many nodes have it) pairs: a diagnosis's groups, one per status."""
    histogram: Counter[str] = Counter()
    for status, nodes in counted:
        for reason in status.reasons or (status.code.name.lower(),):
            histogram[reason] += nodes
    entries = sorted(f"{count} {reason}" for reason, count in histogram.items())
    message = f"0/{n_nodes} nodes are available:"
    return message + f" {', '.join(entries)}." if entries else message


def message(reasons: Mapping[str, str]) -> str:
    """The kube message of a waiting pod: kube's FitError text when the decision carried one, else the reasons
    as written ("reserve: capacity changed ...")."""
    if isinstance(reasons, Unschedulable):
        return reasons.message
    return "; ".join(f"{key}: {value}" for key, value in reasons.items())


def gpus_text(gpu_indices: tuple[int, ...], memory_mib: int) -> str:
    """What follows kube-scheduler's "Successfully assigned ns/pod to node": "(GPU 3: 9420 MiB)",
    "(GPUs 0, 1: 9420 MiB each)", or "" for a pod without GPUs."""
    if not gpu_indices:
        return ""
    if len(gpu_indices) == 1:
        return f"(GPU {gpu_indices[0]}: {memory_mib} MiB)"
    return f"(GPUs {', '.join(map(str, gpu_indices))}: {memory_mib} MiB each)"


__all__ = ["Unschedulable", "fit_error_message", "fit_error_message_of", "message", "gpus_text"]
