"""The feedback queue under a flood: merged per pod, never dropped (issue 40, build item 5).

The semantics mirror client-go's event correlation (kubernetes/client-go tools/record/events_cache.go:
EventCorrelator folds an event identical to one it holds into that Event's count; EventSourceObjectSpamFilter
gives each object a token bucket of defaultSpamBurst = 25 events refilled at defaultSpamQPS = 1/300 s), with two
changes made on purpose: what the spam filter stops is held back and sent later as the pod's latest news (client-go
drops it), and a Scheduled report is never held back nor dropped in favour of failures. The queue held 1,000
reports and dropped the rest with a line each: 931 FailedScheduling and 11 Scheduled reports lost in issue 40.
"""

from __future__ import annotations

import asyncio
import logging

from gpuplace.usecases import report_queue
from gpuplace.usecases.report_queue import FAILED_SCHEDULING, SCHEDULED, Reporter

WARNING = "UnenforcedGpuSharing"


class Said:
    """Reports that record what they say, and may wait for a gate (an apiserver slower than the flood)."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()

    def report(self, what: str, *, fail: bool = False):
        async def say() -> None:
            await self.gate.wait()
            if fail:
                raise ConnectionError("apiserver away")
            self.said.append(what)
        return say


async def test_a_flood_is_merged_per_pod_and_nothing_is_dropped(caplog):
    caplog.set_level(logging.INFO, logger=report_queue.__name__)
    reporter, out = Reporter(workers=4), Said()
    out.gate.clear()  # the apiserver takes nothing until the flood is queued
    pods = [f"east/p{i}" for i in range(2000)]
    for round_ in (1, 2):  # every pod's reason changes once while its first report still waits
        for key in pods:
            reporter.spawn(key, FAILED_SCHEDULING, key, out.report(f"{key} failed {round_}"))
        await asyncio.sleep(0)  # the workers take the first 4 pods' reports; then the gate holds them
    for key in pods[-20:]:  # the last 20 are bound before their FailedScheduling was sent
        reporter.spawn(key, SCHEDULED, key, out.report(f"{key} scheduled"))
    assert reporter.pending() == 2000  # one per pod (the first 4 pods': their second, their first being sent)
    out.gate.set()
    while reporter.tasks:
        await asyncio.gather(*reporter.tasks)

    started = {f"{key} failed 1" for key in pods[:4]}  # in flight when the second round came
    assert set(out.said) == started | {f"{key} failed 2" for key in pods[:-20]} | {
        f"{key} scheduled" for key in pods[-20:]}
    assert len(out.said) == len(set(out.said)) == 4 + 1980 + 20  # every pod told once, none twice the same
    reporter.summarize()
    (line,) = [r.getMessage() for r in caplog.records if r.name == report_queue.__name__]
    # merged: 1996 second reports over first ones, 20 into the Scheduled that made them moot
    assert line == "feedback to Kubernetes: 2016 FailedScheduling reports merged for 1996 pods"
    reporter.summarize()  # nothing since: no line
    assert len([r for r in caplog.records if r.name == report_queue.__name__]) == 1


async def test_one_pods_reports_run_in_order_and_pods_take_turns():
    reporter, out = Reporter(workers=1), Said()
    out.gate.clear()
    reporter.spawn("east/p", FAILED_SCHEDULING, "p", out.report("p failed"))
    await asyncio.sleep(0)  # p's FailedScheduling is being sent
    reporter.spawn("east/p", SCHEDULED, "p", out.report("p scheduled"))  # must not overtake it
    reporter.spawn("east/p", WARNING, "p", out.report("p warned"))
    reporter.spawn("east/q", FAILED_SCHEDULING, "q", out.report("q failed"))
    out.gate.set()
    await asyncio.gather(*reporter.tasks)
    assert out.said == ["p failed", "q failed", "p scheduled", "p warned"]  # q's turn comes between p's
    assert not reporter.tasks and reporter.pending() == 0


async def test_the_spam_filter_holds_a_pods_warnings_back_and_sends_its_latest(caplog):
    caplog.set_level(logging.INFO, logger=report_queue.__name__)
    reporter, out = Reporter(spam_burst=2, spam_refill_s=0.3), Said()
    for i in (1, 2, 3, 4):
        reporter.spawn("east/p", FAILED_SCHEDULING, "p", out.report(f"p failed {i}"))
        await asyncio.sleep(0.01)
    assert out.said == ["p failed 1", "p failed 2"]  # the burst; 3 is held back, then 4 merged into it
    reporter.spawn("east/q", FAILED_SCHEDULING, "q", out.report("q failed"))  # a bucket per pod
    await asyncio.sleep(0.01)
    assert out.said[-1] == "q failed" and reporter.pending() == 1
    await asyncio.sleep(0.35)  # a token again: the latest news goes, the older never
    assert out.said == ["p failed 1", "p failed 2", "q failed", "p failed 4"] and reporter.pending() == 0
    reporter.summarize()
    (line,) = [r.getMessage() for r in caplog.records if r.name == report_queue.__name__]
    assert "1 FailedScheduling reports merged for 1 pods" in line
    assert "FailedScheduling reports held back by the spam filter for 1 pods" in line


async def test_a_scheduled_report_is_never_held_back_by_the_spam_filter():
    reporter, out = Reporter(spam_burst=1, spam_refill_s=60.0), Said()
    reporter.spawn("east/p", WARNING, "p", out.report("p warned 1"))
    await asyncio.sleep(0.01)
    reporter.spawn("east/p", WARNING, "p", out.report("p warned 2"))  # held back for a minute
    await asyncio.sleep(0.01)
    reporter.spawn("east/p", SCHEDULED, "p", out.report("p scheduled"))
    await asyncio.sleep(0.01)
    assert out.said == ["p warned 1", "p scheduled"] and reporter.pending() == 1  # the warning still waits


async def test_failures_make_one_summary_line_at_the_interval(caplog):
    reporter, out = Reporter(summary_interval_s=0.05), Said()
    for i in range(50):
        reporter.spawn(f"east/p{i}", FAILED_SCHEDULING, f"p{i}", out.report("x", fail=True))
    reporter.spawn("east/q", SCHEDULED, "q", out.report("x", fail=True))
    await asyncio.gather(*reporter.tasks)
    assert [r for r in caplog.records if r.name == report_queue.__name__] == []  # not one line per failure
    await asyncio.sleep(0.1)
    (line,) = [r for r in caplog.records if r.name == report_queue.__name__]
    assert line.levelname == "WARNING"
    assert line.getMessage().startswith("feedback to Kubernetes: 50 FailedScheduling reports failed for 50 pods; "
                                        "1 Scheduled reports failed for 1 pods (last: ")
    assert line.getMessage().endswith("apiserver away)")
