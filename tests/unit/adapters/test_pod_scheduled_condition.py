"""PodScheduled as kube's podutil.UpdatePodCondition writes it: lastTransitionTime moves only on a flip."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuplace.adapters.kube.cluster_api import pod_scheduled_condition

NOW = datetime(2025, 3, 1, 12, 0, 5, tzinfo=UTC)
EARLIER = "2025-03-01T11:00:00Z"


def pod(*conditions: dict) -> dict:
    return {"status": {"conditions": [{"type": "Initialized", "status": "True"}, *conditions]}}


def scheduled(status: str, reason: str = "", message: str = "", at: str = EARLIER) -> dict:
    return {"type": "PodScheduled", "status": status, "reason": reason, "message": message, "lastTransitionTime": at}


CASES = [
    # (the pod, the message we write, the condition written or None)
    ("new pod, no condition: written, transition now", {"status": {}}, "full",
     {"status": "False", "message": "full", "lastTransitionTime": "2025-03-01T12:00:05Z"}),
    ("already False with this message: nothing to write", pod(scheduled("False", "Unschedulable", "full")), "full",
     None),
    ("False, a new message: written, the transition kept", pod(scheduled("False", "Unschedulable", "old")), "full",
     {"status": "False", "message": "full", "lastTransitionTime": EARLIER}),
    ("True (bound before): flips, transition now", pod(scheduled("True")), "full",
     {"status": "False", "message": "full", "lastTransitionTime": "2025-03-01T12:00:05Z"}),
]


@pytest.mark.parametrize(("pod_", "message", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pod_scheduled_condition(pod_, message, expected):
    written = pod_scheduled_condition(pod_, "False", "Unschedulable", message, NOW)
    if expected is None:
        assert written is None
    else:
        assert written == {"type": "PodScheduled", "reason": "Unschedulable", "lastProbeTime": None, **expected}
