"""The paper's baselines scored by hand on a three-node cluster.

n0: 64 cores, 2 GPUs fully free (2000m); n1: 64 cores, 2 GPUs with 1000m and 500m free (1500m);
n2: 32 cores, 8 GPUs fully free (8000m). The pod: 8 cores, one GPU at 500m.
"""

import numpy as np
import pytest

from gpuplace.core.demand import resolve
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.framework.runtime import decide
from gpuplace.core.policies import registry
from gpuplace.core.snapshot import ClusterSnapshot

from .builders import make_node, make_pod


@pytest.fixture
def snapshot():
    cluster = ClusterSnapshot([
        make_node("n0").cpu(64).gpus(2).build(),
        make_node("n1").cpu(64).gpus(2).build(),
        make_node("n2").cpu(32).gpus(8).build(),
    ])
    # n1 already runs one 500m shared pod on GPU 1
    cluster.charge(1, [1], cpu_milli=0, memory_mib=0, share_milli=500, gpu_memory_mib=8192, kind=0)
    return cluster


def _scores(name, snapshot, pod):
    policy = registry.create(name, PolicyContext())
    demand = resolve(pod, snapshot)
    return policy.score(snapshot, demand, np.arange(snapshot.n_nodes)).tolist(), decide(snapshot, demand, policy)


SHARED = make_pod("p").cpu(8).gpu_share(500).build()


def test_dotprod_prefers_the_least_aligned_node_first_node_on_ties(snapshot):
    scores, decision = _scores("dotprod", snapshot, SHARED)
    # n0: 64000/128000 * 8000/128000 + 2000/8000 * 500/8000 = 0.03125 + 0.015625 = 0.046875
    #     100 * (1 - 0.046875 / 2) = 97.65625 -> 97
    # n1: 0.03125 + 1500/8000 * 0.0625 = 0.04296875 -> 100 * (1 - 0.021484375) = 97.85.. -> 97
    # n2: 32000/128000 * 0.0625 + 8000/8000 * 0.0625 = 0.078125 -> 100 * (1 - 0.0390625) = 96.09.. -> 96
    assert scores == [97, 97, 96]
    assert decision.node_name == "n0"  # n0 and n1 tie at 97; the first node wins


def test_bestfit_prefers_the_least_leftover(snapshot):
    scores, decision = _scores("bestfit", snapshot, SHARED)
    # leftover = (free CPU - 8000) / 128000 * 0.5 + (free GPU - 500) / 8000 * 0.5
    # n0: 0.21875 + 0.09375 = 0.3125 -> (1 - 0.3125) * 100 = 68.75 -> 68
    # n1: 0.21875 + 0.0625  = 0.28125 -> 71.875 -> 71
    # n2: 0.09375 + 0.46875 = 0.5625 -> 43.75 -> 43
    # normalised to [0, 100]: (68 - 43) * 100 // 28 = 89, (71 - 43) * 100 // 28 = 100, 0
    assert scores == [89, 100, 0]
    assert decision.node_name == "n1"
    assert decision.gpu_indices == (1,)  # best-fit GPU: 500m free beats 1000m


def test_gpu_packing_fills_used_gpus_first(snapshot):
    scores, decision = _scores("gpu-packing", snapshot, SHARED)
    # n0: all GPUs free -> max(33 - 2, 2) = 31
    # n1: takes the 500m GPU (least free that fits): 100 - (500 * 100 // 1000) // 10 = 100 - 5 = 95
    # n2: all GPUs free -> max(33 - 8, 8) = 25
    assert scores == [31, 95, 25]
    assert decision.node_name == "n1"


def test_gpu_packing_opens_free_gpus_on_used_nodes_before_idle_nodes(snapshot):
    scores, _ = _scores("gpu-packing", snapshot, make_pod("w").cpu(8).whole_gpus(1).build())
    # n1 must take its fully free GPU 0: 50 - 1 = 49; idle n0 and n2 as above
    assert scores == [31, 49, 25]


def test_gpu_clustering_groups_by_request_type(snapshot):
    scores, decision = _scores("gpu-clustering", snapshot, SHARED)
    # fullness = 25 * (8000 - free milli) // 8000: n0 25 * 6000 // 8000 = 18, n1 25 * 6500 // 8000 = 20,
    # n2 25 * 0 // 8000 = 0
    # n0 hosts no GPU pod: 25 + 18 = 43; n1 hosts only shared pods: 75 + 20 = 95; n2: 25 + 0 = 25
    assert scores == [43, 95, 25]
    assert decision.node_name == "n1"
    whole, decision = _scores("gpu-clustering", snapshot, make_pod("w").cpu(8).whole_gpus(1).build())
    # a 1-GPU pod: n1 hosts only another type: 0 + 20 = 20
    assert whole == [43, 20, 25]
    assert decision.node_name == "n0"


def test_random_picks_a_feasible_node_and_is_seeded(snapshot):
    def run(seed):
        policy = registry.create("random", PolicyContext(rng=np.random.default_rng(seed)))
        demand = resolve(make_pod("p").cpu(8).gpu_share(500, models=("V100M16",)).build(), snapshot)
        return [decide(snapshot, demand, policy).node_name for _ in range(20)]

    assert run(7) == run(7)
    assert set(run(7)) <= {"n0", "n1", "n2"}
    assert len(set(run(7))) > 1


def test_cpu_only_pods_go_to_the_first_node_under_gpu_aware_baselines(snapshot):
    for name in ("gpu-clustering", "gpu-packing"):
        scores, decision = _scores(name, snapshot, make_pod("c").cpu(4).build())
        assert scores == [0, 0, 0] and decision.node_name == "n0"
