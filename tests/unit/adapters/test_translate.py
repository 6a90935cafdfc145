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


def _gpu_pod(resources):
    pod = _pod()
    pod["metadata"]["annotations"] = {}
    pod["spec"]["containers"] = [{"name": "c", "resources": resources}]
    return pod


def test_a_hami_limit_reads_back_canonical_and_means_mib():
    # written `nvidia.com/gpumem: 5000`, the API server returns "5k"; HAMi's GenerateResourceRequests reads
    # Quantity.AsInt64() = 5000 MiB (not 5000 bytes, which rounded up to 1 MiB before)
    event = pod_event(_gpu_pod({"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "5k"}}), cluster="east",
                      region="eu")
    assert (event.gpu.gpu_count, event.gpu.memory_mib_per_gpu, event.request_error) == (1, 5000, None)


def test_hami_resources_fall_back_to_requests():
    # HAMi device.go GenerateResourceRequests: ctr.Resources.Limits[name], else ctr.Resources.Requests[name]
    event = pod_event(_gpu_pod({"requests": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}}),
                      cluster="east", region="eu")
    assert event.gpu.share_milli_per_gpu == 500


def test_a_mig_limit_becomes_an_extended_count_not_a_gpu():
    limits = {"nvidia.com/mig-1g.10gb": "2"}
    event = pod_event(_gpu_pod({"limits": limits, "requests": limits}), cluster="east", region="eu")
    assert (event.gpu, event.extended, event.request_error) == (None, {"nvidia.com/mig-1g.10gb": 2}, None)


def test_a_bad_mig_limit_is_reported():
    event = pod_event(_gpu_pod({"limits": {"nvidia.com/mig-1g.10gb": "65"}}), cluster="east", region="eu")
    assert (event.extended, event.request_error) == ({}, "nvidia.com/mig-1g.10gb must be in [0, 64], got '65'")


def _node(allocatable):
    return {"metadata": {"name": "n1", "labels": {}}, "spec": {},
            "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}}


def test_a_node_reports_pod_slots_and_mig_slices():
    event = node_event(_node({"cpu": "96", "memory": "768Gi", "pods": "110", "nvidia.com/gpu": "0",
                              "nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "2"}),
                       cluster="east", region="eu")
    assert event.max_pods == 110
    assert event.extended == {"nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 2}


def test_a_node_without_pod_slots_reports_none():
    event = node_event(_node({"cpu": "4", "memory": "16Gi"}), cluster="east", region="eu")
    assert (event.max_pods, event.extended) == (None, {})


def test_another_schedulers_pod_is_not_managed_and_a_finished_pod_is_gone():
    pod = _pod(nodeName="n1")
    del pod["spec"]["schedulerName"]  # default-scheduler
    assert pod_event(pod, cluster="east", region="eu").managed is False
    assert pod_event(_pod(), cluster="east", region="eu").managed is True
    pod["status"] = {"phase": "Succeeded"}
    assert pod_event(pod, cluster="east", region="eu").kind == "deleted"


def test_requests_count_init_containers_and_overhead_as_kube_scheduler_does():
    # component-helpers resource.PodRequests: max(sum of containers, largest init container) + overhead.
    pod = _pod(initContainers=[{"name": "fetch", "resources": {"requests": {"cpu": "4", "memory": "1Gi"}}}],
               overhead={"cpu": "250m", "memory": "64Mi"})
    event = pod_event(pod, cluster="east", region="eu")
    assert (event.cpu_milli, event.memory_mib) == (4000 + 250, 2048 + 64)


def test_node_rules_are_read_from_the_spec():
    pod = _pod(nodeSelector={"zone": "a"}, tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
               affinity={"nodeAffinity": {
                   "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                       {"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["3"]}],
                        "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]},
                   "preferredDuringSchedulingIgnoredDuringExecution": [
                       {"weight": 7, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}}]}})
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"},
                                             {"containerPort": 81}]
    event = pod_event(pod, cluster="east", region="eu")
    assert event.node_selector == {"zone": "a"}
    assert [(t.key, t.operator, t.effect) for t in event.tolerations] == [("gpu", "Exists", "NoSchedule")]
    (term,) = event.required_terms
    assert [(r.key, r.operator, r.values) for r in term.match_expressions] == [("rank", "Gt", ("3",))]
    assert [(r.key, r.values) for r in term.match_fields] == [("metadata.name", ("n1",))]
    assert [(p.weight, p.term.match_expressions[0].operator) for p in event.preferred_terms] == [(7, "Exists")]
    assert [(p.port, p.protocol, p.host_ip) for p in event.host_ports] == [(8080, "TCP", "10.0.0.1")]
