"""GpuLoad: co-runners per GPU, charged and refunded beside the snapshot."""

import numpy as np
import pytest

from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import ClassProfile, LatencyModel, Stream, Tail
from gpuplace.core.model import Node
from gpuplace.core.snapshot import ClusterSnapshot

MODEL = LatencyModel(Tail(1, 0, 0.5), Tail(1.2, 2.0, 1.0), Tail(1.3, 2.5, 1.0),
                     classes={"det": ClassProfile(4.0, 0.5)})


def load_for_two_nodes():
    snapshot = ClusterSnapshot([Node.with_gpus("v100", 8000, 65536, 2, "Tesla-V100-SXM2-16GB", 16384),
                                Node.with_gpus("h100", 8000, 65536, 4, "NVIDIA-H100-80GB-HBM3", 81559)])
    return GpuLoad.for_snapshot(snapshot)


def test_speeds_come_from_the_gpu_products():
    assert load_for_two_nodes().speed.tolist() == [0.35, 1.0]


def test_load_is_frame_rate_times_gpu_work_on_that_gpu():
    load = load_for_two_nodes()
    load.charge("a", 1, (2,), Stream(30.0, "det", deadline_ms=33.0))  # 0.5 x 4 ms = 2 ms, x 30/s = 0.06
    load.charge("b", 0, (0,), Stream(30.0, "det"))  # on a V100: 2 / 0.35 ms x 30/s = 0.171
    load.charge("c", 1, (2,), Stream(10.0, "new", service_ms=5.0))  # prior: all 5 ms, x 10/s = 0.05
    expected = np.zeros((2, 4))
    expected[1, 2], expected[0, 0] = 0.06 + 0.05, 2.0 / 0.35 * 30 / 1000
    assert load.load_fraction(MODEL) == pytest.approx(expected)
    assert load.min_deadline_ms()[1, 2] == 33.0 and np.isinf(load.min_deadline_ms()[0, 0])
    assert [name for name, _ in load.streams_on(1, 2)] == ["a", "c"]


def test_charging_twice_is_a_no_op_and_elsewhere_an_error():
    load = load_for_two_nodes()
    load.charge("a", 1, (0,), Stream(30.0, "det"))
    version = load.version
    load.charge("a", 1, (0,), Stream(30.0, "det"))
    assert load.version == version
    with pytest.raises(ValueError):
        load.charge("a", 1, (1,), Stream(30.0, "det"))


def test_refund_frees_the_slot_and_is_safe_without_a_charge():
    load = load_for_two_nodes()
    load.charge("a", 1, (0,), Stream(30.0, "det"))
    load.refund("a")
    load.refund("never-charged")
    assert load.load_fraction(MODEL).sum() == 0 and load.pods() == ()


def test_slots_grow_past_the_initial_width():
    load = load_for_two_nodes()
    for i in range(20):
        load.charge(f"p{i}", 1, (3,), Stream(15.0, "det"))
    assert load.occupied[1, 3].sum() == 20
    assert load.load_fraction(MODEL)[1, 3] == pytest.approx(20 * 2.0 * 15 / 1000)


def test_the_latency_speeds_are_the_fleet_generators_speeds():
    from gpuplace.core.latency.speed import RELATIVE_SPEED, relative_speed
    from gpuplace.sim import robotics_fleet

    assert {p.name: p.speed for p in robotics_fleet.GPU_PRODUCTS} == RELATIVE_SPEED
    assert relative_speed("NVIDIA H200") == 1.15  # nvidia-smi spelling
    assert relative_speed("Some-Future-GPU") == min(RELATIVE_SPEED.values())  # unknown: as slow as the slowest


def test_slots_as_taken_are_the_live_load_until_a_change_then_a_frozen_copy():
    """A latency check keeps the slots it was made on (GpuLoad.taken): copied on write, only when a change comes
    while the check lives, so the checks no refusal explains copy nothing."""
    load = load_for_two_nodes()
    cam = Stream(30.0, "detector")
    taken, dropped = load.taken(), load.taken()
    assert taken.load is load and dropped.load is load
    del dropped  # a check gone before the change needs no copy
    load.charge("a", 0, (0,), cam)
    assert taken.load is not load and taken.load.frame_rate_hz[0, 0].sum() == 0.0  # as it was when taken
    assert load.frame_rate_hz[0, 0].sum() == 30.0
    with pytest.raises(ValueError, match="frozen"):
        taken.load.charge("b", 0, (0,), cam)
    again = load.taken()
    load.refund("a")
    assert again.load.frame_rate_hz[0, 0].sum() == 30.0 and load.frame_rate_hz[0, 0].sum() == 0.0
