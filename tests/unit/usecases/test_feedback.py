"""Feedback in Kubernetes: kube-scheduler's message for a waiting pod, and when PlacementService reports.

A waiting pod is reported once per change of its reasons (as the placements topic is), a bound pod once as
Scheduled, an unparseable request with its parse error; a report that fails never fails placement and is
counted in one summary line (the queue itself: test_report_queue.py).
"""

from __future__ import annotations

import pytest

from gpuplace.core.framework.interface import Code, Status
from gpuplace.usecases import feedback, report_queue
from gpuplace.usecases.decide import decider
from gpuplace.usecases.feedback import Unschedulable, fit_error_message, gpus_text
from gpuplace.usecases.placement import PlacementService
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory

U, R = Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
SMALL = "node has 2 GPU(s) of 8192 MiB; the pod needs 1 x (1000m, 12000 MiB)"

FIT_ERRORS = [
    # (nodes in the cluster, per-node statuses, kube-scheduler's FitError.Error())
    (3, {"a": Status(U, ("x",)), "b": Status(U, ("x",)), "c": Status(U, ("x",))},
     "0/3 nodes are available: 3 x."),
    # entries sort as strings, not by count: "10 b" < "2 a" < "2 c"
    (14, {**{f"b{i}": Status(U, ("b",)) for i in range(10)}, "a0": Status(R, ("a",)), "a1": Status(R, ("a",)),
          "c0": Status(U, ("c",)), "c1": Status(U, ("c",))},
     "0/14 nodes are available: 10 b, 2 a, 2 c."),
    # every reason of a node counts once: 1 node with two reasons + 1 with one of them
    (2, {"a": Status(U, ("cpu", "gpu")), "b": Status(U, ("gpu",))},
     "0/2 nodes are available: 1 cpu, 2 gpu."),
    (1, {"a": Status(R, ())}, "0/1 nodes are available: 1 unschedulable_and_unresolvable."),  # no reason: the code
    (0, {}, "0/0 nodes are available:"),
]


@pytest.mark.parametrize(("n_nodes", "statuses", "expected"), FIT_ERRORS)
def test_fit_error_message_is_kube_schedulers(n_nodes, statuses, expected):
    assert fit_error_message(n_nodes, statuses) == expected


@pytest.mark.parametrize(("indices", "memory_mib", "expected"), [
    ((3,), 9420, "(GPU 3: 9420 MiB)"),
    ((0, 1), 16384, "(GPUs 0, 1: 16384 MiB each)"),
    ((), 0, ""),
])
def test_gpus_text(indices, memory_mib, expected):
    assert gpus_text(indices, memory_mib) == expected


def test_unschedulable_is_the_plain_reasons_plus_the_message():
    reasons = Unschedulable({"Tesla-V100-SXM2-16GB": "2 node(s): full"}, "0/2 nodes are available: 2 full.")
    assert reasons == {"Tesla-V100-SXM2-16GB": "2 node(s): full"}  # dedup and the placements topic see a dict
    assert feedback.message(reasons) == "0/2 nodes are available: 2 full."
    assert feedback.message({"reserve": "capacity changed", "x": "y"}) == "reserve: capacity changed; x: y"


def service(uow_factory: FakeUnitOfWorkFactory, api: FakeClusterApi) -> PlacementService:
    return PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit")


async def test_a_waiting_pod_is_reported_once_per_reason_change_then_scheduled():
    api = FakeClusterApi()
    placement = service(FakeUnitOfWorkFactory(), api)
    await placement.on_node(node_event("small", gpu_memory_mib=8192))
    await placement.on_pod(pod_event("big", memory_mib=12000))
    await placement.on_node(node_event("small", gpu_memory_mib=8192))  # the same cluster again: same reasons
    await placement.drain()
    assert api.reports == [("unschedulable", "robots", "big", f"0/1 nodes are available: 1 {SMALL}.")]

    await placement.on_node(node_event("small2", gpu_memory_mib=8192))  # reasons change: 2 nodes say it
    await placement.drain()
    assert api.reports[1:] == [("unschedulable", "robots", "big", f"0/2 nodes are available: 2 {SMALL}.")]

    await placement.on_node(node_event("large", gpu_memory_mib=16384))  # fits: bound on GPU 0 of large
    await placement.drain()
    assert api.reports[2:] == [("scheduled", "robots", "big", "large", "(GPU 0: 12000 MiB)")]


async def test_an_unparseable_request_is_reported_with_its_parse_error():
    api = FakeClusterApi()
    placement = service(FakeUnitOfWorkFactory(), api)
    await placement.on_node(node_event("n1"))
    await placement.on_pod(pod_event("odd", memory_mib=None, request_error="not a quantity: 'lots'"))
    await placement.drain()
    assert api.reports == [("unschedulable", "robots", "odd", "invalid GPU request: not a quantity: 'lots'")]


class FailingFeedbackApi(FakeClusterApi):
    async def report_unschedulable(self, *args):
        raise ConnectionError("apiserver away")

    async def report_scheduled(self, *args):
        raise ConnectionError("apiserver away")


async def test_feedback_that_fails_never_fails_placement(caplog):
    api = FailingFeedbackApi()
    placement = service(FakeUnitOfWorkFactory(), api)
    await placement.on_node(node_event("n1", gpus=1))
    await placement.on_pod(pod_event("first", memory_mib=10000))
    await placement.on_pod(pod_event("second", memory_mib=10000))  # waits: its report fails
    await placement.drain()
    assert api.bound == {("robots", "first"): "n1"}
    (line,) = [r for r in caplog.records if r.name == report_queue.__name__]  # one summary line, not one per report
    assert line.levelname == "WARNING" and "1 FailedScheduling reports failed for 1 pods" in line.getMessage()
    assert "1 Scheduled reports failed for 1 pods" in line.getMessage() and "apiserver away" in line.getMessage()
