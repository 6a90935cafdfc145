"""The parts of gpuplace, worked by hand: LP pattern prices, hole loss, shape weights, the shape estimate."""

import numpy as np
import pytest

from gpuplace.core.demand import resolve
from gpuplace.core.policies.gpuplace.hole_loss import HoleLoss
from gpuplace.core.policies.gpuplace.node_waste import NodeWaste, shape_weights
from gpuplace.core.policies.gpuplace.pattern_prices import pattern_prices
from gpuplace.core.policies.gpuplace.shape_estimate import ShapeEstimate
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import typical_workload

from ..core.builders import make_node, make_pod


def test_prices_of_threes_and_sevens():
    # a GPU of 10 units; sizes 3 and 7 arrive 3 : 1. Patterns: [3, 7], [3, 3, 3], [7].
    # dual: max 3 y3 + y7  s.t.  y3 + y7 <= 1, 3 y3 <= 1, y7 <= 1   ->  y3 = 1/3, y7 = 2/3 (unique)
    # so packing 3 threes and a seven takes 3 y3 + y7 = 5/3 GPUs: [3, 7] once and [3, 3, 3] two thirds of a time.
    prices = pattern_prices(np.array([7, 3]), np.array([1.0, 3.0]), 10)
    assert prices.size_units.tolist() == [3, 7]
    assert prices.price_gpu.tolist() == pytest.approx([1 / 3, 2 / 3])
    # K(h) = the most a hole of h units collects: 3 -> 1/3, 6 -> 2/3 (two 3s), 7 -> 2/3, 9 -> 1 (three 3s)
    third = 1 / 3
    assert prices.hole_value_gpu.tolist() == pytest.approx(
        [0, 0, 0, third, third, third, 2 * third, 2 * third, 2 * third, 1, 1])


def test_prices_of_one_size_split_the_gpu_evenly():
    prices = pattern_prices(np.array([50]), np.array([1.0]), 100)  # two per GPU
    assert prices.price_gpu.tolist() == pytest.approx([0.5])
    assert prices.hole_value_gpu[[49, 50, 99, 100]].tolist() == pytest.approx([0, 0.5, 0.5, 1])


@pytest.mark.parametrize("sizes, rates", [([0], [1.0]), ([11], [1.0]), ([3, 3], [1.0, 1.0]), ([3], [0.0])])
def test_prices_refuse_bad_input(sizes, rates):
    with pytest.raises(ValueError):
        pattern_prices(np.array(sizes), np.array(rates), 10)


def _mix(pods, nodes):
    snapshot = ClusterSnapshot(nodes)
    return snapshot, typical_workload(pods, snapshot.gpu_types, coverage_pct=100.0)


def test_hole_loss_of_threes_and_sevens_in_milli():
    # the mix above in milli-GPU: 300m x 3, 700m x 1, on one GPU type; loss = (K(h) - y_s - K(h - s)) x 1000
    snapshot, shapes = _mix([make_pod(f"a{i}").gpu_share(300).build() for i in range(3)]
                            + [make_pod("b").gpu_share(700).build()], [make_node("n").gpus(1).build()])
    loss = HoleLoss(shapes, shapes.probability)
    free = np.array([[1000, 400, 900, 1000, 200]])
    # 300 into 1000: 1 - 1/3 - K(700) = 1 - 1/3 - 2/3 = 0;  300 into 400: K(400) - 1/3 - K(100) = 1/3 - 1/3 - 0 = 0
    # 300 into 900: K(900) - 1/3 - K(600) = 1 - 1/3 - 2/3 = 0; 200: does not fit
    assert loss.loss_milli(np.array([0]), np.array([300]), free)[0].tolist() == pytest.approx([0, 0, 0, 0, np.inf])
    # 700 into 900: K(900) - 2/3 - K(200) = 1 - 2/3 - 0 = 1/3 (three 300s would have filled it)
    # 700 into 1000: 1 - 2/3 - K(300) = 1 - 2/3 - 1/3 = 0
    assert loss.loss_milli(np.array([0]), np.array([700]), np.array([[900, 1000]]))[0].tolist() == pytest.approx(
        [1000 / 3, 0])


