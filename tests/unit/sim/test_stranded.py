"""Stranded GPU memory (sim/stranded.py): free memory no pending claim can use, device by device."""

from __future__ import annotations

import pytest

from gpuplace.sim.stranded import Ask, DeviceUse, combined, stranded, usable

GIB = 1024


def dev(node: str, name: str, capacity_gib: int, used_gib: float) -> DeviceUse:
    return DeviceUse(node=node, name=name, capacity_mib=capacity_gib * GIB, used_mib=int(used_gib * GIB))


def test_a_hole_smaller_than_every_pending_slice_is_stranded_and_a_big_enough_one_is_not() -> None:
    devices = [dev("a", "gpu-0", 16, 13), dev("a", "gpu-1", 16, 6)]  # 3 GiB and 10 GiB free
    figures = stranded(devices, [Ask(1, 4 * GIB)])
    assert figures.stranded_mib == 3 * GIB
    assert figures.free_mib == 13 * GIB and figures.capacity_mib == 32 * GIB and figures.pending == 1
    assert figures.stranded_pct_of_free == pytest.approx(100 * 3 / 13, abs=0.01)


def test_whole_gpu_claims_use_only_untouched_devices() -> None:
    devices = [dev("a", "gpu-0", 80, 1), dev("a", "gpu-1", 80, 0)]
    assert usable(devices, [Ask(1)]) == [False, True]
    assert stranded(devices, [Ask(1)]).stranded_mib == 79 * GIB


def test_a_multi_gpu_claim_needs_that_many_untouched_devices_on_one_node() -> None:
    devices = [dev("a", "gpu-0", 40, 0), dev("a", "gpu-1", 40, 0), dev("b", "gpu-0", 40, 0),
               dev("b", "gpu-1", 40, 10), dev("c", "gpu-0", 40, 0), dev("c", "gpu-1", 40, 0)]
    # node b has one untouched device: a 2-GPU claim cannot use it, nor b's sliced one
    assert usable(devices, [Ask(2)]) == [True, True, False, False, True, True]
    # with a 1-GPU whole claim pending too, b's untouched device is usable
    assert usable(devices, [Ask(2), Ask(1)]) == [True, True, True, False, True, True]


def test_multi_device_slices_need_enough_such_devices_on_the_node() -> None:
    devices = [dev("a", "gpu-0", 16, 10), dev("a", "gpu-1", 16, 12), dev("b", "gpu-0", 16, 10)]
    assert usable(devices, [Ask(2, 4 * GIB)]) == [True, True, False]  # b has one device with 6 GiB free


def test_nothing_pending_strands_everything_free_and_full_devices_strand_nothing() -> None:
    devices = [dev("a", "gpu-0", 24, 24), dev("a", "gpu-1", 24, 20)]
    assert stranded(devices, []).stranded_mib == 4 * GIB
    assert stranded(devices, [Ask(1, GIB)]).stranded_mib == 0


def test_asks_are_checked() -> None:
    with pytest.raises(ValueError, match="devices"):
        Ask(0)
    with pytest.raises(ValueError, match="slice"):
        Ask(1, 0)


def test_clusters_are_measured_apart_and_summed() -> None:
    east = [dev("e", "gpu-0", 40, 0)]
    west = [dev("w", "gpu-0", 40, 0), dev("w", "gpu-1", 40, 0)]
    # east's pending 1-GPU claim cannot use west's devices, and west's 4-GPU claim fits nowhere
    figures = combined([stranded(east, [Ask(1)]), stranded(west, [Ask(4)])])
    assert (figures.stranded_mib, figures.free_mib, figures.pending) == (80 * GIB, 120 * GIB, 2)
    assert stranded(east + west, [Ask(1), Ask(4)]).stranded_mib == 0  # pooled, it would hide west's
