"""Every GPU-request vocabulary of DESIGN §3, as tables; errors carry the key and the reason.

Each row cites the rule it mirrors. Anchors, as read for this table:
- HAMi: Project-HAMi/HAMi pkg/device/nvidia/device.go (MutateAdmission, validateMemoryPercentage,
  mutateContainerResource, defaultExclusiveCoreIfNeeded, GenerateResourceRequests, Fit) and the chart defaults in
  charts/hami/templates/scheduler/device-configmap.yaml (defaultMemory 0, defaultCores 0, defaultGPUNum 1,
  memoryFactor 1);
- KAI: NVIDIA/KAI-Scheduler pkg/binder/plugins/gpusharing/gpu-request/gpu_request_validator.go (ValidateGpuRequests,
  run by the admission webhook) and pkg/scheduler/api/pod_info/pod_info.go (updatePodAdditionalFields);
- MIG: NVIDIA/k8s-device-plugin internal/rm/rm.go (AddDefaultResourcesToConfig, mig-strategy=mixed);
- Kubernetes: apimachinery resource.Quantity (ParseQuantity, AsInt64; the API server returns the canonical form,
  so a limit written 5000 reads back as "5k") and kube-scheduler noderesources/fit.go (fitsRequest).
"""

import re
from decimal import Decimal

import pytest

from gpuplace.adapters.kube import quantity
from gpuplace.adapters.kube.vocabulary import RequestError, parse_pod_request
from gpuplace.contracts import GpuRequest

MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_2G = "nvidia.com/mig-2g.20gb"


def _gpu(count=1, memory=None, share=None, models=()):
    return GpuRequest(gpu_count=count, memory_mib_per_gpu=memory, share_milli_per_gpu=share, allowed_models=models)


