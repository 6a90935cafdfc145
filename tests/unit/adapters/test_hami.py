"""HAMi's node registration and scheduler annotations (adapters/kube/hami.py), golden against HAMi's own code.

Every expected string is built as HAMi's encoder builds it or copied from HAMi's tests and docs, at
Project-HAMi/HAMi@4707fb02c91c545bc7343ce26dba4c32919f9a3e (v2.10.0); what gpuplace writes is then read back
through a line-by-line port of HAMi's readers (tests/unit/adapters/hami_go_port.py): the device plugin's
GetPendingPod must pick the pod, and decodePodSingleDevice / popNextContainerDevices must hand the right container
the GPUs gpuplace chose.
"""

import pytest

from gpuplace.adapters.kube import hami
from gpuplace.adapters.kube.translate import node_event, pod_event
from gpuplace.adapters.kube.vocabulary import hami_request
from gpuplace.contracts.events import HamiRequest
from tests.unit.adapters import hami_go_port as go

# docs/develop/protocol.md, "Device Register": the legacy (7-field) encoding, two V100s
PROTOCOL_MD = ("GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
               "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:")
# pkg/device/nvidia/device_test.go (GetNodeDevices cases): today's JSON (device.MarshalNodeDevices)
JSON_P4 = ('[{"id":"GPU-0","count":5,"devmem":8192,"devcore":100,"type":"NVIDIA-Tesla P4","numa":0,"health":true,'
           '"index":0}]')
JSON_TWO_V100 = ('[{"id":"GPU-0","count":1,"devmem":8192,"devcore":100,"type":"NVIDIA-V100","health":true},'
                 '{"id":"GPU-1","count":1,"devmem":8192,"devcore":100,"type":"NVIDIA-V100","health":true}]')
# pkg/device/devices_test.go Test_DecodeNodeDevices, "str is old format"
LEGACY_P4 = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true:"


# -- node registration ---------------------------------------------------------------------------------------
def test_the_legacy_registration_of_protocol_md():
    devices = hami.decode_registration(PROTOCOL_MD)
    assert [(d.uuid, d.count, d.memory_mib, d.cores, d.type, d.numa, d.health, d.index, d.mode) for d in devices] == [
        ("GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec", 10, 32768, 100, "NVIDIA-Tesla V100-PCIE-32GB", 0, True, 0,
         "hami-core"),
        ("GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448", 10, 32768, 100, "NVIDIA-Tesla V100-PCIE-32GB", 0, True, 0,
         "hami-core"),
    ]


def test_the_legacy_registration_of_hamis_decoder_test():
    (device,) = hami.decode_registration(LEGACY_P4)  # devices_test.go: Index 0, Count 10, Devmem 7680, ...
    assert (device.uuid, device.count, device.memory_mib, device.cores, device.type, device.health) == (
        "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4", 10, 7680, 100, "NVIDIA-Tesla P4", True)


def test_the_nine_field_legacy_encoding_carries_index_and_mode():
    # EncodeNodeDevices writes ID,Count,Devmem,Devcore,Type,Numa,Health,Index,Mode followed by ":"
    text = "GPU-b,10,40960,100,NVIDIA-A100,1,true,1,hami-core:GPU-a,10,40960,100,NVIDIA-A100,0,false,0,hami-core:"
    devices = hami.registered_devices({hami.REGISTER: text})
    assert [(d.uuid, d.index, d.numa, d.health) for d in devices] == [("GPU-a", 0, 0, False), ("GPU-b", 1, 1, True)]


def test_the_json_registration_of_hamis_device_test():
    (device,) = hami.decode_registration(JSON_P4)
    assert (device.uuid, device.count, device.memory_mib, device.cores, device.type, device.health) == (
        "GPU-0", 5, 8192, 100, "NVIDIA-Tesla P4", True)
    assert [d.uuid for d in hami.decode_registration(JSON_TWO_V100)] == ["GPU-0", "GPU-1"]


