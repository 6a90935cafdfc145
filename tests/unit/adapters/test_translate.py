"""Kubernetes objects -> events: what the cluster-watcher publishes."""

from gpuplace.adapters.kube.translate import node_event, pod_event
from gpuplace.adapters.kube.watcher import ChangeFilter


def _pod(**spec_extra):
    return {
        "metadata": {"name": "slam-0", "namespace": "robots", "uid": "u1",
                     "annotations": {"gpuplace.io/gpu-memory": "9420Mi", "gpuplace.io/deadline-ms": "80"},
                     "ownerReferences": [{"kind": "ReplicaSet", "name": "slam-7d9", "controller": True}],
                     "creationTimestamp": "2026-11-30T10:00:00Z"},
        "spec": {"schedulerName": "gpuplace", "priority": 100, **spec_extra,
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}}}]},
    }


def test_a_pending_pod_carries_its_parsed_request():
    event = pod_event(_pod(), cluster="east", region="eu")
    assert (event.kind, event.gpu.memory_mib_per_gpu, event.deadline_ms) == ("pending", 9420, 80.0)
    assert (event.cpu_milli, event.memory_mib, event.priority, event.owner) == (1500, 2048, 100, "ReplicaSet/slam-7d9")
    assert event.kafka_key() == b"east/robots/slam-0"


def test_a_bound_pod_and_a_bad_request():
    pod = _pod(nodeName="n1")
    pod["metadata"]["annotations"]["gpuplace.io/gpu-memory"] = "lots"
    event = pod_event(pod, cluster="east", region="eu")
    assert event.kind == "bound" and event.node_name == "n1"
    assert event.gpu is None and "not a quantity" in event.request_error


def test_a_node_reports_its_gpus_from_feature_discovery_labels():
    node = {"metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                                                  "nvidia.com/gpu.memory": "40960"}},
            "spec": {"taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "96", "memory": "768Gi", "nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    event = node_event(node, cluster="east", region="eu")
    assert (event.gpu_count, event.gpu_memory_mib, event.cpu_milli, event.memory_mib) == (8, 40960, 96000, 786432)
    assert event.ready and event.taints == ("gpu=true:NoSchedule",)


def test_the_watcher_passes_changes_only():
    changes = ChangeFilter()
    first = pod_event(_pod(), cluster="east", region="eu")
    again = pod_event(_pod(), cluster="east", region="eu")  # a status heartbeat: same content, new event id
    bound = pod_event(_pod(nodeName="n1"), cluster="east", region="eu")
    assert [changes.changed(e) for e in (first, again, bound)] == [True, False, True]
