"""A pod's frame latency histogram: parsed from exposition text, windowed, read as percentiles and misses."""

import math

import numpy as np
import pytest

from gpuplace.adapters.pod_metrics.histogram import Histogram, HistogramError, parse_histogram

# 100 frames: 50 within 10 ms, 40 more within 20 ms, 8 more within 40 ms, 2 beyond 80 ms
TEXT = """\
# HELP gpuplace_frame_latency_seconds Frame latency, release to result.
# TYPE gpuplace_frame_latency_seconds histogram
gpuplace_frame_latency_seconds_bucket{le="0.01"} 50
gpuplace_frame_latency_seconds_bucket{le="0.02"} 90
gpuplace_frame_latency_seconds_bucket{le="0.04"} 98
gpuplace_frame_latency_seconds_bucket{le="0.08"} 98
gpuplace_frame_latency_seconds_bucket{le="+Inf"} 100
gpuplace_frame_latency_seconds_sum 1.7
gpuplace_frame_latency_seconds_count 100
other_metric 3
"""


def hist():
    h = parse_histogram(TEXT, "gpuplace_frame_latency_seconds")
    assert h is not None
    return h


def test_buckets_are_read_in_seconds():
    h = hist()
    assert h.upper_s.tolist() == [0.01, 0.02, 0.04, 0.08, math.inf]
    assert h.cumulative.tolist() == [50, 90, 98, 98, 100] and h.count == 100


@pytest.mark.parametrize(("q", "ms"), [
    (0.25, 5.0),    # rank 25 of the 50 in (0, 10 ms]: halfway
    (0.5, 10.0),    # rank 50: the top of the first bucket
    (0.95, 32.5),   # rank 95: 5 of the 8 in (20, 40 ms] -> 20 + 20 x 5 / 8
])
def test_percentiles_as_histogram_quantile_reads_them(q, ms):
    assert hist().quantile_ms(q) == pytest.approx(ms)


def test_a_percentile_in_the_inf_bucket_is_the_highest_finite_bound():
    assert hist().quantile_ms(0.99) == pytest.approx(80.0)  # rank 99 is past 98: the +Inf bucket


def test_frames_over_a_deadline_interpolate_within_the_bucket():
    # 33.3 ms falls in (20, 40]: 90 + 8 x (13.3 / 20) = 95.32 within, so 4.68 -> 5 over; 80 ms: the 2 in +Inf
    assert hist().count_over_ms(33.3) == 5
    assert hist().count_over_ms(80.0) == 2 and hist().count_over_ms(200.0) == 2 and hist().count_over_ms(1.0) == 95


def test_a_window_is_the_difference_of_two_scrapes_and_a_restart_starts_afresh():
    earlier = Histogram(hist().upper_s, np.array([10, 20, 20, 20, 20.0]))
    window = hist().since(earlier)
    assert window.cumulative.tolist() == [40, 70, 78, 78, 80] and window.count == 80
    restarted = Histogram(hist().upper_s, np.array([60, 95, 99, 99, 101.0]))  # counts above the current ones
    assert hist().since(restarted) is not None and hist().since(restarted).count == 100
    assert hist().since(None).count == 100


def test_series_with_other_labels_are_summed():
    text = ('m_bucket{camera="front",le="0.01"} 1\nm_bucket{camera="front",le="+Inf"} 2\n'
            'm_bucket{camera="rear",le="0.01"} 3\nm_bucket{camera="rear",le="+Inf"} 3\n')
    h = parse_histogram(text, "m")
    assert h is not None and h.cumulative.tolist() == [4, 5]


def test_a_missing_metric_is_none_and_a_broken_one_an_error():
    assert parse_histogram(TEXT, "nope") is None
    with pytest.raises(HistogramError, match="exposition"):
        parse_histogram('m_bucket{le="0.01" 3\n', "m")
    with pytest.raises(HistogramError, match=r"\+Inf"):
        parse_histogram('m_bucket{le="0.01"} 3\n', "m")
    with pytest.raises(HistogramError, match="cumulative"):
        parse_histogram('m_bucket{le="0.01"} 3\nm_bucket{le="+Inf"} 2\n', "m")
    assert math.isnan(Histogram(np.array([0.01, math.inf]), np.array([0.0, 0.0])).quantile_ms(0.5))