def test_json_keys_match_case_insensitively_and_absent_fields_are_zero_as_in_encoding_json():
    (device,) = hami.decode_registration('[{"ID":"GPU-9","DevMem":1024}]')
    assert (device.uuid, device.memory_mib, device.index, device.health, device.mode) == ("GPU-9", 1024, 0, False, "")


def test_mig_and_mps_devices_are_left_out_and_the_rest_ordered_by_index():
    text = ('[{"id":"GPU-2","devmem":1,"index":2,"mode":"hami-core"},{"id":"GPU-1","devmem":1,"index":1,'
            '"mode":"mig"},{"id":"GPU-0","devmem":1,"mode":"hami-core"},{"id":"GPU-3","devmem":1,"index":3,'
            '"mode":"mps"}]')
    assert [d.uuid for d in hami.registered_devices({hami.REGISTER: text})] == ["GPU-0", "GPU-2"]
    assert hami.registered_devices({}) is None


@pytest.mark.parametrize("text, message", [
    ("GPU-0,10,1024,100,NVIDIA,0,true", "missing device separator"),  # devices_test.go: no ":"
    ("GPU-0,notanint,7680,100,NVIDIA-Tesla P4,0,true:", "invalid count field"),
    ("GPU-0,10,notanint,100,NVIDIA-Tesla P4,0,true:", "invalid memory field"),
    ("GPU-0,10,7680,notanint,NVIDIA-Tesla P4,0,true:", "invalid core field"),
    ("GPU-0,10,7680,100,NVIDIA-Tesla P4,notanint,true:", "invalid numa field"),
    ("GPU-0,10,7680,100,NVIDIA-Tesla P4,0,yes:", "invalid health field"),
    ("GPU-0,10,7680,100,NVIDIA-Tesla P4,0:", "unexpected field count 6"),
    ("GPU-0,10,7680,100,NVIDIA,0,true,-1,hami-core:", "must not be negative"),
    ("GPU-0,10,4294967296,100,NVIDIA,0,true:", "invalid memory field"),  # int32
    ("[]", "lists no GPU"),  # GetNodeDevices: "no gpu found on node"
    ("[{", "not JSON"),
    ('[{"id":"GPU-0","devmem":"8192"}]', "devmem is not a int"),
])
def test_a_registration_hami_would_refuse_is_refused(text, message):
    with pytest.raises(hami.RegistrationError, match=message):
        hami.decode_registration(text)


def _hami_node(register=JSON_TWO_V100, labels=None):
    return {"metadata": {"name": "hami-n1", "labels": labels or {},
                         "annotations": {hami.REGISTER: register, hami.HANDSHAKE: "Reported 2026-12-02 10:00:00"}},
            "spec": {},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "20"},  # 2 GPUs x split 10
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_a_hami_node_offers_its_registered_gpus_not_its_split_count():
    event = node_event(_hami_node(), cluster="east", region="eu")
    assert (event.gpu_count, event.gpu_memory_mib, event.gpu_model) == (2, 8192, "NVIDIA-V100")
    labelled = node_event(_hami_node(labels={"nvidia.com/gpu.product": "Tesla-V100"}), cluster="east", region="eu")
    assert labelled.gpu_model == "Tesla-V100"  # GFD's label, when there is one, names the model as on other nodes


def test_a_hami_node_with_uneven_memory_offers_the_smallest_and_a_bad_registration_is_an_error():
    uneven = '[{"id":"GPU-0","devmem":8192,"mode":"hami-core"},{"id":"GPU-1","devmem":4096,"index":1}]'
    assert node_event(_hami_node(uneven), cluster="east", region="eu").gpu_memory_mib == 4096
    with pytest.raises(ValueError, match="invalid count field"):
        node_event(_hami_node("GPU-0,x,1,1,T,0,true:"), cluster="east", region="eu")