ACCEPTED = [
    # --- gpuplace annotations (quantity.memory_mib / quantity.milli) ---
    # binary suffix: 9420Mi = 9420 MiB
    pytest.param({"gpuplace.io/gpu-memory": "9420Mi"}, [], _gpu(memory=9420), id="gpuplace-Mi"),
    # 9.2Gi = 9.2 * 1024 MiB = 9420.8 MiB, rounded up to 9421
    pytest.param({"gpuplace.io/gpu-memory": "9.2Gi"}, [], _gpu(memory=9421), id="gpuplace-Gi-rounds-up"),
    # a bare number is MiB (HAMi's and KAI's unit), not bytes
    pytest.param({"gpuplace.io/gpu-memory": "9420"}, [], _gpu(memory=9420), id="gpuplace-bare-MiB"),
    # decimal suffixes keep Kubernetes' meaning, bytes: 10G = 10^10 B / 2^20 = 9536.7 MiB -> 9537
    pytest.param({"gpuplace.io/gpu-memory": "10G"}, [], _gpu(memory=9537), id="gpuplace-G-is-bytes"),
    pytest.param({"gpuplace.io/gpu-compute": "300m"}, [], _gpu(share=300), id="gpuplace-compute-milli"),
    pytest.param({"gpuplace.io/gpu-compute": "0.3"}, [], _gpu(share=300), id="gpuplace-compute-decimal"),
    # 16Gi = 16 * 1024 = 16384 MiB on each of 2 GPUs
    pytest.param({"gpuplace.io/gpu-count": "2", "gpuplace.io/gpu-memory": "16Gi",
                  "gpuplace.io/gpu-models": "A100|H100"}, [], _gpu(2, memory=16384, models=("A100", "H100")),
                 id="gpuplace-count-memory-models"),
    pytest.param({"gpuplace.io/gpu-count": "2"}, [], _gpu(2, share=1000), id="gpuplace-count-alone-is-whole"),
    # --- HAMi container resources ---
    # HAMi device.go GenerateResourceRequests: mem.AsInt64() is MiB; the API server canonicalises 5000 to "5k"
    pytest.param({}, [{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "5k"}], _gpu(memory=5000), id="hami-5k-is-5000MiB"),
    # HAMi device.go GenerateResourceRequests: mem.AsInt64() of "3000" = 3000 MiB
    pytest.param({}, [{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}], _gpu(memory=3000), id="hami-3000"),
    # HAMi device.go GenerateResourceRequests: "1Gi".AsInt64() = 2^30 <= MaxInt32 (memoryFactor 1): 2^30 MiB, taken
    # as written (device_test.go rejects it only when MemoryFactor doubles it); no GPU has it, so it never places
    pytest.param({}, [{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1Gi"}], _gpu(memory=2**30), id="hami-1Gi"),
    # HAMi device.go GenerateResourceRequests: Memreq 4000, Coresreq 30 -> 30% of compute = 300 milli
    pytest.param({}, [{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"}],
                 _gpu(memory=4000, share=300), id="hami-memory-and-cores"),
    # HAMi device.go mutateContainerResource: gpumem without nvidia.com/gpu gets defaultGPUNum (1)
    pytest.param({}, [{"nvidia.com/gpumem": "4000"}], _gpu(memory=4000), id="hami-default-gpu-num"),
    # HAMi device.go Fit: memreq = Totalmem * 50 / 100; defaultExclusiveCoreIfNeeded: 50 != 100, so cores stay 0.
    # One share per GPU in gpuplace: 50 * 10 = 500 milli, which charges floor(500 * M / 1000) = HAMi's memreq
    pytest.param({}, [{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}], _gpu(share=500),
                 id="hami-percentage"),
    # HAMi device.go defaultExclusiveCoreIfNeeded: percentage 100 and no gpucores -> gpucores 100, the whole GPU
    pytest.param({}, [{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}], _gpu(share=1000),
                 id="hami-percentage-100-exclusive"),
    # HAMi device.go Fit: 50% of memory and 80% of compute; gpuplace charges the larger, max(50, 80) * 10 = 800
    pytest.param({}, [{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "80"}],
                 _gpu(share=800), id="hami-percentage-and-cores-larger"),
    # HAMi device.go Fit: `if k.MemPercentagereq != 101 && k.Memreq == 0` -> a positive gpumem wins over the percentage
    pytest.param({}, [{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpumem-percentage": "50"}],
                 _gpu(memory=4000), id="hami-gpumem-wins-over-percentage"),
    # HAMi device.go defaultExclusiveCoreIfNeeded: percentage 100 makes gpucores 100 even beside gpumem
    pytest.param({}, [{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpumem-percentage": "100"}],
                 _gpu(memory=4000, share=1000), id="hami-percentage-100-beside-gpumem"),
    # HAMi device.go GenerateResourceRequests: no gpumem, no percentage, defaultMemory 0 -> MemPercentagereq 100:
    # all of the memory, so the whole GPU whatever gpucores says (this table had 300 milli: wrong, fixed)
    pytest.param({}, [{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"}], _gpu(share=1000),
                 id="hami-cores-alone-takes-all-memory"),
    # HAMi device.go GenerateResourceRequests: gpucores 0 is defaultCores, no compute reserved
    pytest.param({}, [{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "0"}],
                 _gpu(memory=4000), id="hami-cores-zero"),
    # HAMi device.go GenerateResourceRequests: Nums 2, Memreq 8192 on each
    pytest.param({}, [{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "8192"}], _gpu(2, memory=8192), id="hami-two-gpus"),
    # HAMi device.go GenerateResourceRequests: only the container asking for GPUs counts; others ask nothing
    pytest.param({}, [{"cpu": "1"}, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}], _gpu(memory=2000),
                 id="hami-one-container-of-two"),
    # --- KAI annotations ---
    # KAI gpu_request_validator.go validateGpuFractionAnnotation: strconv.ParseFloat, 0 < f < 1
    pytest.param({"gpu-fraction": "0.5"}, [], _gpu(share=500), id="kai-fraction"),
    # KAI validateGpuFractionAnnotation: ParseFloat reads the exponent form, 5e-1 = 0.5
    pytest.param({"gpu-fraction": "5e-1"}, [], _gpu(share=500), id="kai-fraction-exponent"),
    # KAI validateGpuFractionAnnotation: any float64; 0.3333 * 1000 = 333.3 milli, rounded up to 334
    pytest.param({"gpu-fraction": "0.3333"}, [], _gpu(share=334), id="kai-fraction-rounds-up"),
    # KAI validateMultiFractionRequest: ParseUint, > 0; one device is the default (resources.GetNumGPUFractionDevices)
    pytest.param({"gpu-fraction": "0.25", "gpu-fraction-num-devices": "1"}, [], _gpu(share=250), id="kai-one-device"),
    # KAI validateMemoryAnnotation: strconv.ParseUint(s, 10, 64) > 0, MiB (docs/gpu-sharing: "2000 (in Mib)")
    pytest.param({"gpu-memory": "2000"}, [], _gpu(memory=2000), id="kai-memory"),
    # KAI pod_info.go updatePodAdditionalFields: NewGpuResourceRequirementWithMultiFraction(2, 0, 2000), per device
    pytest.param({"gpu-memory": "2000", "gpu-fraction-num-devices": "2"}, [], _gpu(2, memory=2000),
                 id="kai-memory-two-devices"),
    # --- whole GPUs ---
    # kube resource nvidia.com/gpu, summed over containers: 1 + 2
    pytest.param({}, [{"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"}], _gpu(3, share=1000), id="whole-summed"),
    pytest.param({}, [{"cpu": "2"}], None, id="no-gpu"),
    # kube noderesources/fit.go fitsRequest: a zero request is skipped, no GPU
    pytest.param({}, [{"nvidia.com/gpu": "0"}], None, id="whole-zero-is-none"),
]


@pytest.mark.parametrize(("annotations", "limits", "expected"), ACCEPTED)
def test_each_vocabulary_parses(annotations, limits, expected):
    request = parse_pod_request(annotations, limits)
    assert (request.gpu, request.extended) == (expected, {})


MIG = [
    # k8s-device-plugin rm.go AddDefaultResourcesToConfig: "mig-" + profile is a countable resource, not a GPU share
    pytest.param([{MIG_1G: "1"}], None, {MIG_1G: 1}, id="mig-one"),
    # summed over containers, per profile: 1 + 2 of 1g.10gb, 1 of 2g.20gb
    pytest.param([{MIG_1G: "1"}, {MIG_1G: "2", MIG_2G: "1"}], None, {MIG_1G: 3, MIG_2G: 1}, id="mig-summed"),
    # rm.go AddDefaultResourcesToConfig: "+" in a profile becomes ".", 1g.10gb+me -> mig-1g.10gb.me
    pytest.param([{"nvidia.com/mig-1g.10gb.me": "1"}], None, {"nvidia.com/mig-1g.10gb.me": 1}, id="mig-media"),
    # kube noderesources/fit.go fitsRequest: a zero request is skipped
    pytest.param([{MIG_1G: "0"}], None, {}, id="mig-zero-is-none"),
    # mixed strategy: full GPUs stay nvidia.com/gpu, beside MIG slices; two resources, as kube counts them
    pytest.param([{"nvidia.com/gpu": "1", MIG_2G: "1"}], _gpu(share=1000), {MIG_2G: 1}, id="mig-beside-whole-gpu"),
]


@pytest.mark.parametrize(("limits", "gpu", "extended"), MIG)
def test_mig_profiles_are_counted_not_shared(limits, gpu, extended):
    request = parse_pod_request({}, limits)
    assert (request.gpu, request.extended) == (gpu, extended)


REFUSED = [
    # --- gpuplace annotations ---
    pytest.param({"gpuplace.io/gpu-memory": "lots"}, [], "gpuplace.io/gpu-memory: not a quantity", id="gp-memory-text"),
    pytest.param({"gpuplace.io/gpu-memory": "0"}, [], "gpuplace.io/gpu-memory must be in [1, 2147483647], got '0'",
                 id="gp-memory-zero"),
    # 2Pi = 2^51 B = 2^31 MiB, one above the int32 cap
    pytest.param({"gpuplace.io/gpu-memory": "2Pi"}, [], "must be in [1, 2147483647]", id="gp-memory-too-large"),
    pytest.param({"gpuplace.io/gpu-memory": "500m"}, [], "'m' is not a memory unit", id="gp-memory-milli"),
    pytest.param({"gpuplace.io/gpu-memory": "-4Gi"}, [], "not a non-negative quantity", id="gp-memory-negative"),
    pytest.param({"gpuplace.io/gpu-compute": "1500m"}, [], "gpuplace.io/gpu-compute must be in [1, 1000]",
                 id="gp-compute-over-one"),
    pytest.param({"gpuplace.io/gpu-compute": "0"}, [], "gpuplace.io/gpu-compute must be in [1, 1000]",
                 id="gp-compute-zero"),
    pytest.param({"gpuplace.io/gpu-compute": "0.0005"}, [], "finer than a milli-unit", id="gp-compute-too-fine"),
    pytest.param({"gpuplace.io/gpu-count": "0"}, [], "gpuplace.io/gpu-count must be in [1, 64]", id="gp-count-zero"),
    pytest.param({"gpuplace.io/gpu-count": "65"}, [], "gpuplace.io/gpu-count must be in [1, 64]", id="gp-count-65"),
    pytest.param({"gpuplace.io/gpu-count": "1.5"}, [], "gpuplace.io/gpu-count: not a whole number", id="gp-count-frac"),
    pytest.param({"gpuplace.io/gpu-count": "2", "gpuplace.io/gpu-compute": "300m"}, [], "single-GPU",
                 id="gp-share-on-two-gpus"),
    pytest.param({"gpuplace.io/gpu-memory": "4Gi", "gpu-fraction": "0.5"}, [],
                 "more than one vocabulary: gpuplace, KAI", id="gp-and-kai"),
    pytest.param({"gpuplace.io/gpu-memory": "4Gi"}, [{"nvidia.com/gpu": "1"}], "together with a nvidia.com/gpu limit",
                 id="gp-and-whole"),
    pytest.param({"gpuplace.io/deadline-ms": "-5"}, [], "positive", id="deadline-negative"),
    # physical bounds (issue 40: a frame rate of 1e308 Hz was accepted and swamped the latency model's sums)
    pytest.param({"gpuplace.io/frame-rate": "1e308"}, [], "beyond any perception stream (at most 10000 Hz)",
                 id="frame-rate-absurd"),
    pytest.param({"gpuplace.io/deadline-ms": "1e12"}, [], "beyond any perception stream (at most 3.6e+06 ms)",
                 id="deadline-absurd"),
    pytest.param({"gpuplace.io/gpu-models": "A100"}, [], "without any GPU request", id="models-alone"),
    # --- HAMi ---
    # HAMi device.go GenerateResourceRequests: mem.AsInt64() fails on a fraction -> the request is rejected
    pytest.param({}, [{"nvidia.com/gpumem": "1.5"}], "nvidia.com/gpumem: not a whole number", id="hami-mem-fraction"),
    pytest.param({}, [{"nvidia.com/gpumem": "500m"}], "nvidia.com/gpumem: not a whole number", id="hami-mem-milli"),
    # HAMi device.go GenerateResourceRequests: memnums < 0 -> rejected
    pytest.param({}, [{"nvidia.com/gpumem": "-1"}], "not a non-negative quantity", id="hami-mem-negative"),
    # HAMi device.go GenerateResourceRequests: memnums > MaxInt32 / memoryFactor -> rejected; 2Gi = 2^31
    pytest.param({}, [{"nvidia.com/gpumem": "2Gi"}], "nvidia.com/gpumem must be in [1, 2147483647], got '2Gi'",
                 id="hami-mem-over-int32"),
    # HAMi device.go GenerateResourceRequests treats 0 as unset (then the whole memory); gpuplace reports it
    pytest.param({}, [{"nvidia.com/gpumem": "0"}], "nvidia.com/gpumem must be in [1, 2147483647]", id="hami-mem-zero"),
    # HAMi device.go validateMemoryPercentage (MutateAdmission): above 100 is refused at admission
    pytest.param({}, [{"nvidia.com/gpumem-percentage": "101"}], "nvidia.com/gpumem-percentage must be in [1, 100]",
                 id="hami-percent-101"),
    # HAMi device.go GenerateResourceRequests ignores 0 with an error log ("not positive"); gpuplace reports it
    pytest.param({}, [{"nvidia.com/gpumem-percentage": "0"}], "nvidia.com/gpumem-percentage must be in [1, 100]",
                 id="hami-percent-zero"),
    # HAMi device.go GenerateResourceRequests: AsInt64 fails on 50.5 and the percentage is silently dropped
    pytest.param({}, [{"nvidia.com/gpumem-percentage": "50.5"}], "nvidia.com/gpumem-percentage: not a whole number",
                 id="hami-percent-fraction"),
    # HAMi device.go Fit clamps gpucores above 100 to 100 with an error log; gpuplace reports it
    pytest.param({}, [{"nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "130"}],
                 "nvidia.com/gpucores must be in [0, 100], got '130'", id="hami-cores-130"),
    pytest.param({}, [{"nvidia.com/gpucores": "-5"}], "not a non-negative quantity", id="hami-cores-negative"),
    # HAMi device.go GenerateResourceRequests: Nums 0 asks for no device, whatever gpumem says
    pytest.param({}, [{"nvidia.com/gpu": "0", "nvidia.com/gpumem": "4000"}], "nvidia.com/gpu must be in [1, 64]",
                 id="hami-zero-gpus"),
    pytest.param({}, [{"nvidia.com/gpu": "65", "nvidia.com/gpumem": "4000"}], "nvidia.com/gpu must be in [1, 64]",
                 id="hami-65-gpus"),
    # HAMi allows 50% of each of 2 GPUs; gpuplace's GpuRequest shares only single-GPU requests
    pytest.param({}, [{"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50"}], "single-GPU",
                 id="hami-percent-on-two-gpus"),
    pytest.param({}, [{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"}], "single-GPU",
                 id="hami-cores-on-two-gpus"),
    # HAMi device.go GenerateResourceRequests runs per container, each with its own GPUs; gpuplace places one set
    pytest.param({}, [{"nvidia.com/gpumem": "4000"}, {"nvidia.com/gpumem": "2000"}], "more than one container",
                 id="hami-two-containers"),
    pytest.param({}, [{"nvidia.com/gpumem": "4000"}, {"nvidia.com/gpu": "1"}], "more than one container",
                 id="hami-and-whole-in-another-container"),
    pytest.param({"gpu-memory": "2000"}, [{"nvidia.com/gpumem": "4000"}], "more than one vocabulary: KAI, HAMi",
                 id="hami-and-kai"),
    # --- KAI ---
    # KAI validateGpuFractionAnnotation: `gpuFraction <= 0 || gpuFraction >= 1` is refused (this table allowed 1: fixed)
    pytest.param({"gpu-fraction": "1"}, [], "gpu-fraction must be in (0, 1), got '1'", id="kai-fraction-one"),
    pytest.param({"gpu-fraction": "1.5"}, [], "gpu-fraction must be in (0, 1)", id="kai-fraction-over-one"),
    pytest.param({"gpu-fraction": "0"}, [], "gpu-fraction must be in (0, 1)", id="kai-fraction-zero"),
    pytest.param({"gpu-fraction": "half"}, [], "gpu-fraction must be a decimal number", id="kai-fraction-text"),
    # Go's ParseFloat reads "NaN" and NaN passes KAI's range check; gpuplace refuses it
    pytest.param({"gpu-fraction": "NaN"}, [], "gpu-fraction must be a decimal number", id="kai-fraction-nan"),
    # Go's ParseFloat reads hex floats (0x1p-1 = 0.5); gpuplace refuses them rather than half-implement Go's syntax
    pytest.param({"gpu-fraction": "0x1p-1"}, [], "gpu-fraction must be a decimal number", id="kai-fraction-hex"),
    # ParseFloat underflows 1e-400 to 0, which KAI refuses
    pytest.param({"gpu-fraction": "1e-400"}, [], "gpu-fraction must be in (0, 1)", id="kai-fraction-underflow"),
    # KAI allows 0.5 of each of 2 devices (multi-fraction); gpuplace shares only single-GPU requests
    pytest.param({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}, [], "single-GPU", id="kai-multi-fraction"),
    # KAI validateMemoryAnnotation: ParseUint(s, 10, 64) takes no unit (this module took 2Gi as 2048 MiB: fixed)
    pytest.param({"gpu-memory": "2Gi"}, [], "gpu-memory must be a positive integer, got '2Gi'", id="kai-memory-unit"),
    pytest.param({"gpu-memory": "+5"}, [], "gpu-memory must be a positive integer", id="kai-memory-sign"),
    pytest.param({"gpu-memory": "-5"}, [], "gpu-memory must be a positive integer", id="kai-memory-negative"),
    # KAI validateMemoryAnnotation: `gpuMemory == 0` is refused
    pytest.param({"gpu-memory": "0"}, [], "gpu-memory must be in [1, 2147483647]", id="kai-memory-zero"),
    pytest.param({"gpu-memory": "2147483648"}, [], "gpu-memory must be in [1, 2147483647]", id="kai-memory-over-int32"),
    # KAI ValidateGpuRequests: "cannot request both GPU and GPU memory"
    pytest.param({"gpu-memory": "2000", "gpu-fraction": "0.5"}, [], "KAI gpu-memory together with gpu-fraction",
                 id="kai-memory-and-fraction"),
    pytest.param({"gpu-memory": "2000"}, [{"nvidia.com/gpu": "1"}], "KAI gpu-memory together with",
                 id="kai-memory-and-whole"),
    # KAI ValidateGpuRequests: "cannot have both GPU fraction request and whole GPU resource request/limit"
    pytest.param({"gpu-fraction": "0.5"}, [{"nvidia.com/gpu": "1"}], "together with a nvidia.com/gpu limit",
                 id="kai-fraction-and-whole"),
    # KAI ValidateGpuRequests: "cannot request multiple fractional devices without specifying fraction portion..."
    pytest.param({"gpu-fraction-num-devices": "2"}, [], "gpu-fraction-num-devices without gpu-fraction or gpu-memory",
                 id="kai-devices-alone"),
    # KAI validateMultiFractionRequest: ParseUint, `fractionsCount == 0` refused
    pytest.param({"gpu-memory": "2000", "gpu-fraction-num-devices": "0"}, [],
                 "gpu-fraction-num-devices must be in [1, 64]", id="kai-devices-zero"),
    pytest.param({"gpu-memory": "2000", "gpu-fraction-num-devices": "65"}, [], "gpu-fraction-num-devices must be in",
                 id="kai-devices-65"),
    # --- whole GPUs ---
    # Kubernetes validation: an extended resource must be an integer
    pytest.param({}, [{"nvidia.com/gpu": "1.5"}], "nvidia.com/gpu: not a whole number", id="whole-fraction"),
    pytest.param({}, [{"nvidia.com/gpu": "65"}], "nvidia.com/gpu must be in [0, 64]", id="whole-65"),
    pytest.param({}, [{"nvidia.com/gpu": "40"}, {"nvidia.com/gpu": "40"}], "adds up to 80", id="whole-sum-80"),
    # --- MIG ---
    pytest.param({}, [{MIG_1G: "1.5"}], f"{MIG_1G}: not a whole number", id="mig-fraction"),
    pytest.param({}, [{MIG_1G: "65"}], f"{MIG_1G} must be in [0, 64]", id="mig-65"),
    pytest.param({}, [{MIG_1G: "40"}, {MIG_1G: "40"}], f"{MIG_1G} adds up to 80", id="mig-sum-80"),
    pytest.param({"gpuplace.io/gpu-memory": "4Gi"}, [{MIG_1G: "1"}], "MIG slices (nvidia.com/mig-1g.10gb) together "
                 "with a gpuplace GPU request", id="mig-and-gpuplace"),
    pytest.param({}, [{MIG_1G: "1", "nvidia.com/gpumem": "4000"}], "together with a HAMi GPU request",
                 id="mig-and-hami"),
    pytest.param({"gpu-fraction": "0.5"}, [{MIG_1G: "1"}], "together with a KAI GPU request", id="mig-and-kai"),
    # gpu-models filters GPUs; a MIG-only pod has no GpuRequest to carry it
    pytest.param({"gpuplace.io/gpu-models": "A100"}, [{MIG_1G: "1"}], "without any GPU request", id="mig-and-models"),
]


@pytest.mark.parametrize(("annotations", "limits", "reason"), REFUSED)
def test_bad_requests_are_reported_not_guessed(annotations, limits, reason):
    with pytest.raises(RequestError, match=re.escape(reason)):
        parse_pod_request(annotations, limits)


def test_latency_contract_annotations():
    request = parse_pod_request(
        {"gpuplace.io/deadline-ms": "33", "gpuplace.io/frame-rate": "30", "gpuplace.io/workload": "yolo"}, []
    )
    assert (request.deadline_ms, request.frame_rate_hz, request.workload) == (33.0, 30.0, "yolo")


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("1Gi", 1024),
        ("1G", 954),  # 10^9 B = 953.67 MiB -> 954
        ("1048576", 1048576),  # bare: MiB
        ("1536Ki", 2),  # 1.5 MiB -> 2
        ("0.5Gi", 512),
        ("1e3", 1000),  # apimachinery decimal exponent: 1000, bare -> MiB
        ("1E", 953674316407),  # E is exa (10^18 B), not an exponent
    ],
)
def test_memory_quantities_round_up_to_mib(text, mib):
    assert quantity.memory_mib(text) == mib


@pytest.mark.parametrize(
    ("text", "whole"),
    [
        # apimachinery Quantity.AsInt64: the exact integer value, whatever the suffix
        ("3", 3),
        ("5k", 5000),
        ("2000m", 2),
        ("1Ki", 1024),
        ("1e3", 1000),
        ("+7", 7),
    ],
)
def test_counts_read_like_quantity_as_int64(text, whole):
    assert quantity.count(text) == whole


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("1.5", "not a whole number"),  # AsInt64 fails on a fraction
        ("500m", "not a whole number"),
        ("7 k", "not a quantity"),  # ParseQuantity: no space inside
        ("1e", "not a quantity"),
        ("-1", "not a non-negative quantity"),
        ("1e99", "out of range"),
        ("9223372036854775808", "too large"),  # 2^63: beyond int64, AsInt64 fails
    ],
)
def test_counts_refuse_what_as_int64_refuses(text, reason):
    with pytest.raises(ValueError, match=re.escape(reason)):
        quantity.count(text)


def test_values_keep_exact_decimals():
    assert [quantity.value(t) for t in ("300m", "5k", "1Mi")] == [Decimal("0.3"), 5000, 2**20]
