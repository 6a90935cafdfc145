"""A pod's requests as kube-scheduler counts them, and the resources it compares with a node's allocatable.

Each case mirrors k8s.io/component-helpers v0.37.2 resource/helpers.go (PodRequests,
aggregateContainerResourcesByFn, applyPodLevelResources) and k8s.io/kubernetes v1.37.2
pkg/scheduler/framework/plugins/noderesources/fit.go (fitsRequest), read in the module cache of the stack's own
Kubernetes build.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuplace.adapters.kube.pod_requests import fits_checked, node_resources, pod_requests
from gpuplace.adapters.kube.translate import node_event, pod_event


def container(name: str = "c", restart: str | None = None, **requests: str) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "resources": {"requests": {k.replace("_", "-"): v
                                                                        for k, v in requests.items()}}}
    if restart:
        body["restartPolicy"] = restart
    return body


def test_a_sidecar_runs_beside_the_app_and_counts_with_it():
    # KEP-753: a restartable init container is added to the containers' sum; 60 + 60 CPU, not max(60, 60).
    spec = {"containers": [container(cpu="60")], "initContainers": [container("side", "Always", cpu="60")]}
    assert pod_requests(spec) == {"cpu": 120_000}


def test_a_plain_init_container_needs_the_sidecars_started_before_it():
    # init peak = max(side 2, side 2 + init 10) = 12 > app 4 + side 2 = 6
    spec = {"containers": [container(cpu="4")],
            "initContainers": [container("side", "Always", cpu="2"), container("init", cpu="10")]}
    assert pod_requests(spec) == {"cpu": 12_000}
    # an init container before the sidecar does not need it: max(10, 2) = 10 > 6? yes: 10
    spec["initContainers"].reverse()
    assert pod_requests(spec) == {"cpu": 10_000}


def test_pod_level_requests_replace_the_containers_sum_for_the_resources_they_name():
    spec = {"containers": [container(cpu="1", memory="1Gi", ephemeral_storage="1Gi")],
            "resources": {"requests": {"cpu": "200", "hugepages-2Mi": "4Mi"}}}
    # cpu from the pod level; memory and ephemeral-storage still the containers' (pod level cannot name the
    # latter: IsSupportedPodLevelResource is cpu, memory and hugepages-*)
    assert pod_requests(spec) == {"cpu": 200_000, "memory": 2**30, "ephemeral-storage": 2**30,
                                  "hugepages-2Mi": 4 * 2**20}


def test_overhead_is_added_last_and_sub_milli_cpu_rounds_up():
    spec = {"containers": [container(cpu="100u")], "overhead": {"cpu": "250m", "memory": "64Mi"}}
    # MilliValue rounds up: 0.0001 + 0.25 CPU = 250.1m -> 251m
    assert pod_requests(spec) == {"cpu": 251, "memory": 64 * 2**20}


def test_only_the_resources_node_resources_fit_compares_are_kept():
    assert [fits_checked(n) for n in ("cpu", "ephemeral-storage", "hugepages-1Gi", "example.com/fpga",
                                      "kubernetes.io/batteries", "attachable-volumes-csi-x", "pods")] == \
        [True, True, True, True, True, True, False]
    assert node_resources({"cpu": "96", "pods": "110", "ephemeral-storage": "100Gi", "example.com/fpga": "2"}) == \
        {"cpu": 96_000, "ephemeral-storage": 100 * 2**30, "example.com/fpga": 2}


def _pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "robots", "uid": "u1"},
            "spec": {"schedulerName": "gpuplace", **spec}}


def test_a_pod_event_carries_every_other_resource_but_the_gpu_vocabularies():
    event = pod_event(_pod({"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "example.com/fpga": "2"},
                                    "requests": {"cpu": "1", "ephemeral-storage": "10Gi", "hugepages-1Gi": "2Gi"}}},
        container("side", cpu="60")], "initContainers": [container("s", "Always", cpu="30")]}),
        cluster="east", region="eu")
    assert event.cpu_milli == 91_000 and event.gpu is not None and event.gpu.gpu_count == 1
    assert event.resources == {"example.com/fpga": 2, "ephemeral-storage": 10 * 2**30, "hugepages-1Gi": 2 * 2**30}


def test_a_node_event_carries_its_other_allocatable_resources():
    node = {"metadata": {"name": "n1", "labels": {}}, "spec": {},
            "status": {"allocatable": {"cpu": "96", "memory": "768Gi", "pods": "110", "nvidia.com/gpu": "8",
                                       "nvidia.com/mig-1g.10gb": "7", "ephemeral-storage": "500Gi",
                                       "hugepages-2Mi": "0", "example.com/fpga": "4"}}}
    event = node_event(node, cluster="east", region="eu")
    assert event.resources == {"ephemeral-storage": 500 * 2**30, "example.com/fpga": 4, "hugepages-2Mi": 0}
    assert event.extended == {"nvidia.com/mig-1g.10gb": 7}


@pytest.mark.parametrize("spec, field", [
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "slam"}}}]}}},
     "spec.affinity.podAntiAffinity"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
     "spec.topologySpreadConstraints"),
    ({"volumes": [{"name": "cfg", "configMap": {"name": "c"}},
                  {"name": "data", "persistentVolumeClaim": {"claimName": "weights"}}]},
     "spec.volumes[1].persistentVolumeClaim"),
    ({"initContainers": [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
     "spec.initContainers[0].resources.limits[nvidia.com/gpu]"),
])
def test_a_field_gpuplace_does_not_evaluate_is_named_on_the_event(spec, field):
    assert pod_event(_pod({"containers": [container(cpu="1")], **spec}), cluster="e", region="r").unevaluated == \
        (field,)


def test_volumes_kube_scheduler_does_not_place_by_are_not_named():
    spec = {"containers": [container(cpu="1")], "volumes": [
        {"name": "a", "emptyDir": {}}, {"name": "b", "secret": {"secretName": "s"}},
        {"name": "c", "projected": {"sources": []}}, {"name": "d", "csi": {"driver": "secrets-store.csi.k8s.io"}}]}
    assert pod_event(_pod(spec), cluster="e", region="r").unevaluated == ()
    other = pod_event(_pod({**spec, "schedulerName": "default-scheduler",
                            "topologySpreadConstraints": [{"maxSkew": 1}]}), cluster="e", region="r")
    assert other.unevaluated == ()  # another scheduler's pod: only charged, its fields are its scheduler's
