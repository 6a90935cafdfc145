"""gpuplace: its own behaviour on small clusters worked by hand (the common checks: test_policy_battery.py).

The policy learns the arriving mix from the pods it scores (shape_estimate.py), so each hand-worked case first
shows it a few pods. Its measure is built on the first pod it sees and checked for drift every 16 pods, so with
fewer than 16 pods shown the measure is the one built on the first.
"""

import numpy as np
import pytest

from gpuplace.core.demand import resolve
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.model import Gpu, Node
from gpuplace.core.policies import gpuplace, registry
from gpuplace.core.policies.gpuplace import policy as gpuplace_policy
from gpuplace.core.policies.gpuplace.policy import Gpuplace
from gpuplace.core.snapshot import ClusterSnapshot

from ..core.builders import make_node, make_pod


def test_registered_under_its_name():
    assert gpuplace.NAME == "gpuplace"
    assert isinstance(registry.create("gpuplace", PolicyContext()), Gpuplace)


def _shown(snapshot, pods):
    """A fresh policy that has scored `pods` (the arriving mix) on every node of the snapshot."""
    policy = Gpuplace(PolicyContext())
    for pod in pods:
        policy.score(snapshot, resolve(pod, snapshot), np.arange(snapshot.n_nodes))
    return policy


def test_a_320_opens_a_fresh_gpu_rather_than_strand_210_next_to_a_470():
    # one node, GPU0 holds a 470 (530 free), GPU1 is free. Mix: 470, 470, 650, 320 and four whole GPUs (4 cores).
    # LP prices (pattern_prices.py): 470 + 470 and 650 + 320 fill a GPU each, so y470 = 1/2 and y650 + y320 = 1
    # with y320 <= 1/3 (three 320s fit a GPU). K(h): the most a hole h can collect.
    # 320 into 530: loss = K(530) - y320 - K(210) = 1/2 - y320 - 0 >= 1/6 GPU
    # 320 into 1000: loss = K(1000) - y320 - K(680) = 1 - y320 - (1 - y320) = 0   (K(680) = y650)
    snapshot = ClusterSnapshot([make_node("n").cpu(64).gpus(2).free(530, 1000).build()])
    mix = [make_pod(f"m{i}").cpu(4).gpu_share(s).build() for i, s in enumerate((470, 470, 650, 320) + (1000,) * 4)]
    policy = _shown(snapshot, mix + mix)  # 16 pods: the drift check rebuilds on all four sizes (not just the 470)
    assert policy.rebuilds == 2
    decision = decide(snapshot, resolve(make_pod("p").cpu(4).gpu_share(320).build(), snapshot), policy)
    assert decision.gpu_indices == (1,)
    # FGD looks one arrival ahead: half the next tasks want a whole GPU, which 530 -> 210 keeps (F = 210 for them)
    # and 1000 -> 680 breaks (no whole GPU left: F = 530 + 680). So FGD strands 210 next to the 470.
    fgd = registry.create("fgd", PolicyContext(workload=_workload(snapshot, mix)))
    assert decide(snapshot, resolve(make_pod("p").cpu(4).gpu_share(320).build(), snapshot), fgd).gpu_indices == (0,)


def _workload(snapshot, pods):
    from gpuplace.core.workload import typical_workload

    return typical_workload(pods, snapshot.gpu_types, coverage_pct=100.0)


def test_a_cpu_heavy_pod_goes_where_cpu_outlasts_the_gpus(monkeypatch):
    monkeypatch.setattr(gpuplace_policy, "PRIOR_PODS", 0.0)  # the numbers below count only the shapes shown
    # mix: 1 whole GPU with 8 cores, no host memory: the GPU shapes ask 8 cores per GPU (8 milli per milli-GPU).
    # a (first): 40 cores, 4 GPUs; b: 100 cores, 4 GPUs. The pod: 20 cores, 1 GPU.
    # a after: 20 cores feed 20000 / 8 = 2500 milli-GPU of its 3000 free: 500 stranded; before 40000 / 8 >= 4000: 0
    # b after: 80 cores feed 10000 >= 3000: 0. FGD's part is 0 on both (8 cores and a GPU still fit).
    nodes = [make_node("a").cpu(40).memory_mib(262144).gpus(4).build(),
             make_node("b").cpu(100).memory_mib(262144).gpus(4).build()]
    snapshot = ClusterSnapshot(nodes)
    policy = _shown(snapshot, [make_pod(f"m{i}").cpu(8).memory_mib(0).whole_gpus(1).build() for i in range(3)])
    demand = resolve(make_pod("p").cpu(20).memory_mib(0).whole_gpus(1).build(), snapshot)
    assert policy.score(snapshot, demand, np.arange(2)).tolist() == pytest.approx([-500.0, 0.0])
    assert decide(snapshot, demand, policy).node_name == "b"