# -- the pod's request, per HAMi container ----------------------------------------------------------------------
def test_the_hami_request_counts_init_containers_first_and_fills_hamis_defaults():
    assert hami_request([{"nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}], 0) == HamiRequest(
        position=0, containers=1, gpu_count=1, memory_mib=3000, cores=30)
    # no gpucores: exclusive (100) when all the memory is asked for (defaultExclusiveCoreIfNeeded)
    assert hami_request([{}, {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "100"}], 1) == HamiRequest(
        position=2, containers=3, gpu_count=2, memory_percent=100, cores=100)
    # no gpumem and no percentage: 100% (GenerateResourceRequests with defaultMemory 0)
    assert hami_request([{"nvidia.com/gpucores": "20"}], 0) == HamiRequest(
        position=0, containers=1, gpu_count=1, memory_percent=100, cores=20)
    assert hami_request([{"nvidia.com/gpumem-percentage": "50"}], 0) == HamiRequest(
        position=0, containers=1, gpu_count=1, memory_percent=50, cores=0)
    # gpumem and a percentage: Fit takes Memreq (MemPercentagereq applies only when Memreq == 0)
    assert hami_request([{"nvidia.com/gpumem": "1024", "nvidia.com/gpumem-percentage": "50"}], 0).memory_percent is None
    assert hami_request([{"nvidia.com/gpu": "1"}], 0) is None  # whole-GPU vocabulary, not HAMi's


def test_a_pod_event_carries_its_hami_request_and_other_pods_none():
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
           "spec": {"schedulerName": "gpuplace",
                    "initContainers": [{"name": "init", "resources": {}}],
                    "containers": [{"name": "side", "resources": {}},
                                   {"name": "main", "resources": {"limits": {"nvidia.com/gpumem": "3000"}}}]}}
    event = pod_event(pod, cluster="east", region="eu")
    assert event.hami == HamiRequest(position=2, containers=3, gpu_count=1, memory_mib=3000, cores=0)
    pod["spec"]["containers"][1]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    assert pod_event(pod, cluster="east", region="eu").hami is None


# -- the bind annotations -------------------------------------------------------------------------------------
NODE = "node67-4v100"
NOW = 1705054796


def _annotations(request, gpu_indices, register=PROTOCOL_MD):
    devices = hami.registered_devices({hami.REGISTER: register})
    return hami.bind_annotations(HamiRequest(**request).model_dump(), devices, gpu_indices, NODE, NOW)


def _golden(per_container):
    """The devices string as HAMi's EncodePodSingleDevice (the Go port) writes it."""
    return go.EncodePodSingleDevice([[go.ContainerDevice(u, "NVIDIA", m, c) for u, m, c in ctr]
                                     for ctr in per_container])


V100_0, V100_1 = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec", "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"


def test_one_gpu_by_memory_is_written_as_hamis_scheduler_writes_it():
    annotations = _annotations({"position": 0, "containers": 1, "gpu_count": 1, "memory_mib": 3000, "cores": 30},
                               [1])
    devices = f"{V100_1},NVIDIA,3000,30:;"  # protocol.md's shape; alloc_refactor_test.go's "GPU-aaa,NVIDIA,3000,50:;"
    assert devices == _golden([[(V100_1, 3000, 30)]])
    assert annotations == {
        "hami.io/vgpu-devices-to-allocate": devices,  # PatchAnnotations: the same string under both keys
        "hami.io/vgpu-devices-allocated": devices,
        "hami.io/vgpu-node": NODE, "hami.io/vgpu-time": str(NOW),  # Filter
        "hami.io/bind-phase": "allocating", "hami.io/bind-time": str(NOW),  # Bind
    }


def test_a_percentage_is_of_the_chosen_gpus_registered_memory_truncated_as_int32_division():
    annotations = _annotations({"position": 0, "containers": 1, "gpu_count": 1, "memory_percent": 33, "cores": 0},
                               [0], register="GPU-x,10,15109,100,NVIDIA-Tesla T4,0,true:")
    assert annotations[hami.TO_ALLOCATE] == _golden([[("GPU-x", 15109 * 33 // 100, 0)]]) == "GPU-x,NVIDIA,4985,0:;"


def test_two_gpus_for_the_last_container_behind_an_init_container_and_a_sidecar():
    annotations = _annotations({"position": 2, "containers": 3, "gpu_count": 2, "memory_percent": 100,
                                "cores": 100}, [0, 1])
    assert annotations[hami.TO_ALLOCATE] == _golden([[], [], [(V100_0, 32768, 100), (V100_1, 32768, 100)]]) == (
        f";;{V100_0},NVIDIA,32768,100:{V100_1},NVIDIA,32768,100:;")


def test_a_gpu_the_registration_no_longer_has_fails_the_bind():
    with pytest.raises(hami.RegistrationError, match="not in hami.io/node-nvidia-register"):
        _annotations({"position": 0, "containers": 1, "gpu_count": 1, "memory_mib": 1, "cores": 0}, [2])
    with pytest.raises(hami.RegistrationError, match="2 GPU"):
        _annotations({"position": 0, "containers": 1, "gpu_count": 1, "memory_mib": 1, "cores": 0}, [0, 1])


@pytest.mark.parametrize("request_, gpus, init, containers", [
    ({"position": 0, "containers": 1, "gpu_count": 1, "memory_mib": 3000, "cores": 30}, [1], [], ["main"]),
    ({"position": 1, "containers": 2, "gpu_count": 1, "memory_percent": 50, "cores": 0}, [0], [], ["side", "main"]),
    ({"position": 2, "containers": 3, "gpu_count": 2, "memory_percent": 100, "cores": 100}, [1, 0], ["init"],
     ["side", "main"]),
    ({"position": 0, "containers": 2, "gpu_count": 1, "memory_mib": 1024, "cores": 10}, [1], ["init"], ["main"]),
])
def test_hamis_device_plugin_finds_the_pod_and_hands_its_container_the_chosen_gpus(request_, gpus, init, containers):
    annotations = _annotations(request_, gpus)
    other = go.Pod("other", "Pending", "elsewhere", dict(annotations), [], ["c"])  # vgpu-node names our node only
    bound = go.Pod("p", "Pending", NODE, annotations, init, containers)
    assert go.GetPendingPod([other, bound], NODE) is bound
    single = go.decodePodSingleDevice("NVIDIA", bound)
    assert single == go.DecodePodDevices(go.SupportDevices, {go.SupportDevices["NVIDIA"]: annotations[hami.ALLOCATED]}
                                         )["NVIDIA"]
    name, devices = go.popNextContainerDevices(bound, single)
    assert name == (init + containers)[request_["position"]]
    registered = hami.registered_devices({hami.REGISTER: PROTOCOL_MD})
    assert [d.UUID for d in devices] == [registered[i].uuid for i in gpus]
    expected_mem = request_.get("memory_mib") or 32768 * request_.get("memory_percent", 0) // 100
    assert {(d.Type, d.Usedmem, d.Usedcores) for d in devices} == {("NVIDIA", expected_mem, request_["cores"])}
    with pytest.raises(go.GoError, match="no pending device allocation"):
        go.popNextContainerDevices(bound, single)  # one container's GPUs, nothing else
    # round trip: HAMi's decoder reads one entry per container plus an empty one after the last ";"
    # (devices_test.go Test_DecodePodDevices: "Trailing ';' produces an extra empty ContainerDevices"), and HAMi's
    # encoder writes those containers' entries back into the very string gpuplace wrote
    decoded = go.decodePodSingleDevice("NVIDIA", bound)
    assert len(decoded) == request_["containers"] + 1 and decoded[-1] == []
    assert go.EncodePodSingleDevice(decoded[:-1]) == annotations[hami.TO_ALLOCATE]


def test_without_bind_phase_or_time_hamis_device_plugin_finds_no_pod():
    annotations = _annotations({"position": 0, "containers": 1, "gpu_count": 1, "memory_mib": 1, "cores": 0}, [0])
    for key in (hami.BIND_PHASE, hami.BIND_TIME, hami.VGPU_NODE):
        partial = {k: v for k, v in annotations.items() if k != key}
        with pytest.raises(go.GoError, match=f"no binding pod found on node {NODE}"):
            go.GetPendingPod([go.Pod("p", "Pending", NODE, partial, [], ["c"])], NODE)
