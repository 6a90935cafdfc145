"""Feedback in Kubernetes, as kube-scheduler gives it: the words, and the background queue that says them.

A waiting pod gets a `FailedScheduling` Event and `PodScheduled=False` whose message is kube-scheduler's
("0/3 nodes are available: 1 <reason>, 2 <reason>."); a bound pod gets a `Scheduled` Event. The placements topic
keeps its own per-node-class reasons; the kube message travels beside them on `Unschedulable.message`.

Reports run after the commit, in the background, through the cluster API's `report_unschedulable` /
`report_scheduled` (adapters/kube/cluster_api.py). They never fail or block placement: a failure is logged and
dropped, and so is a report that finds the queue full, as client-go's event broadcaster drops an event.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

log = logging.getLogger(__name__)

# client-go tools/events/event_broadcaster.go: recordWorkers = 8, maxQueuedEvents = 1000.
REPORT_WORKERS = 8
MAX_QUEUED_REPORTS = 1000


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


class Reporter:
    """Runs reports in the background: at most REPORT_WORKERS at once, one pod's reports in the order they were
    made (a Scheduled never overtaken by an older FailedScheduling), none raised, `tasks` for drain()."""

    def __init__(self, *, workers: int = REPORT_WORKERS, max_queued: int = MAX_QUEUED_REPORTS) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(workers)
        self._max_queued = max_queued
        self._last: dict[str, asyncio.Task[None]] = {}  # pod key -> its latest report, while one is pending

    def spawn(self, key: str, what: str, report: Callable[[], Awaitable[None]]) -> None:
        if len(self.tasks) >= self._max_queued:
            log.warning("too many reports queued, dropped %s for %s", what, key)
            return
        task = asyncio.create_task(self._run(self._last.get(key), what, report))
        self.tasks.add(task)
        self._last[key] = task
        task.add_done_callback(lambda done: self._done(key, done))

    async def _run(self, before: asyncio.Task[None] | None, what: str,
                   report: Callable[[], Awaitable[None]]) -> None:
        if before is not None:
            await asyncio.wait([before])
        async with self._slots:
            try:
                await report()
            except Exception as exc:  # noqa: BLE001 - feedback must never fail placement
                log.warning("%s failed: %s", what, exc)

    def _done(self, key: str, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if self._last.get(key) is task:
            del self._last[key]


__all__ = ["Unschedulable", "Reporter", "fit_error_message", "fit_error_message_of", "message", "gpus_text",
           "REPORT_WORKERS", "MAX_QUEUED_REPORTS"]
