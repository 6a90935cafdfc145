"""FGD: integer scores from the growth of F_n(M), first node and first GPU on ties."""

import numpy as np

from gpuplace.core.demand import resolve
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.model import GpuRequest, Pod
from gpuplace.core.policies import registry
from gpuplace.core.policies.fgd import fgd_score
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import typical_workload

from .builders import make_node, make_pod


def test_score_is_the_floor_of_100_sigmoid_of_minus_delta_over_1000():
    before = np.zeros(4)
    after = np.array([0.0, 10.0, 15.0, 1000.0])
    # delta 0:    100 / (1 + e^0)     = 50.0    -> 50
    # delta 10:   100 / (1 + e^0.01)  = 49.75   -> 49
    # delta 15:   100 / (1 + e^0.015) = 49.625  -> 49  (ties with delta 10)
    # delta 1000: 100 / (1 + e^1)     = 26.89   -> 26
    assert fgd_score(before, after).tolist() == [50, 49, 49, 26]
    # a shrinking F scores above 50: delta -500 -> 100 / (1 + e^-0.5) = 62.2 -> 62
    assert fgd_score(np.array([500.0]), np.array([0.0])).tolist() == [62]


def _cluster_and_policy(nodes, shapes):
    snapshot = ClusterSnapshot(nodes)
    pods = [Pod(f"t{i}-{j}", 4000, 0, r) for i, (r, n) in enumerate(shapes) for j in range(n)]
    workload = typical_workload(pods, snapshot.gpu_types, coverage_pct=100.0)
    return snapshot, registry.create("fgd", PolicyContext(workload=workload))


def test_fgd_takes_the_gpu_that_leaves_no_small_hole_and_ties_go_to_the_first_node():
    # workload: only 500m one-GPU tasks. a: GPUs free 1000, 600. b: GPUs free 1000, 1000.
    snapshot, fgd = _cluster_and_policy(
        [make_node("a").gpus(2).free(1000, 600).build(), make_node("b").gpus(2).build()],
        [(GpuRequest(1, 500), 1)],
    )
    demand = resolve(make_pod("p").cpu(4).gpu_share(500).build(), snapshot)
    # before: both nodes fit 500m on every GPU, no hole < 500: F = 0 on a and b
    # a, GPU0: 1000 -> 500, GPUs (500, 600) both >= 500: F = 0, delta 0 -> 50
    # a, GPU1: 600 -> 100, a 100m hole: F = 100, delta 100 -> 100 / (1 + e^0.1) = 47.5 -> 47
    # b, GPU0: (500, 1000): F = 0 -> 50. a and b tie at 50: the first node, a, wins, on GPU0.
    assert fgd.score(snapshot, demand, np.arange(2)).tolist() == [50, 50]
    decision = decide(snapshot, demand, fgd)
    assert (decision.node_name, decision.gpu_indices) == ("a", (0,))


def test_fgd_avoids_the_node_where_a_whole_gpu_task_strands_a_hole():
    # workload: whole-GPU tasks (p = 0.5) and 2-GPU tasks (p = 0.5)
    snapshot, fgd = _cluster_and_policy(
        [make_node("a").gpus(2).build(), make_node("b").gpus(3).free(1000, 1000, 0).build()],
        [(GpuRequest(1, 1000), 1), (GpuRequest(2, 1000), 1)],
    )
    demand = resolve(make_pod("p").cpu(4).whole_gpus(1).build(), snapshot)
    # a before: both shapes fit, no hole: F = 0. After one GPU taken: 1-GPU fits (F_1 = 0),
    #   2-GPU does not (F_2 = 1000): F = 0.5 * 0 + 0.5 * 1000 = 500, delta 500 -> 100 / (1 + e^0.5) = 37.8 -> 37
    # b before: F = 0 (GPU2 has 0 free, nothing to strand). After: GPUs (0, 1000, 0): F = 0.5 * 0 + 0.5 * 1000 = 500
    #   -> also 37. Tie: a.
    assert fgd.score(snapshot, demand, np.arange(2)).tolist() == [37, 37]
    assert decide(snapshot, demand, fgd).gpu_indices == (0,)


def test_fgd_cache_follows_the_snapshot_as_pods_bind():
    snapshot, fgd = _cluster_and_policy(
        [make_node("a").gpus(2).build(), make_node("b").gpus(2).build()], [(GpuRequest(1, 500), 1)]
    )
    demand = resolve(make_pod("p").cpu(4).gpu_share(500).build(), snapshot)
    placed = []
    for _ in range(8):
        decision = decide(snapshot, demand, fgd)
        if not decision.scheduled:
            break
        bind(snapshot, demand, decision)
        placed.append((decision.node_name, decision.gpu_indices))
    # 2 nodes x 2 GPUs x 2 halves = 8 pods fit; FGD fills GPU halves without leaving < 500m holes
    assert len(placed) == 8
    assert snapshot.free_share_milli.sum() == 0
