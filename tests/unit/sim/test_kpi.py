"""Reading the allocation curve at 100% arrived demand, as the paper's scripts do."""

import numpy as np

from gpuplace.sim.kpi import at, curve, read_at, unallocated_pct_at


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


def test_the_kpi_is_interpolated_between_the_arrivals_either_side_of_the_mark():
    # 10 GPUs. One big pod steps from 98.0 % to 102.0 %: no row rounds to 99..101 %, so the averaged
    # reading has nothing to read; the curve at exactly 100 % is halfway between the two rows.
    arrived = np.array([0, 9800, 10200])
    allocated = np.array([0, 9000, 9400])  # 90.0 % then 94.0 %
    assert np.isnan(read_at(arrived, allocated / 100, total_gpus=10, arrived_pct=100))
    assert unallocated_pct_at(arrived, allocated, total_gpus=10) == 100.0 - 92.0
    assert at(arrived, allocated / 100, total_gpus=10, arrived_pct=99) == 91.0  # a quarter of the way


def test_a_row_on_the_mark_is_read_as_it_is_and_a_stream_short_of_it_has_no_kpi():
    arrived = np.array([0, 5000, 10000])
    assert at(arrived, np.array([0.0, 40.0, 70.0]), total_gpus=10, arrived_pct=100) == 70.0
    assert unallocated_pct_at(np.array([0, 9000]), np.array([0, 8000]), total_gpus=10) is None  # ends at 90 %
