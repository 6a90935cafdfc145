"""What confines a pod to its GPU share, as cluster-watcher reads it from nodes and pods (adapters/kube/enforcement)."""

from __future__ import annotations

import pytest

from gpuplace.adapters.kube import enforcement, hami
from gpuplace.adapters.kube.translate import node_event, pod_event
from gpuplace.contracts.events import GpuRequest, HamiRequest

READY = [{"type": "Ready", "status": "True"}]


def node(allocatable: dict[str, str], labels: dict[str, str] | None = None,
         annotations: dict[str, str] | None = None) -> dict:
    return {"metadata": {"name": "n1", "labels": labels or {}, "annotations": annotations or {}}, "spec": {},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", **allocatable}, "conditions": READY}}


def pod(annotations: dict[str, str], limits: dict[str, str] | None = None) -> dict:
    return {"metadata": {"name": "p", "namespace": "robots", "uid": "u1", "annotations": annotations},
            "spec": {"schedulerName": "gpuplace",
                     "containers": [{"name": "c", "resources": {"limits": limits or {}}}]}}


@pytest.mark.parametrize(("allocatable", "labels", "annotations", "expected"), [
    ({"nvidia.com/gpu": "8"}, {}, {}, "none"),  # the standard device plugin alone: whole GPUs, no memory limit
    ({"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7"}, {}, {}, "mig"),
    ({"nvidia.com/gpu": "8"}, {enforcement.DECLARED: "site-plugin"}, {}, "declared"),
    ({"nvidia.com/gpu": "20"}, {}, {hami.REGISTER: '[{"id":"GPU-0","count":10,"devmem":16384,"devcore":100,'
                                                   '"type":"NVIDIA-Tesla V100","health":true}]'}, "hami"),
])
def test_each_node_says_which_enforcement_it_has(allocatable, labels, annotations, expected):
    assert node_event(node(allocatable, labels, annotations), cluster="east", region="eu").gpu_enforcement == expected


def test_dra_comes_first_then_the_operators_word_then_hami_then_mig():
    assert enforcement.node_has({enforcement.DECLARED: "x"}, dra=True, hami=True, mig=True) == "dra"
    assert enforcement.node_has({enforcement.DECLARED: "x"}, dra=False, hami=True, mig=True) == "declared"
    assert enforcement.node_has({}, dra=False, hami=True, mig=True) == "hami"
    assert enforcement.node_has({enforcement.DECLARED: ""}, dra=False, hami=False, mig=False) == "none"


def test_a_share_needs_an_enforcement_and_whole_gpus_need_none():
    whole = GpuRequest(gpu_count=2, share_milli_per_gpu=1000)
    sliced = GpuRequest(gpu_count=1, memory_mib_per_gpu=9420)
    fraction = GpuRequest(gpu_count=1, share_milli_per_gpu=500)
    hami_request = HamiRequest(position=0, containers=1, gpu_count=1, memory_mib=4096, memory_percent=None, cores=0)
    assert enforcement.pod_needs(whole, None, False) == ()
    assert enforcement.pod_needs(None, None, False) == ()
    assert enforcement.pod_needs(sliced, None, False) == ("declared",)
    assert enforcement.pod_needs(fraction, None, False) == ("declared",)
    assert enforcement.pod_needs(sliced, hami_request, False) == ("hami", "declared")
    assert enforcement.pod_needs(sliced, None, True) == ()  # a claim: its driver's node, which prepares it


def test_pods_carry_what_holds_their_share_and_whether_the_operator_waives_it():
    sliced = pod({"gpuplace.io/gpu-memory": "9420Mi"})
    event = pod_event(sliced, cluster="east", region="eu")
    assert (event.gpu_enforcement, event.unenforced_sharing) == (("declared",), False)
    event = pod_event(sliced, cluster="east", region="eu", unenforced_sharing=True)
    assert (event.gpu_enforcement, event.unenforced_sharing) == (("declared",), True)
    kai = pod_event(pod({"gpu-fraction": "0.5"}), cluster="east", region="eu")
    assert kai.gpu_enforcement == ("declared",)
    hami_pod = pod_event(pod({}, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096"}), cluster="east", region="eu")
    assert hami_pod.gpu_enforcement == ("hami", "declared")
    whole = pod_event(pod({}, {"nvidia.com/gpu": "1"}), cluster="east", region="eu", unenforced_sharing=True)
    assert (whole.gpu_enforcement, whole.unenforced_sharing) == ((), False)  # the device plugin hands it out
    other = pod({"gpuplace.io/gpu-memory": "9420Mi"})
    other["spec"]["schedulerName"] = "default-scheduler"
    assert pod_event(other, cluster="east", region="eu").gpu_enforcement == ()  # not placed by gpuplace
