"""gpuplace's prior (issue 19): shapes the cluster could host, and shapes the operator declares, are valued before
any pod of theirs is seen, and stay a floor under the learned mix."""

import numpy as np
import pytest

from gpuplace.core.demand import resolve
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.framework.runtime import decide
from gpuplace.core.model import MILLI_PER_GPU, GpuRequest
from gpuplace.core.policies.gpuplace import policy as gpuplace_policy
from gpuplace.core.policies.gpuplace.policy import Gpuplace
from gpuplace.core.policies.gpuplace.shape_estimate import (
    ShapeEstimate,
    declared_shapes,
    hostable_shapes,
    prior_shapes,
    prior_top_up,
)
from gpuplace.core.snapshot import ClusterSnapshot

from ..core.builders import make_node, make_pod

PRIOR_PODS = gpuplace_policy.PRIOR_PODS  # the shipped value (tests patch the module's)


def test_hostable_shapes_are_one_gpu_powers_of_two_and_whole_nodes():
    shapes = hostable_shapes(np.array([8, 8, 6, 0]), ("V100", "V100", "V100", ""), 12.0)
    assert sorted(k[1] for k in shapes) == [1, 2, 4, 6, 8]
    assert all(k == (0, k[1], MILLI_PER_GPU, -1, ()) and w == 12.0 for k, w in shapes.items())


def test_hostable_shapes_of_two_models_are_per_model_and_share_the_weight():
    shapes = hostable_shapes(np.array([8, 4]), ("A100", "H100"), 10.0)
    assert set(shapes) == {(0, c, MILLI_PER_GPU, -1, ("A100",)) for c in (1, 2, 4, 8)} | {
        (0, c, MILLI_PER_GPU, -1, ("H100",)) for c in (1, 2, 4)}
    assert set(shapes.values()) == {5.0}


def _snapshot():
    return ClusterSnapshot([make_node("a").cpu(96).gpus(8).build(), make_node("b").cpu(96).gpus(8).build()])


def test_an_unseen_8_gpu_shape_is_in_the_first_build_and_stays_a_floor():
    snapshot = _snapshot()
    estimate = ShapeEstimate(half_life_pods=50.0)
    estimate.set_prior(hostable_shapes(snapshot.gpu_count, ("V100M16",) * 2, 8.0))
    assert not estimate.empty  # the prior alone can be built on
    demand = resolve(make_pod("p").cpu(1).gpu_memory_mib(4096).build(), snapshot)
    for _ in range(1000):  # a long run of one small shape: 8-GPU jobs never seen
        estimate.observe(demand)
    built = estimate.build(snapshot.gpu_types)
    probability = dict(zip(built.shapes.keys, built.shapes.probability, strict=True))
    eight = next(p for k, p in probability.items() if k[2] == 8)
    # 1000 pods at a 50-pod half-life weigh 1 / (1 - 2^(-1/50)) ~ 72.6 pods; the prior's 8 pseudo-pods of
    # 8 GPUs keep their share of it
    assert eight == pytest.approx(8.0 / (1 / (1 - 2 ** (-1 / 50)) + 4 * 8.0), rel=1e-3)
    # the prior is not a sample: only the observed shape feeds CPU/memory stranding
    observed = dict(zip(built.shapes.keys, built.observed_probability, strict=True))
    assert observed[next(k for k in probability if k[2] == 8)] == 0.0
    assert sum(observed.values()) == pytest.approx(1 - 4 * eight, rel=1e-6)


def test_a_seen_shape_decays_to_its_floor_rather_than_to_nothing():
    snapshot = _snapshot()
    estimate = ShapeEstimate(half_life_pods=10.0, seen_floor_pods=2.0)
    big = resolve(make_pod("big").cpu(16).whole_gpus(4).build(), snapshot)
    small = resolve(make_pod("small").cpu(1).gpu_share(250).build(), snapshot)
    estimate.observe(big)
    for _ in range(500):
        estimate.observe(small)
    probability = dict(zip(*_keys_and_p(estimate.build(snapshot.gpu_types)), strict=True))
    four = next(p for k, p in probability.items() if k[2] == 4)
    assert four == pytest.approx(2.0 / (1 / (1 - 2 ** (-1 / 10)) + 2.0), rel=1e-3)


