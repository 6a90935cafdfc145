"""The background queue that carries feedback to Kubernetes: it merges under a flood, it never drops.

Placement reports after each commit (usecases/feedback says what): a FailedScheduling when a pod's reasons change,
a Scheduled when it is bound, a warning when nothing enforces its GPU share. A flood of unschedulable pods makes
reports faster than an apiserver takes them (three calls each). The queue held at most 1,000 report tasks, as
client-go's event broadcaster holds 1,000 events, and dropped the rest with a warning line each: in issue 40,
931 FailedScheduling reports and 11 Scheduled Events were lost with ~930 lines of log.

Here the queue holds at most one report per pod and kind, which bounds it by the pods placement holds (it keeps
each waiting pod's row already), so nothing needs dropping:
- a report of a kind the pod has pending replaces it, as client-go's EventCorrelator folds a repeat into the
  Event it already has: the newer news is the one worth telling (`merged` in the summary);
- a Scheduled report makes a pending FailedScheduling of the same pod moot: it is merged into it, never sent;
- one pod's reports run in the order they were made and never two at once (a Scheduled is never overtaken by
  an older FailedScheduling); pods take turns, so one pod cannot hold the workers;
- a per-pod spam filter, client-go's EventSourceObjectSpamFilter (tools/record/events_cache.go: a token bucket
  per object, burst 25, one token per 5 minutes), holds a pod's warnings back once it has said too much; held
  back, not dropped: the latest is sent when a token comes, and a Scheduled is never held;
- a report that fails is counted, not logged one by one: one summary line per SUMMARY_INTERVAL_S says what was
  merged, held back and failed, over how many pods ("931 FailedScheduling reports merged for 931 pods").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# client-go tools/events/event_broadcaster.go: recordWorkers = 8
REPORT_WORKERS = 8
SCHEDULED = "Scheduled"  # the one kind the spam filter never holds back, and that supersedes FailedScheduling
FAILED_SCHEDULING = "FailedScheduling"
# client-go tools/record/events_cache.go: defaultSpamBurst = 25, defaultSpamQPS = 1/300, maxLruCacheEntries = 4096
SPAM_BURST = 25
SPAM_REFILL_S = 300.0
SPAM_CACHE_SIZE = 4096
SUMMARY_INTERVAL_S = 60.0

Report = Callable[[], Awaitable[None]]


@dataclass
class _Pending:
    subject: str  # "namespace/name", for the log
    report: Report


@dataclass
class _Tally:
    """What the summary line counts, by kind: reports and the pods they were about."""

    reports: Counter[str] = field(default_factory=Counter)
    pods: dict[str, set[str]] = field(default_factory=dict)

    def add(self, kind: str, key: str) -> None:
        self.reports[kind] += 1
        self.pods.setdefault(kind, set()).add(key)

    def text(self, verb: str) -> list[str]:
        return [f"{n} {kind} reports {verb} for {len(self.pods[kind])} pods" for kind, n in self.reports.items()]


class _SpamFilter:
    """client-go's EventSourceObjectSpamFilter: a token bucket per pod (LRU of SPAM_CACHE_SIZE pods)."""

    def __init__(self, burst: int, refill_s: float, clock: Callable[[], float]) -> None:
        self._burst, self._refill_s, self._clock = burst, refill_s, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def _tokens(self, key: str) -> float:
        tokens, at = self._buckets.get(key, (float(self._burst), self._clock()))
        return min(float(self._burst), tokens + (self._clock() - at) / self._refill_s)

    def take(self, key: str) -> bool:
        tokens = self._tokens(key)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, self._clock())
        self._buckets.move_to_end(key)
        while len(self._buckets) > SPAM_CACHE_SIZE:
            self._buckets.popitem(last=False)
        return allowed

    def wait_s(self, key: str) -> float:
        """Seconds until the pod has a token again."""
        return max(0.0, (1.0 - self._tokens(key)) * self._refill_s)