def test_a_cpu_light_pod_relieves_a_node_short_of_cpu(monkeypatch):
    monkeypatch.setattr(gpuplace_policy, "PRIOR_PODS", 0.0)  # the numbers below count only the shapes shown
    # mix as above (8 cores per GPU). b (first): 100 cores, 4 GPUs; a: 20 cores, 4 GPUs.
    # a before: 20000 / 8 = 2500 of 4000 fed: 1500 stranded; after a 2-core GPU pod: 18000 / 8 = 2250 of 3000: 750
    # growth on a: 750 - 1500 = -750; on b: 0. The pod goes to a, though b comes first.
    nodes = [make_node("b").cpu(100).memory_mib(262144).gpus(4).build(),
             make_node("a").cpu(20).memory_mib(262144).gpus(4).build()]
    snapshot = ClusterSnapshot(nodes)
    policy = _shown(snapshot, [make_pod(f"m{i}").cpu(8).memory_mib(0).whole_gpus(1).build() for i in range(3)])
    demand = resolve(make_pod("p").cpu(2).memory_mib(0).whole_gpus(1).build(), snapshot)
    assert policy.score(snapshot, demand, np.arange(2)).tolist() == pytest.approx([0.0, 750.0])
    assert decide(snapshot, demand, policy).node_name == "a"


def test_the_only_node_an_8_gpu_120_core_pod_fits_is_kept_whole():
    # big (first): 8 GPUs, 128 cores -- the only node the 8-GPU 120-core shape fits; small: 8 GPUs, 96 cores.
    # A 1-GPU pod on big leaves 7 GPUs: the 8-GPU shape no longer fits there, F_big(m) = 7000 x its weight;
    # on small nothing changes for that shape (it never fitted). So the pod goes to small.
    nodes = [make_node("big").cpu(128).gpus(8).build(), make_node("small").cpu(96).gpus(8).build()]
    snapshot = ClusterSnapshot(nodes)
    mix = [make_pod("m8").cpu(120).whole_gpus(8).build()] + [
        make_pod(f"m{i}").cpu(4).whole_gpus(1).build() for i in range(9)]
    policy = _shown(snapshot, mix)
    assert decide(snapshot, resolve(make_pod("p").cpu(4).whole_gpus(1).build(), snapshot), policy).node_name == "small"


def test_memory_requests_on_mixed_models_take_a_gpu_with_the_memory_free():
    # GPU0 of the V100 node shows 600m of share free but only 6000 MiB of memory (telemetry-sized pods);
    # an 8192 MiB pod (500m of a 16 GiB V100, 200m of a 40 GiB A100) must go to GPU1 there, or to the A100.
    v100 = Node("v100", 64000, 262144, (Gpu(0, "V100M16", 16384, 600, 6000), Gpu(1, "V100M16", 16384)))
    a100 = make_node("a100").cpu(64).gpus(1, "A100", 40960).build()
    snapshot = ClusterSnapshot([v100, a100])
    pods = [make_pod(f"m{i}").cpu(2).gpu_memory_mib(8192).build() for i in range(5)]
    policy = _shown(snapshot, pods)
    demand = resolve(pods[0], snapshot)
    assert demand.share_on(snapshot).tolist() == [500, 200]
    decision = decide(snapshot, demand, policy)
    assert (decision.node_name, decision.gpu_indices) in {("v100", (1,)), ("a100", (0,))}
    bind(snapshot, demand, decision)  # raises if memory were over-committed


def test_score_tables_stay_bounded_when_requests_never_repeat(monkeypatch):
    # each perception pod asks its own MiB: one score table per request would grow with every pod served
    monkeypatch.setattr("gpuplace.core.policies.gpuplace.policy.MAX_TABLES", 3)
    snapshot = ClusterSnapshot([make_node(f"n{i}").cpu(64).gpus(4, "A100", 40960).build() for i in range(3)])
    policy = Gpuplace(PolicyContext())
    for i in range(10):
        demand = resolve(make_pod(f"p{i}").cpu(2).gpu_memory_mib(4000 + 100 * i).build(), snapshot)
        decision = decide(snapshot, demand, policy)
        bind(snapshot, demand, decision)  # raises on an over-commit
        assert len(policy._tables) <= 3
    assert snapshot.allocated_gpu_milli > 0


def test_the_context_workload_is_not_needed():
    snapshot = ClusterSnapshot([make_node("n").gpus(2).build()])
    pod = make_pod("p").gpu_share(500).build()
    assert decide(snapshot, resolve(pod, snapshot), Gpuplace(PolicyContext(workload=None))).scheduled