def test_the_prior_is_a_floor_not_an_addition_once_its_shapes_are_seen():
    """Issue 19: added on top, the zero-CPU whole-GPU prior stayed ~5% of the mix on the Alibaba `default` trace
    (whole-GPU pods of every count arrive from the start) and W valued free GPUs on nodes out of CPU: `gpuplace sim
    --pods default --seeds 42-51` 3.90 against 3.86 without it. As a floor it adds nothing once seen as often."""
    snapshot = _snapshot()
    estimate = ShapeEstimate(half_life_pods=1e9)
    estimate.set_prior(hostable_shapes(snapshot.gpu_count, ("V100M16",) * 2, 8.0))  # 1, 2, 4, 8 GPUs, 8 pods each
    one = resolve(make_pod("one").cpu(12).whole_gpus(1).build(), snapshot)
    for _ in range(20):  # more one-GPU pods than the prior's 8: its zero-CPU one-GPU shape adds nothing
        estimate.observe(one)
    keys = estimate.build(snapshot.gpu_types).shapes.keys
    assert sorted(k[2] for k in keys) == [1, 2, 4, 8]  # 1: the seen shape (12 CPU); 2, 4, 8 from the prior
    assert next(k for k in keys if k[2] == 1)[0] == 12000
    probability = dict(zip(*_keys_and_p(estimate.build(snapshot.gpu_types)), strict=True))
    assert sum(p for k, p in probability.items() if k[2] == 8) == pytest.approx(8.0 / (20 + 3 * 8.0))


def test_prior_top_up_counts_seen_pods_of_its_count_and_models():
    prior = {(0, 1, MILLI_PER_GPU, -1, ("A100",)): 10.0, (0, 4, MILLI_PER_GPU, -1, ("H100",)): 10.0}
    seen = {(8000, 1, MILLI_PER_GPU, -1, ()): 3.0,  # any model: covers the A100 one-GPU shape
            (4000, 1, -1, -1, ("A100", "T4")): 4.0,  # whole GPUs asked by count, an overlapping model
            (4000, 1, 500, -1, ()): 50.0,  # half a GPU: not whole, covers nothing
            (16000, 4, MILLI_PER_GPU, -1, ("A100",)): 50.0}  # 4 GPUs of another model
    assert prior_top_up(prior, seen) == {(0, 1, MILLI_PER_GPU, -1, ("A100",)): 3.0,
                                         (0, 4, MILLI_PER_GPU, -1, ("H100",)): 10.0}


def _keys_and_p(built):
    return built.shapes.keys, built.shapes.probability


def test_declared_shapes_use_the_request_key_of_pods_asking_them():
    request = GpuRequest(count=4, share_milli=1000, allowed_models=("H100",))
    shapes = declared_shapes((request, GpuRequest()), 3.0)
    snapshot = ClusterSnapshot([make_node("h").cpu(96).gpus(8, "H100", 81920).build()])
    demand = resolve(make_pod("p").cpu(0).whole_gpus(4, ("H100",)).build(), snapshot)
    estimate = ShapeEstimate(half_life_pods=10.0)
    estimate.set_prior(shapes)
    estimate.observe(demand)  # the same shape as the declared one: one key, not two
    assert len(estimate.build(snapshot.gpu_types).shapes.keys) == 1


def _first_pod_goes_to(monkeypatch, prior_pods, expected=()):
    # a (first): 8 whole GPUs free; b: one GPU half used. The first pod the policy ever sees asks one whole GPU.
    # Learned mix only (no prior): W counts that one shape, which fits a and b alike after the pod -> a (first).
    # With 8-GPU (or declared 8-GPU) shapes in the prior, the pod on a breaks the only whole node -> b.
    monkeypatch.setattr(gpuplace_policy, "PRIOR_PODS", prior_pods)
    snapshot = ClusterSnapshot([make_node("a").cpu(96).gpus(8).build(),
                                make_node("b").cpu(96).gpus(8).free(500, *(1000,) * 7).build()])
    policy = Gpuplace(PolicyContext(expected_shapes=expected))
    return decide(snapshot, resolve(make_pod("p").cpu(4).whole_gpus(1).build(), snapshot), policy).node_name


def test_an_unseen_whole_node_shape_is_kept_from_the_first_pod(monkeypatch):
    assert _first_pod_goes_to(monkeypatch, 0.0) == "a"  # without the prior the whole node is broken
    assert _first_pod_goes_to(monkeypatch, PRIOR_PODS) == "b"


def test_a_declared_shape_is_valued_from_the_first_pod(monkeypatch):
    # hostable shapes off (weight 0 would drop them), the operator declares 8-GPU jobs: the policy keeps a whole
    monkeypatch.setattr(gpuplace_policy, "hostable_shapes", lambda *args: {})
    assert _first_pod_goes_to(monkeypatch, 8.0) == "a"
    assert _first_pod_goes_to(monkeypatch, 8.0, (GpuRequest(count=8, share_milli=1000),)) == "b"


