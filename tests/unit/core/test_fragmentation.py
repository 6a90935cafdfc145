"""F_n(m) and F_n(M) on hand-worked nodes (Weng et al., ATC'23, §4; DESIGN.md §6)."""

import numpy as np
import pytest

from gpuplace.core.fragmentation import fragmentation, node_fragmentation, stranded_gpu_memory
from gpuplace.core.model import GpuRequest, Pod
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import typical_workload

from .builders import make_node


def _workload(shapes, snapshot):
    """A workload with the given (pod, count) shapes, all of them typical (coverage 100%)."""
    pods = [Pod(f"p{i}-{j}", cpu, 0, request) for i, (cpu, request, count) in enumerate(shapes) for j in range(count)]
    return typical_workload(pods, snapshot.gpu_types, coverage_pct=100.0)


@pytest.fixture
def v100_node():
    # 3 x V100M16 with free shares 1000, 300, 600 -> 1900 milli free; 32 cores with 16 free
    return make_node("n1").cpu(32, free=16).gpus(3, "V100M16").free(1000, 300, 600).build()


def test_a_fitting_task_counts_only_the_holes_smaller_than_its_share(v100_node):
    snapshot = ClusterSnapshot([v100_node])
    workload = _workload([(4000, GpuRequest(1, 500), 1)], snapshot)
    # 500m fits GPU0 (1000) and GPU2 (600); GPU1's 300 < 500 cannot serve it: F = 300
    assert fragmentation(snapshot, workload).tolist() == [300.0]


def test_a_task_that_does_not_fit_counts_all_free_share(v100_node):
    snapshot = ClusterSnapshot([v100_node])
    workload = _workload([(4000, GpuRequest(2, 700), 1)], snapshot)
    # 2 x 700m needs two GPUs with >= 700; only GPU0 (1000) has: F = 1000 + 300 + 600 = 1900
    assert fragmentation(snapshot, workload).tolist() == [1900.0]


def test_a_task_short_of_cpu_counts_all_free_share(v100_node):
    snapshot = ClusterSnapshot([v100_node])
    workload = _workload([(24000, GpuRequest(1, 500), 1)], snapshot)
    # 24 cores wanted, 16 free: F = 1900 even though the GPUs would fit
    assert fragmentation(snapshot, workload).tolist() == [1900.0]


def test_cpu_only_shapes_count_all_free_gpu(v100_node):
    snapshot = ClusterSnapshot([v100_node])
    workload = _workload([(4000, GpuRequest(), 1)], snapshot)
    # a CPU-only task can use none of the GPU: F = 1900
    assert fragmentation(snapshot, workload).tolist() == [1900.0]


def test_a_disallowed_gpu_model_counts_all_free_share(v100_node):
    snapshot = ClusterSnapshot([v100_node])
    workload = _workload([(4000, GpuRequest(1, 500, None, ("T4",)), 1)], snapshot)
    # the task runs only on T4; this node has V100M16: F = 1900
    assert fragmentation(snapshot, workload).tolist() == [1900.0]


def test_multi_gpu_tasks_need_k_gpus_with_the_share():
    fits = make_node("a").gpus(3).free(1000, 1000, 300).build()
    short = make_node("b").gpus(3).free(1000, 600, 600).build()
    snapshot = ClusterSnapshot([fits, short])
    workload = _workload([(8000, GpuRequest(2, 1000), 1)], snapshot)
    # a: two whole free GPUs -> fits; the 300m GPU is a hole: F = 300
    # b: one whole free GPU only -> does not fit: F = 1000 + 600 + 600 = 2200
    assert fragmentation(snapshot, workload).tolist() == [300.0, 2200.0]


def test_expected_fragmentation_weights_shapes_by_frequency(v100_node):
    snapshot = ClusterSnapshot([v100_node])
    workload = _workload(
        [(4000, GpuRequest(1, 500), 5), (4000, GpuRequest(2, 700), 3), (4000, GpuRequest(), 2)], snapshot
    )
    # p = 5/10, 3/10, 2/10; F_n(m) = 300, 1900, 1900 (the three cases above)
    # F_n(M) = 0.5 * 300 + 0.3 * 1900 + 0.2 * 1900 = 150 + 570 + 380 = 1100
    assert workload.probability.tolist() == [0.5, 0.3, 0.2]
    assert fragmentation(snapshot, workload)[0] == pytest.approx(1100.0)


def test_an_idle_node_fragments_nothing_for_tasks_that_fit():
    snapshot = ClusterSnapshot([make_node("idle").gpus(2).build()])
    workload = _workload([(4000, GpuRequest(1, 500), 1), (4000, GpuRequest(2, 1000), 1)], snapshot)
    # every GPU has 1000 free >= the share: no hole is smaller than a task; F = 0
    assert fragmentation(snapshot, workload).tolist() == [0.0]


def test_node_states_given_as_arrays_match_the_snapshot(v100_node):
    snapshot = ClusterSnapshot([v100_node])
    workload = _workload([(4000, GpuRequest(1, 500), 1)], snapshot)
    # GPU order does not matter, only the multiset of free shares
    shuffled = node_fragmentation(np.array([[600, 1000, 300]]), np.array([16000]), np.array([0]), workload)
    assert shuffled.tolist() == fragmentation(snapshot, workload).tolist()


def test_bad_state_arrays_are_refused(v100_node):
    snapshot = ClusterSnapshot([v100_node])
    workload = _workload([(4000, GpuRequest(1, 500), 1)], snapshot)
    with pytest.raises(ValueError):
        node_fragmentation(np.array([600, 1000]), np.array([16000]), np.array([0]), workload)
    with pytest.raises(ValueError):
        node_fragmentation(np.array([[600, 1000]]), np.array([16000]), np.array([3]), workload)


def test_stranded_memory_follows_the_share_rule_on_each_gpus_free_memory(v100_node):
    snapshot = ClusterSnapshot([v100_node])
    # free memory 16384, 4916 and 9831 MiB (what shares 1000, 300, 600 leave of 16384 MiB)
    assert snapshot.free_memory_mib.tolist() == [[16384, 4916, 9831]]
    fits = _workload([(4000, GpuRequest(1, 500), 1)], snapshot)
    assert stranded_gpu_memory(snapshot, fits).tolist() == [4916.0]  # GPU1, whose 300m cannot serve 500m
    blocked = _workload([(4000, GpuRequest(2, 700), 1)], snapshot)
    assert stranded_gpu_memory(snapshot, blocked).tolist() == [16384.0 + 4916 + 9831]  # fits nowhere: all of it
    mixed = _workload([(4000, GpuRequest(1, 500), 3), (4000, GpuRequest(), 1)], snapshot)
    # p = 3/4 for the fitting shape (4916), 1/4 for the CPU-only one (all 31131): the expectation, as F_n(M)
    assert stranded_gpu_memory(snapshot, mixed).tolist() == pytest.approx([0.75 * 4916 + 0.25 * 31131])