def test_a_hole_left_where_the_cpu_cannot_feed_it_is_lost():
    # 300m pods ask 2 cores, the 700m pod 4: the 700 left by a 300 in a fresh GPU is a step of the optimal
    # packing only if the node still has the 2 cores a 300 needs to go there (issue 39)
    snapshot, shapes = _mix([make_pod(f"a{i}").cpu(2).gpu_share(300).build() for i in range(3)]
                            + [make_pod("b").cpu(4).gpu_share(700).build()], [make_node("n").gpus(1).build()])
    loss = HoleLoss(shapes, shapes.probability)
    fresh = np.array([[1000]])
    assert loss.loss_milli(np.array([0]), np.array([300]), fresh, np.array([2_000]))[0, 0] == pytest.approx(0)
    # 1 core left: nothing of the mix can use the 700 -- K(1000) - y_300 = 2/3 of a GPU lost
    assert loss.loss_milli(np.array([0]), np.array([300]), fresh, np.array([1_000]))[0, 0] == pytest.approx(
        2000 / 3)
    # without the node's CPU, the prices alone (as before)
    assert loss.loss_milli(np.array([0]), np.array([300]), fresh)[0, 0] == pytest.approx(0)


def test_whole_gpus_lose_nothing_to_holes():
    snapshot, shapes = _mix([make_pod("a").gpu_share(300).build()], [make_node("n").gpus(1).build()])
    loss = HoleLoss(shapes, shapes.probability)
    assert loss.loss_milli(np.array([0]), np.array([1000]), np.array([[1000, 999]]))[0].tolist() == [0, np.inf]


def test_shape_weights_scale_by_the_reach_of_each_shape():
    # 18 GPUs: big (8 GPUs, 128 cores), mid (8 GPUs, 96 cores), small (2 GPUs, 104 cores).
    # 8 GPUs and 120 cores fit only big: w = p x 18 / 8; one GPU and 4 cores fit all: w = p x 18 / 18 = p.
    pods = [make_pod("m8").cpu(120).whole_gpus(8).build()] + [make_pod(f"m{i}").cpu(4).whole_gpus(1).build()
                                                               for i in range(9)]
    nodes = [make_node("big").cpu(128).gpus(8).build(), make_node("mid").cpu(96).gpus(8).build(),
             make_node("small").cpu(104).gpus(2).build()]
    snapshot = ClusterSnapshot(nodes)
    estimate = ShapeEstimate(1000.0)
    for pod in pods:
        estimate.observe(resolve(pod, snapshot))
    workload = estimate.build(snapshot.gpu_types)
    weights = dict(zip((k[2] for k in workload.shapes.keys), shape_weights(workload, snapshot), strict=True))
    # p(8 GPUs) = 0.1 and p(1 GPU) = 0.9 up to the decay between the observations (half-life 1000 pods)
    p = dict(zip((k[2] for k in workload.shapes.keys), workload.shapes.probability, strict=True))
    assert weights[8] == pytest.approx(p[8] * 18 / 8)
    assert weights[1] == pytest.approx(p[1])


def test_a_shape_weighs_more_as_the_nodes_it_fits_run_out():
    # two 8-GPU 128-core nodes and a 2-GPU node: 18 GPUs. 8 GPUs + 120 cores fits big1 and big2: 16 GPUs;
    # one GPU + 4 cores fits all 18 (the most placeable shape). w8 = p8 x 18 / 16.
    # Once big1 holds a pod, the 8-GPU shape fits big2 only: w8 = p8 x 18 / 8, twice as much.
    pods = [make_pod("m8").cpu(120).whole_gpus(8).build()] + [make_pod(f"m{i}").cpu(4).whole_gpus(1).build()
                                                               for i in range(9)]
    nodes = [make_node("big1").cpu(128).gpus(8).build(), make_node("big2").cpu(128).gpus(8).build(),
             make_node("small").cpu(104).gpus(2).build()]
    snapshot = ClusterSnapshot(nodes)
    estimate = ShapeEstimate(1e9)
    for pod in pods:
        estimate.observe(resolve(pod, snapshot))
    workload = estimate.build(snapshot.gpu_types)
    eight = [k[2] for k in workload.shapes.keys].index(8)
    p8 = workload.shapes.probability[eight]
    assert shape_weights(workload, snapshot)[eight] == pytest.approx(p8 * 18 / 16)
    snapshot.charge(0, [0], cpu_milli=4000, memory_mib=0, share_milli=1000, gpu_memory_mib=16384, kind=1)
    assert shape_weights(workload, snapshot)[eight] == pytest.approx(p8 * 18 / 8)


