"""Every GPU-request vocabulary of DESIGN §3, as a table; errors carry the reason."""

import re

import pytest

from gpuplace.adapters.kube import quantity
from gpuplace.adapters.kube.vocabulary import RequestError, parse_pod_request
from gpuplace.contracts import GpuRequest


@pytest.mark.parametrize(
    ("annotations", "limits", "expected"),
    [
        # gpuplace annotations: 9420Mi on one GPU
        ({"gpuplace.io/gpu-memory": "9420Mi"}, [], GpuRequest(gpu_count=1, memory_mib_per_gpu=9420)),
        # 9.2Gi = 9.2 * 1024 MiB = 9420.8 MiB, rounded up to 9421
        ({"gpuplace.io/gpu-memory": "9.2Gi"}, [], GpuRequest(gpu_count=1, memory_mib_per_gpu=9421)),
        ({"gpuplace.io/gpu-compute": "300m"}, [], GpuRequest(gpu_count=1, share_milli_per_gpu=300)),
        (
            {"gpuplace.io/gpu-count": "2", "gpuplace.io/gpu-memory": "16Gi", "gpuplace.io/gpu-models": "A100|H100"},
            [],
            GpuRequest(gpu_count=2, memory_mib_per_gpu=16384, allowed_models=("A100", "H100")),
        ),
        # HAMi: 4000 MiB and 30% of one GPU's cores -> 300 milli
        ({}, [{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"}],
         GpuRequest(gpu_count=1, memory_mib_per_gpu=4000, share_milli_per_gpu=300)),
        # KAI: half a GPU
        ({"gpu-fraction": "0.5"}, [], GpuRequest(gpu_count=1, share_milli_per_gpu=500)),
        ({"gpu-memory": "2000"}, [], GpuRequest(gpu_count=1, memory_mib_per_gpu=2000)),
        # whole GPUs, summed over containers: 1 + 2
        ({}, [{"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"}], GpuRequest(gpu_count=3, share_milli_per_gpu=1000)),
        ({}, [{"cpu": "2"}], None),
    ],
)
def test_each_vocabulary_parses(annotations, limits, expected):
    assert parse_pod_request(annotations, limits).gpu == expected


@pytest.mark.parametrize(
    ("annotations", "limits", "reason"),
    [
        ({"gpuplace.io/gpu-memory": "lots"}, [], "not a quantity"),
        ({"gpuplace.io/gpu-memory": "4Gi", "gpu-fraction": "0.5"}, [], "more than one vocabulary"),
        ({"gpu-fraction": "0.5"}, [{"nvidia.com/gpu": "1"}], "together with a nvidia.com/gpu limit"),
        ({"gpu-fraction": "1.5"}, [], "must be in (0, 1]"),
        ({}, [{"nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "130"}], "percentage"),
        ({"gpuplace.io/gpu-count": "2", "gpuplace.io/gpu-compute": "300m"}, [], "single-GPU"),
        ({"gpuplace.io/deadline-ms": "-5"}, [], "positive"),
        ({"gpuplace.io/gpu-models": "A100"}, [], "without any GPU request"),
    ],
)
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
    [("1Gi", 1024), ("1G", 954), ("1048576", 1048576), ("1536Ki", 2), ("0.5Gi", 512)],
)
def test_memory_quantities_round_up_to_mib(text, mib):
    # 1G = 10^9 B = 953.67 MiB -> 954; 1536Ki = 1.5 MiB -> 2
    assert quantity.memory_mib(text) == mib
