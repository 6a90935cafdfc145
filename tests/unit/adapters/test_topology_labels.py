"""A node's GPU topology labels -> NodeEvent.gpu_numa / gpu_nvlink (adapters/kube/topology_labels.py), and the
pod's gpuplace.io/gpu-topology annotation -> GpuRequest.topology. A bad label is ignored with one warning."""

from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError

from gpuplace.adapters.kube import topology_labels
from gpuplace.adapters.kube.topology_labels import GPU_NUMA, GPU_NVLINK, gpu_topology
from gpuplace.adapters.kube.translate import node_event
from gpuplace.adapters.kube.vocabulary import GPUPLACE_TOPOLOGY, RequestError, parse_pod_request
from tests.builders import node_event as built_node_event


def kube_node(name: str, labels: dict[str, str], gpus: str = "8") -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                  "nvidia.com/gpu.memory": "81559", **labels}},
            "spec": {}, "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": gpus},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def test_a_node_describes_its_gpus_numa_nodes_and_nvlink_domains():
    event = node_event(kube_node("dgx", {GPU_NUMA: "0.0.0.0.1.1.1.1", GPU_NVLINK: "0.0.0.0.0.0.0.0"}),
                       cluster="east", region="eu")
    assert event.gpu_numa == (0, 0, 0, 0, 1, 1, 1, 1) and event.gpu_nvlink == (0,) * 8


def test_a_node_without_the_labels_has_no_topology():
    event = node_event(kube_node("plain", {}), cluster="east", region="eu")
    assert event.gpu_numa == () and event.gpu_nvlink == ()


@pytest.mark.parametrize(("text", "problem"), [
    ("0,0,0,0,1,1,1,1", "not dot-separated non-negative integers"),  # commas are not legal in label values
    ("0.0.1.1", "4 value(s) for 8 GPU(s)"),
    ("0.0.0.0.1.1.1.-1", "not dot-separated"),
    ("0.0.0.0.1.1.1.", "not dot-separated"),
    ("zero", "not dot-separated"),
    ("", "not dot-separated"),
    ("0.0.0.0.1.1.1.4294967296", "at most 2147483647"),
])
def test_a_bad_label_is_ignored_and_named(text, problem):
    parsed = gpu_topology({GPU_NUMA: text, GPU_NVLINK: "0.0.1.1.2.2.3.3"}, 8)
    assert parsed.numa == () and parsed.nvlink == (0, 0, 1, 1, 2, 2, 3, 3)  # the good label still counts
    (reason,) = parsed.problems
    assert reason.startswith(f"label {GPU_NUMA}={text!r} ignored") and problem in reason


def test_the_node_event_leaves_a_bad_label_out_and_warns_once(caplog):
    topology_labels.warn_once.cache_clear()
    node = kube_node("typo", {GPU_NUMA: "0,0,0,0,1,1,1,1"})
    with caplog.at_level(logging.WARNING, logger=topology_labels.__name__):
        events = [node_event(node, cluster="east", region="eu") for _ in range(3)]  # status updates repeat it
    assert all(e.gpu_numa == () and e.gpu_count == 8 for e in events)  # the node and its GPUs stay
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"node typo: label {GPU_NUMA}='0,0,0,0,1,1,1,1' ignored: not dot-separated non-negative "
                        "integers, one per GPU (e.g. \"0.0.1.1\")"]


def test_the_node_event_contract_wants_one_value_per_gpu():
    with pytest.raises(ValidationError, match="gpu_numa has 3 value"):
        built_node_event("n1", gpus=2, gpu_numa=(0, 0, 1))
    with pytest.raises(ValidationError):
        built_node_event("n1", gpus=2, gpu_nvlink=(0, -1))
    assert built_node_event("n1", gpus=2, gpu_numa=(0, 1)).gpu_numa == (0, 1)


@pytest.mark.parametrize("limits", [{"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "4", "nvidia.com/gpumem": "20000"}])
def test_a_pod_may_require_one_gpu_domain_in_any_vocabulary(limits):
    request = parse_pod_request({GPUPLACE_TOPOLOGY: "required"}, [limits])
    assert request.gpu is not None and (request.gpu.gpu_count, request.gpu.topology) == (4, "required")
    assert parse_pod_request({}, [limits]).gpu.topology == "preferred"


@pytest.mark.parametrize(("annotations", "limits", "reason"), [
    ({GPUPLACE_TOPOLOGY: "Required"}, [{"nvidia.com/gpu": "4"}],
     "gpuplace.io/gpu-topology must be one of preferred, required, got 'Required'"),
    ({GPUPLACE_TOPOLOGY: "required"}, [{}], "gpuplace.io/gpu-topology given without any GPU request"),
])
def test_a_bad_topology_annotation_is_a_request_error(annotations, limits, reason):
    with pytest.raises(RequestError, match=reason):
        parse_pod_request(annotations, limits)