def _slice_fleet(*nodes: tuple[str, list[int]]) -> ClusterSnapshot:
    """Nodes of 8 x 40 GiB; per node, the MiB already taken on each of its first GPUs (by slices, kind 1)."""
    snapshot = ClusterSnapshot([make_node(name).cpu(96).gpus(8, "A100", 40960).build() for name, _ in nodes])
    for row, (_, used) in enumerate(nodes):
        for gpu, mib in enumerate(used):
            snapshot.charge(row, [gpu], cpu_milli=1000, memory_mib=0, share_milli=mib * MILLI_PER_GPU // 40960,
                            gpu_memory_mib=mib, kind=1)
    return snapshot


def _learned_slices(snapshot: ClusterSnapshot) -> Gpuplace:
    policy = Gpuplace(PolicyContext())
    for i in range(200):  # the arriving mix: 2 GiB slices (past the prior's pseudo-pods of whole GPUs)
        policy.score(snapshot, resolve(make_pod(f"s{i}").cpu(1).gpu_memory_mib(2048).build(), snapshot),
                     np.arange(snapshot.n_nodes))
    return policy


def test_a_memory_slice_takes_the_smallest_hole_of_equal_score():
    """Two partly used GPUs that any 2 GiB slice still fits after: the slice goes into the fuller one, so the larger
    hole stays for a larger slice (the rule for shares takes the largest)."""
    snapshot = _slice_fleet(("a", [8192, 30720]))
    policy = _learned_slices(snapshot)
    decision = decide(snapshot, resolve(make_pod("p").cpu(1).gpu_memory_mib(2048).build(), snapshot), policy)
    assert decision.gpu_indices == (1,)


def test_on_a_memory_slice_fleet_the_fuller_node_wins_equal_growth():
    """Each node has one partly used GPU the slice fits into; the node that keeps less free wins, though it comes
    second (ties go to the first node): the emptier one drains towards a whole node for multi-GPU jobs."""
    snapshot = _slice_fleet(("empty", [20480]), ("fuller", [20480, 40960, 40960, 40960]))
    policy = _learned_slices(snapshot)
    assert policy._pack == gpuplace_policy.PACK_MILLI > 0
    decision = decide(snapshot, resolve(make_pod("p").cpu(1).gpu_memory_mib(2048).build(), snapshot), policy)
    assert (decision.node_name, decision.gpu_indices) == ("fuller", (0,))


def test_without_memory_slices_in_the_mix_nodes_are_not_packed():
    snapshot = _slice_fleet(("a", []), ("b", []))
    policy = Gpuplace(PolicyContext())
    for i in range(20):  # shares (as the Alibaba traces ask), no memory slices
        policy.score(snapshot, resolve(make_pod(f"s{i}").cpu(1).gpu_share(300).build(), snapshot), np.arange(2))
    assert policy._pack == 0.0


def test_declared_shapes_replace_the_hostable_ones_of_their_gpu_count():
    hostable = hostable_shapes(np.array([8, 8]), ("A100", "V100"), 8.0)
    declared = declared_shapes((GpuRequest(count=8, share_milli=1000, allowed_models=("A100",)),), 3.0)
    prior = prior_shapes(hostable, declared)
    assert prior == {**{k: w for k, w in hostable.items() if k[1] != 8}, (0, 8, MILLI_PER_GPU, -1, ("A100",)): 3.0}
    assert prior_shapes(hostable, {}) == hostable


def _one_gpu_pod_goes_to(expected=()):
    # a (first): 8 x A100 free; b: 8 x V100 free. The pod asks one whole GPU of any model.
    snapshot = ClusterSnapshot([make_node("a").cpu(96).gpus(8, "A100", 40960).build(),
                                make_node("b").cpu(96).gpus(8, "V100", 16384).build()])
    policy = Gpuplace(PolicyContext(expected_shapes=expected))
    return decide(snapshot, resolve(make_pod("p").cpu(4).whole_gpus(1).build(), snapshot), policy).node_name


def test_a_declared_8_gpu_shape_stops_keeping_whole_the_nodes_it_cannot_use():
    """Issue 18: the hostable guess keeps an 8-GPU shape per model, so a V100 node is kept whole for 8-GPU jobs as
    much as an A100 one (the pod takes the first node). Declared 8-GPU jobs that ask A100 make the V100 node the one
    to break."""
    assert _one_gpu_pod_goes_to() == "a"
    assert _one_gpu_pod_goes_to((GpuRequest(count=8, share_milli=1000, allowed_models=("A100",)),)) == "b"
