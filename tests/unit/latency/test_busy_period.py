"""The busy period W = sum_j b_j max(1, W / T_j), solved exactly, with the arithmetic shown."""

import numpy as np
import pytest

from gpuplace.core.latency.busy_period import busy_period


def fixed_point(work, period, iterations=10_000):
    w = sum(work)
    for _ in range(iterations):
        w = sum(b * max(1.0, w / t) for b, t in zip(work, period, strict=True))
    return w


def test_equal_periods_release_one_frame_each():
    # 16 streams at 30 fps, 1.95 ms of GPU work each: W = 16 x 1.95 = 31.2 ms < 33.3 ms; load = 31.2 / 33.3
    w, load = busy_period(np.full(16, 1.95), np.full(16, 1000 / 30))
    assert w == pytest.approx(31.2)
    assert load == pytest.approx(31.2 / (1000 / 30))


def test_a_faster_stream_releases_again_inside_the_busy_period():
    # 6 x 1.95 ms at 15 fps and 6 x 0.85 ms at 60 fps. One frame each is 11.7 + 5.1 = 16.8 ms, past the
    # 16.67 ms period of the 60 fps streams, so they count W / T each:
    # W = 11.7 + 5.1 * W / 16.667  ->  W = 11.7 / (1 - 0.306) = 16.86 ms
    work = [1.95] * 6 + [0.85] * 6
    period = [1000 / 15] * 6 + [1000 / 60] * 6
    w, load = busy_period(np.array(work), np.array(period))
    assert w == pytest.approx(11.7 / (1 - 5.1 / (1000 / 60)))
    assert w == pytest.approx(fixed_point(work, period))
    assert load == pytest.approx(11.7 / (1000 / 15) + 5.1 / (1000 / 60))


def test_load_at_or_past_one_has_no_bound():
    w, load = busy_period(np.full(18, 1.95), np.full(18, 1000 / 30))  # 18 x 1.95 x 30 / 1000 = 1.053
    assert np.isinf(w) and load == pytest.approx(1.053)


def test_empty_slots_change_nothing_and_rows_are_independent():
    work = np.array([[2.0, 3.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [10.0, 1.0, 0.0, 0.0]])  # (3 GPUs, 4 slots)
    period = np.array([[50.0, 20.0, np.inf, np.inf], [np.inf] * 4, [12.0, 100.0, np.inf, np.inf]])
    w, _ = busy_period(work, period)
    assert w[0] == pytest.approx(5.0)  # 2 + 3 < both periods
    assert w[1] == 0.0
    # 10 + 1 = 11 < 12, so one frame each
    assert w[2] == pytest.approx(11.0)


@pytest.mark.parametrize("seed", range(20))
def test_agrees_with_the_fixed_point_iteration(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    period = rng.choice([1000 / 60, 1000 / 30, 1000 / 15, 100.0], size=n)
    work = rng.uniform(0.1, 1.0, size=n) * period * 0.9 / n  # load below 0.9
    w, _ = busy_period(work, period)
    assert w == pytest.approx(fixed_point(work.tolist(), period.tolist()), rel=1e-6)


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        busy_period(np.array([1.0]), np.array([0.0]))
    with pytest.raises(ValueError):
        busy_period(np.array([1.0, 2.0]), np.array([10.0]))
