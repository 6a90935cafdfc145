"""Reading the allocation curve at 100% arrived demand, as the paper's scripts do."""

import numpy as np

from gpuplace.sim.kpi import curve, read_at, unallocated_pct_at


def test_rows_whose_arrival_rounds_to_the_point_are_averaged():
    # 10 GPUs = 10000m. Arrived 9940, 9960, 10040, 10060 milli -> 99.4, 99.6, 100.4, 100.6 %
    # round to 99, 100, 100, 101: the rows at 99.6 % and 100.4 % are read.
    arrived = np.array([9940, 9960, 10040, 10060])
    allocated = np.array([9000, 9100, 9300, 9300])  # 90.0, 91.0, 93.0, 93.0 %
    # mean of 91.0 and 93.0 = 92.0 -> unallocated 100 - 92.0 = 8.0
    assert unallocated_pct_at(arrived, allocated, total_gpus=10) == 8.0


def test_without_a_row_at_the_point_the_neighbours_within_one_percent_are_read():
    arrived = np.array([9800, 10120])  # 98.0 % and 101.2 %: none rounds to 100
    values = np.array([50.0, 60.0])
    # rows within 99..101 after rounding: 101.2 -> 101 only -> 60.0
    assert read_at(arrived, values, total_gpus=10, arrived_pct=100) == 60.0
    assert np.isnan(read_at(arrived, values, total_gpus=10, arrived_pct=50))


def test_curve_skips_points_without_rows():
    arrived = np.array([0, 5000, 10000])
    values = np.array([0.0, 50.0, 100.0])
    assert curve(arrived, values, total_gpus=10, points=[0, 50, 75, 100]) == {0: 0.0, 50: 50.0, 100: 100.0}