class Reporter:
    """Runs reports in the background, at most `workers` at once, merging rather than dropping (module doc).
    `tasks` are the running workers, for drain(); summarize() writes the summary line now (shutdown, tests)."""

    def __init__(self, *, workers: int = REPORT_WORKERS, spam_burst: int = SPAM_BURST,
                 spam_refill_s: float = SPAM_REFILL_S, summary_interval_s: float = SUMMARY_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        self._workers, self._active = workers, 0
        self._pending: dict[str, dict[str, _Pending]] = {}  # pod key -> kind -> its latest report, in order
        self._ready: deque[str] = deque()  # pods with a report to send now, in turn
        self._queued: set[str] = set()  # pods in _ready or being reported on: never two workers on one pod
        self._held: dict[str, asyncio.TimerHandle] = {}  # pods whose warnings the spam filter holds back
        self._spam = _SpamFilter(spam_burst, spam_refill_s, clock)
        self._merged, self._held_back, self._failed = _Tally(), _Tally(), _Tally()
        self._last_error = ""
        self._summary_interval_s = summary_interval_s
        self._summary: asyncio.TimerHandle | None = None

    def spawn(self, key: str, kind: str, subject: str, report: Report) -> None:
        """Queue `report` (of `kind`, about the pod `key`, "namespace/name" as `subject`); never blocks."""
        pending = self._pending.setdefault(key, {})
        if kind in pending:
            self._note(self._merged, kind, key)
        if kind == SCHEDULED and FAILED_SCHEDULING in pending:
            del pending[FAILED_SCHEDULING]  # bound now: why it waited is old news
            self._note(self._merged, FAILED_SCHEDULING, key)
        pending[kind] = _Pending(subject, report)
        if kind == SCHEDULED and key in self._held:
            self._release(key)  # a Scheduled is never held back behind a pod's warnings
        elif key not in self._held:
            self._enqueue(key)

    def pending(self) -> int:
        """Reports queued and not started yet (held back ones included)."""
        return sum(len(kinds) for kinds in self._pending.values())

    def _enqueue(self, key: str) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._ready.append(key)
        if self._active < self._workers and self._active < len(self._ready):
            self._active += 1  # counted here and uncounted by the worker itself: a finished task's done callback
            task = asyncio.create_task(self._work())  # runs later, and a report queued meanwhile needs a worker
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def _release(self, key: str) -> None:
        self._held.pop(key).cancel()
        self._enqueue(key)

    async def _work(self) -> None:
        try:
            await self._work_through()
        finally:
            self._active -= 1

    async def _work_through(self) -> None:
        while self._ready:
            key = self._ready.popleft()
            taken = self._take(key)
            if taken is not None:
                kind, pending = taken
                try:
                    await pending.report()
                except Exception as exc:  # noqa: BLE001 - feedback must never fail placement
                    log.debug("%s of %s failed: %s", kind, pending.subject, exc)
                    self._last_error = f"{kind} of {pending.subject}: {exc}"
                    self._note(self._failed, kind, key)
            self._queued.discard(key)
            if self._pending.get(key) and key not in self._held:
                self._enqueue(key)  # more came meanwhile, or more was there: after the other pods' turns

    def _take(self, key: str) -> tuple[str, _Pending] | None:
        """The pod's oldest report the spam filter lets through now (a Scheduled always); None, with a timer to
        try again, when it holds back every one."""
        pending = self._pending.get(key) or {}
        for kind in pending:
            if kind == SCHEDULED or self._spam.take(key):
                taken = pending.pop(kind)
                if not pending:
                    del self._pending[key]
                return kind, taken
        for kind in pending:
            self._note(self._held_back, kind, key)
        if pending and key not in self._held:
            self._held[key] = asyncio.get_running_loop().call_later(self._spam.wait_s(key), self._release, key)
        return None

    def _note(self, tally: _Tally, kind: str, key: str) -> None:
        tally.add(kind, key)
        if self._summary is None:
            self._summary = asyncio.get_running_loop().call_later(self._summary_interval_s, self.summarize)

    def summarize(self) -> None:
        """One line for everything merged, held back and failed since the last one; nothing if nothing was."""
        if self._summary is not None:
            self._summary.cancel()
            self._summary = None
        parts = self._merged.text("merged") + self._held_back.text("held back by the spam filter")
        failed = self._failed.text("failed")
        if failed:
            log.warning("feedback to Kubernetes: %s (last: %s)", "; ".join(parts + failed), self._last_error)
        elif parts:
            log.info("feedback to Kubernetes: %s", "; ".join(parts))
        self._merged, self._held_back, self._failed = _Tally(), _Tally(), _Tally()


__all__ = ["Reporter", "Report", "REPORT_WORKERS", "SCHEDULED", "FAILED_SCHEDULING", "SPAM_BURST", "SPAM_REFILL_S",
           "SPAM_CACHE_SIZE", "SUMMARY_INTERVAL_S"]
