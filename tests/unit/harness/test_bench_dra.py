"""`bench dra` without a stack: the DRA manifests (as dra-format.md agrees them), reading allocations back, the first
failure and the pods pending then, and the side-by-side report with issue 13's verdict."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuplace.core.model import GpuRequest, Node, Pod
from gpuplace.harness import dra_objects
from gpuplace.harness.dra_report import Setup, markdown, report_json, verdict
from gpuplace.harness.dra_run import dra_node_manifest, first_failure_time, pending_at, placed_by_failure
from gpuplace.harness.pipeline_run import FLEET_LABEL

NODE = Node.with_gpus("east-n-0001", cpu_milli=96_000, memory_mib=768 * 1024, gpu_count=2,
                      gpu_model="NVIDIA-H100-80GB-HBM3", gpu_memory_mib=81_559)


def test_the_slice_is_the_nvidia_drivers_with_memory_as_consumable_capacity() -> None:
    body = dra_objects.resource_slice(NODE, {FLEET_LABEL: "r1"}, owner_uid="u-1")
    assert body["metadata"]["name"] == "east-n-0001-gpu.nvidia.com"
    assert body["metadata"]["ownerReferences"][0] == {"apiVersion": "v1", "kind": "Node", "name": NODE.name,
                                                           "uid": "u-1", "controller": True}
    spec = body["spec"]
    assert spec["driver"] == "gpu.nvidia.com" and spec["nodeName"] == NODE.name
    assert spec["pool"] == {"name": NODE.name, "generation": 1, "resourceSliceCount": 1}
    first = spec["devices"][0]
    assert first["name"] == "gpu-0" and first["allowMultipleAllocations"] is True
    assert first["capacity"] == {"memory": {"value": "81559Mi"}}
    assert first["attributes"]["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert first["attributes"]["index"] == {"int": 0}
    assert first["attributes"]["uuid"]["string"].startswith("GPU-")
    assert first["attributes"]["uuid"] != spec["devices"][1]["attributes"]["uuid"]
    assert dra_objects.resource_slice(NODE, {})["metadata"].get("ownerReferences") is None


def test_claims_ask_a_memory_slice_or_whole_devices_and_the_pod_names_its_claim() -> None:
    slice_pod = Pod("claim-00001", 1000, 2048, GpuRequest(count=1, memory_mib=4096), deadline_ms=33.3,
                    frame_rate_hz=30.0, workload_class="slam")
    whole_pod = Pod("claim-00002", 8000, 32768, GpuRequest(count=2, share_milli=1000), workload_class="training-2gpu")
    exactly = dra_objects.resource_claim(slice_pod, "ns")["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly == {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1,
                       "capacity": {"requests": {"memory": "4096Mi"}}}
    whole = dra_objects.resource_claim(whole_pod, "ns")
    assert whole["metadata"] == {"name": "claim-00002-gpu", "namespace": "ns"}
    assert whole["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}
    pod = dra_objects.pod_manifest(slice_pod, "ns", scheduler="gpuplace", node_selector={FLEET_LABEL: "r1"})
    assert pod["spec"]["schedulerName"] == "gpuplace"
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "claim-00001-gpu"}]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]
    assert pod["spec"]["nodeSelector"] == {FLEET_LABEL: "r1"}
    assert pod["metadata"]["annotations"] == {"gpuplace.io/workload": "slam"}  # no deadline unless asked
    timed = dra_objects.pod_manifest(slice_pod, "ns", scheduler="gpuplace", node_selector={}, deadlines=True)
    assert timed["metadata"]["annotations"] == {"gpuplace.io/workload": "slam", "gpuplace.io/deadline-ms": "33.3",
                                                "gpuplace.io/frame-rate": "30.0"}
    other = dra_objects.pod_manifest(slice_pod, "ns", scheduler="bench-kube-scheduler-x",
                                     node_selector={FLEET_LABEL: "r1"})
    other["spec"]["schedulerName"] = "gpuplace"
    assert other == pod  # the sides differ in schedulerName only


def test_the_device_class_selects_the_drivers_devices() -> None:
    assert dra_objects.device_class()["spec"]["selectors"] == [
        {"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]


def test_a_dra_node_has_no_device_plugin_gpus_nor_gpu_labels() -> None:
    manifest = dra_node_manifest(NODE, "r1")
    assert "nvidia.com/gpu" not in manifest["status"]["capacity"]
    assert "nvidia.com/gpu" not in manifest["status"]["allocatable"]
    assert not [k for k in manifest["metadata"]["labels"] if k.startswith("nvidia.com/")]
    assert manifest["metadata"]["labels"][FLEET_LABEL] == "r1"


def test_allocations_read_back_with_consumed_memory_or_the_whole_device() -> None:
    claim = {"status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-3",
         "consumedCapacity": {"memory": "4Gi"}, "shareID": "abc"},
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-4"},
        {"request": "gpu", "driver": "other.example.com", "pool": "n1", "device": "x"}]}}}}
    assert dra_objects.allocated_devices(claim) == [("n1", "gpu-3", 4096), ("n1", "gpu-4", None)]
    assert dra_objects.allocated_devices({"status": {}}) == []


def test_the_first_failure_is_the_earliest_report_of_a_pod_never_bound() -> None:
    reported = {"e/a": 1.0, "e/b": 2.0, "e/c": 3.0}
    bound = {"e/a": 5.0, "e/x": 0.5}  # a was reported and bound later: a transient, not a failure
    assert first_failure_time(reported, bound) == ("e/b", 2.0)
    assert first_failure_time({"e/a": 1.0}, bound) is None
    submitted = {"e/a": 0.1, "e/b": 0.2, "e/c": 2.5, "e/x": 0.0}
    assert sorted(pending_at(2.0, submitted, {"e/x"})) == ["e/a", "e/b"]  # c not yet submitted, x placed


def test_placements_at_the_first_failure_include_those_ahead_of_it_bound_later() -> None:
    order = {"e/x": 0, "e/y": 1, "e/f": 2, "e/z": 3, "e/w": 4}
    bound = ["e/x", "e/y", "e/z", "e/w"]
    bound_at = {"e/x": 1.0, "e/y": 5.0, "e/z": 1.5, "e/w": 6.0}  # y bound after f was turned away at 2.0
    # x bound before; y arrived ahead of f (decided in the same batch, bind landed later); z bound before though
    # it arrived after; w neither
    assert placed_by_failure("e/f", 2.0, bound, bound_at, order) == {"e/x", "e/y", "e/z"}


def side(bound: int, stranded_first: int | None, **extra: Any) -> dict[str, Any]:
    first = None if stranded_first is None else {
        "pod": "east-r1/claim-00042", "at_s": 12.5, "placed_before": 30, "submitted_before": 35,
        "claim": {"devices": 8, "memory_mib": None}, "stranded_mib": stranded_first, "free_mib": 100 * 1024,
        "pending": 5, "stranded_pct_of_free": round(100 * stranded_first / (100 * 1024), 2),
        "stranded_pct_of_capacity": 1.0,
        "turned_away": {"stranded_mib": 50 * 1024, "free_mib": 100 * 1024, "pending": 1, "stranded_pct_of_free": 50.0,
                        "stranded_pct_of_capacity": 3.0}}
    return {"run_id": "r1", "clusters": {}, "pods_submitted": 40, "pods_bound": bound, "pods_unschedulable": 40 - bound,
            "gpus_overcommitted": 0, "bound_twice": 0, "gpus_used": 30, "gpus_total": 32, "gpu_memory_used_pct": 80.0,
            "pending_to_bound_ms": {"p50": 100.0, "p95": 200.0, "p99": 300.0}, "binds_per_s": 12.5, "seconds": 20.0,
            "pods_pending": 40 - bound, "placed_slices": bound - 5, "placed_whole": 5, "pending_slices": 0,
            "pending_whole": 40 - bound, "devices_overcommitted": 0, "bound_without_allocation": 0,
            "allocated_not_bound": 0, "first_failure": first,
            "at_end": {"stranded_mib": 2048, "free_mib": 4096, "pending": 40 - bound, "stranded_pct_of_free": 50.0,
                       "stranded_pct_of_capacity": 0.5},
            "memory_total_mib": 1600 * 1024, "memory_allocated_mib": 1280 * 1024, "over_ask": 1.2, **extra}


SETUP = Setup(command="gpuplace bench dra --nodes 4 --pods 40", host="vm", nodes=4, pods=40, clusters=2, seed=7,
              gpus_per_node=8, fleet="2 x NVIDIA-A100-SXM4-40GB (40960 MiB)", stream="30 slices",
              arrival="in waves of 24, each once the one before settled", over_ask=1.2,
              policy="gpuplace", kube_scheduler="Kubernetes v1.37.2 (/bin/kube-scheduler)",
              kube_scheduler_limits="KubeSchedulerConfiguration clientConnection.qps 5000, clientConnection.burst "
                                    "10000", gpuplace_limits="no rate limit")


@pytest.mark.parametrize(("gp_bound", "gp_stranded", "placed", "half"), [
    (30, 5120, True, True),  # as many placed, exactly half stranded: the bar is inclusive
    (29, 0, False, True),
    (35, 5121, True, False),
    (35, None, True, True),  # nothing failed: nothing stranded at a first failure
])
def test_issue13_bar(gp_bound: int, gp_stranded: int | None, placed: bool, half: bool) -> None:
    bar = verdict({"kube-scheduler": side(30, 10240), "gpuplace": side(gp_bound, gp_stranded)})
    assert (bar["placed_at_least_as_many"], bar["stranded_at_most_half"], bar["met"]) == (placed, half,
                                                                                          placed and half)


def test_one_side_alone_is_reported_and_not_judged() -> None:
    runs = {"kube-scheduler": side(30, 10240)}
    assert verdict(runs)["met"] is None
    text = markdown(SETUP, runs)
    assert "| | kube-scheduler |" in text and "gpuplace |" not in text.split("\n\n")[3]
    assert "not assessed, only kube-scheduler ran" in text
    assert json.loads(json.dumps(report_json(SETUP, runs)))["issue13_bar"]["met"] is None


def test_the_report_puts_both_sides_side_by_side_with_the_client_setting() -> None:
    text = markdown(SETUP, {"kube-scheduler": side(30, 10240), "gpuplace": side(34, 1024)})
    assert "| | kube-scheduler | gpuplace |" in text
    assert "| pods placed | **30**/40 (25 slices, 5 whole-GPU) | **34**/40 (29 slices, 5 whole-GPU) |" in text
    assert "claim-00042 (8 whole GPU(s)) at 12.5 s, after 30 placed / 35 submitted" in text
    assert "10.0 GiB (10.0% of 100.0 GiB free; 5 pending)" in text
    assert "| ... for the claims turned away by then only | 50.0 GiB (50.0% of 100.0 GiB free; 1 pending) |" in text
    assert "| pending->bound p50 / p95 / p99 ms | 100 / 200 / 300 | 100 / 200 / 300 |" in text
    assert "clientConnection.qps 5000, clientConnection.burst 10000" in text
    assert "Issue 13's bar: met" in text
    everything = side(40, None)
    everything["at_end"] = {**everything["at_end"], "pending": 0}
    text = markdown(SETUP, {"kube-scheduler": everything})
    assert "no claim failed" in text  # free memory with nothing waiting for it is not stranded
    assert "| GPU memory stranded at the end | no claim pending (4.0 GiB free) |" in text