def test_stranded_share_is_what_cpu_and_memory_cannot_feed():
    # one shape: a whole GPU with 8 cores and 32 GiB: 8 milli-CPU and 32.768 MiB per milli-GPU.
    # node: 4 free GPUs, 20 cores, 64 GiB: CPU feeds 2500, memory 65536 / 32.768 = 2000 -> 4000 - 2000 stranded
    snapshot = ClusterSnapshot([make_node("n").cpu(64).memory_mib(262144).gpus(4).build()])
    estimate = ShapeEstimate(1000.0)
    estimate.observe(resolve(make_pod("m").cpu(8).memory_mib(32768).whole_gpus(1).build(), snapshot))
    waste = NodeWaste(estimate.build(snapshot.gpu_types), snapshot)
    free = np.array([[1000, 1000, 1000, 1000]])
    assert waste.waste_milli(free, np.array([20000]), np.array([65536]), np.array([0])).tolist() == [2000.0]
    # the same node with 64 cores and 256 GiB feeds all 4000: nothing stranded, and the shape fits: W = 0
    assert waste.waste_milli(free, np.array([64000]), np.array([262144]), np.array([0])).tolist() == [0.0]


def test_the_estimate_decays_by_half_life_and_discounts_sampling_noise():
    snapshot = ClusterSnapshot([make_node("n").gpus(1).build()])
    a, b = resolve(make_pod("a").gpu_share(300).build(), snapshot), resolve(make_pod("b").gpu_share(700).build(),
                                                                             snapshot)
    estimate = ShapeEstimate(half_life_pods=1.0)
    estimate.observe(a)
    estimate.observe(b)  # a has halved by now: weights 1/2 and 1 -> p = 1/3, 2/3
    built = estimate.build(snapshot.gpu_types)
    assert dict(zip((k[1] for k in built.shapes.keys), built.shapes.probability, strict=True)) == pytest.approx(
        {700: 2 / 3, 300: 1 / 3})
    assert estimate.drift() == 0.0  # nothing seen since the build
    estimate = ShapeEstimate(half_life_pods=1e9)
    for _ in range(500):
        estimate.observe(a)
        estimate.observe(b)
    estimate.build(snapshot.gpu_types)
    # 10 more a: p(a) 0.5 -> 510/1010, a distance of 0.005; noise of 1010 pods: 0.5 x 2 sqrt(2 x 0.25 / (pi 1010))
    # = 0.0126. Not a drift.
    for _ in range(10):
        estimate.observe(a)
    assert estimate.drift() == 0.0
    for _ in range(1000):
        estimate.observe(b)
    # a 510, b 1500 of 2010: p(b) = 0.746, a distance of 0.246 from the build, less noise
    # 0.5 x 2 sqrt(2 x 0.254 x 0.746 / (pi 2010)) = 0.008
    assert estimate.drift() == pytest.approx(0.2463 - 0.0077, abs=1e-3)


def test_memory_requests_fall_into_buckets():
    snapshot = ClusterSnapshot([make_node("n").gpus(1, "A100", 40960).build()])
    estimate = ShapeEstimate(1000.0)
    for mib in (8000, 8100, 8192, 8193):
        estimate.observe(resolve(make_pod("p").gpu_memory_mib(mib).build(), snapshot))
    keys = estimate.build(snapshot.gpu_types).shapes.keys
    # per-GPU memory rounded up to 1 GiB: 8000, 8100, 8192 -> 8192; 8193 -> 9216
    assert sorted(k[4] for k in keys) == [8192, 9216]
