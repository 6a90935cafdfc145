"""The typical workload M: rank shapes by count, cut at the coverage, renormalise."""

import pytest

from gpuplace.core.model import GpuRequest, Pod
from gpuplace.core.snapshot import GpuType
from gpuplace.core.workload import typical_workload

TYPES = (GpuType("V100M16", 16384), GpuType("T4", 16384))


def _pods(*shapes):
    return [Pod(f"p{i}-{j}", cpu, 0, request) for i, (cpu, request, n) in enumerate(shapes) for j in range(n)]


def test_shapes_are_taken_by_count_until_the_coverage_and_renormalised():
    pods = _pods((4000, GpuRequest(1, 500), 5), (8000, GpuRequest(1, 1000), 3), (2000, GpuRequest(), 1),
                 (6000, GpuRequest(), 1))
    # counts 5, 3, 1, 1 of 10 tasks; 80% of 10 = 8 tasks: 5 + 3 = 8 >= 8 after two shapes
    workload = typical_workload(pods, TYPES, coverage_pct=80.0)
    assert workload.keys == ((4000, 500, 1, "", -1), (8000, 1000, 1, "", -1))
    # renormalised: 0.5 / 0.8 = 0.625 and 0.3 / 0.8 = 0.375
    assert workload.probability.tolist() == pytest.approx([0.625, 0.375])


def test_ties_go_to_the_larger_shape_first_and_cpu_only_shapes_count():
    pods = _pods((4000, GpuRequest(1, 500), 5), (8000, GpuRequest(1, 1000), 3), (2000, GpuRequest(), 1),
                 (6000, GpuRequest(), 1))
    # 95% of 10 = 9.5: 5 + 3 + 1 = 9 < 9.5, so all four shapes are taken; the two 1-task shapes tie
    # and the larger (6 cores) ranks first. All shapes taken: frequencies stay count / total.
    workload = typical_workload(pods, TYPES, coverage_pct=95.0)
    assert [k[0] for k in workload.keys] == [4000, 8000, 6000, 2000]
    assert workload.probability.tolist() == [0.5, 0.3, 0.1, 0.1]
    assert workload.gpu_count.tolist() == [1, 1, 0, 0]


def test_allowed_models_and_memory_requests_resolve_per_gpu_type():
    pods = _pods((4000, GpuRequest(1, None, 8192, ("T4",)), 1))
    workload = typical_workload(pods, TYPES, coverage_pct=100.0)
    # 8192 MiB of 16384 MiB = 500 milli on either type; only T4 is allowed
    assert workload.share_milli_by_type.tolist() == [[500, 500]]
    assert workload.allowed_by_type.tolist() == [[False, True]]


def test_invalid_inputs_are_refused():
    with pytest.raises(ValueError):
        typical_workload([], TYPES)
    with pytest.raises(ValueError):
        typical_workload(_pods((1000, GpuRequest(), 1)), TYPES, coverage_pct=0)
