"""Percentiles of streams sharing a GPU, from hand-worked cases."""

import dataclasses

import numpy as np
import pytest

from gpuplace.core.latency.model import ClassProfile, LatencyModel, Stream, Tail
from gpuplace.core.latency.predict import predict, share_over

# p50 = max(1.0 s, 3 + 0.5 W), p95 = max(1.2 s, 2 + W), p99 = max(1.3 s, 2.5 + W)
MODEL = LatencyModel(
    p50=Tail(1.0, 3.0, 0.5), p95=Tail(1.2, 2.0, 1.0), p99=Tail(1.3, 2.5, 1.0),
    classes={"r50": ClassProfile(service_ms=8.0, work_fraction=0.25)},
)


def test_alone_the_stream_sees_its_own_service_time():
    # W = 0.25 x 8 = 2 ms; p95 = max(1.2 x 8, 2 + 2) = 9.6 ms
    p = predict(MODEL, [Stream(30.0, "r50")])
    assert p.p95_ms[0] == pytest.approx(9.6)
    assert p.load_fraction == pytest.approx(2.0 * 30 / 1000)


def test_sixteen_streams_wait_behind_each_others_gpu_work():
    # W = 16 x 2 = 32 ms (< 33.3 ms period); p95 = 2 + 32 = 34 ms; p50 = 3 + 16 = 19 ms; p99 = 34.5 ms
    p = predict(MODEL, [Stream(30.0, "r50")] * 16)
    assert p.busy_work_ms == pytest.approx(32.0)
    assert p.p95_ms == pytest.approx(np.full(16, 34.0))
    assert p.p50_ms[0] == pytest.approx(19.0) and p.p99_ms[0] == pytest.approx(34.5)
    assert not p.overloaded and p.load_fraction == pytest.approx(0.96)


def test_a_slower_gpu_scales_every_time():
    # on a GPU at half the reference speed: s = 16 ms, b = 4 ms; 4 streams: W = 16, p95 = max(19.2, 4 + 16)
    p = predict(MODEL, [Stream(30.0, "r50")] * 4, speed=0.5)
    assert p.p95_ms[0] == pytest.approx(20.0)
    assert p.load_fraction == pytest.approx(4 * 4.0 * 30 / 1000)


def test_past_full_load_latency_has_no_bound():
    p = predict(MODEL, [Stream(30.0, "r50")] * 17)  # 17 x 2 ms x 30 / s = 1.02
    assert p.overloaded and np.isinf(p.p95_ms).all()


def test_an_unknown_class_is_assumed_to_hold_the_gpu_for_its_whole_service_time():
    # prior work fraction 1.0: a 5 ms stream at 30 fps loads the GPU 0.15, and three of them give W = 15
    p = predict(MODEL, [Stream(30.0, "new", service_ms=5.0)] * 3)
    assert p.load_fraction == pytest.approx(0.45)
    assert p.p95_ms[0] == pytest.approx(2.0 + 15.0)


def test_without_any_service_time_the_prior_is_half_a_frame_period():
    # 10 fps: period 100 ms, prior service 50 ms, all of it GPU work; p95 = max(1.2 x 50, 2 + 50) = 60
    p = predict(MODEL, [Stream(10.0, "new")])
    assert p.p95_ms[0] == pytest.approx(60.0)


def test_percentiles_come_out_ordered():
    p = predict(MODEL, [Stream(30.0, "r50")] * 2, speed=0.3)
    assert (p.p50_ms <= p.p95_ms).all() and (p.p95_ms <= p.p99_ms).all()


@pytest.mark.parametrize(("deadline_ms", "share"), [
    (40.0, 0.0),      # past the maximum p99 + (p99 - p95) = 35
    (32.5, 0.005),    # halfway between p99 (30) and the maximum (35): half of the last 1%
    (25.0, 0.05),     # at p95
    (15.0, 0.5),      # at p50
    (7.5, 0.75),      # halfway from 0 to p50
])
def test_share_of_frames_past_a_deadline(deadline_ms, share):
    assert share_over(deadline_ms, 15.0, 25.0, 30.0) == pytest.approx(share)


def test_unbounded_latency_misses_every_frame():
    assert share_over(100.0, np.inf, np.inf, np.inf) == 1.0


# class "g" holds the GPU for all of its 4 ms (solo p95 1.2 x 4 = 4.8 ms); "tiny" for 0.1 ms
MIXED = LatencyModel(
    p50=Tail(1.0, 3.0, 0.5), p95=Tail(1.2, 2.0, 1.0), p99=Tail(1.3, 2.5, 1.0),
    classes={"g": ClassProfile(service_ms=4.0, work_fraction=1.0), "tiny": ClassProfile(0.1, 1.0)},
)


def test_a_faster_stream_has_only_part_of_its_frames_released_with_a_slower_one():
    # one g at 60 fps beside three at 15 fps: a quarter of its frames meet the slow ones' releases, where
    # W = 12 + 4 = 16 ms (p50 3 + 8 = 11, p95 2 + 16 = 18, p99 18.5); its p95 is their 1 - 0.05 / 0.25 = 80th
    # percentile, 11 + (0.3 / 0.45) x 7, and its p99 their 96th, 18 + (0.01 / 0.04) x 0.5; the slow ones' p95 is 18.
    p = predict(MIXED, [Stream(60.0, "g")] + [Stream(15.0, "g")] * 3)
    assert p.p95_ms == pytest.approx([11.0 + 7.0 * 0.3 / 0.45, 18.0, 18.0, 18.0])
    assert p.p99_ms[0] == pytest.approx(18.125)
    # its p50 is that of the frames released alone with each other: W = 4, p50 = 3 + 2 = 5
    assert p.p50_ms[0] == pytest.approx(5.0)
    assert p.busy_work_ms == pytest.approx(16.0)  # the critical instant's, as admission reads it
    # all at 15 fps, every frame meets the critical instant
    assert predict(MIXED, [Stream(15.0, "g")] * 4).p95_ms == pytest.approx(np.full(4, 18.0))


def test_a_slow_co_runner_does_not_lower_the_p95_of_the_frames_released_without_it():
    # four g at 30 fps (W = 16 ms among themselves) and one tiny stream at 1 fps: one frame in 30 meets the tiny
    # one, too few for the p95, which stays that of the four: 2 + 16 = 18 ms, never below
    p = predict(MIXED, [Stream(30.0, "g")] * 4 + [Stream(1.0, "tiny")])
    assert p.p95_ms[:4] == pytest.approx(np.full(4, 18.0))


def test_over_a_window_an_overloaded_streams_latency_grows_with_its_backlog():
    # 17 x 2 ms at 30 fps: the round is 34 ms, 0.67 ms more than the period, so frame k completes 0.67 k ms later
    # than the first, which waits for one frame of each (W = 34: p50 3 + 17 = 20, p95 36, p99 36.5). Over the
    # frames released in the first second (k = 0..30): p95 = 36 + 0.95 x 30 x 0.67 = 55 ms, p50 = 20 + 10 = 30
    streams = [Stream(30.0, "r50")] * 17
    p = predict(MODEL, streams, window_s=(0.0, 1.0))
    growth = 34.0 - 1000.0 / 30
    assert p.overloaded_streams.all() and p.round_ms == pytest.approx(34.0)
    assert p.p95_ms == pytest.approx(np.full(17, 36.0 + 0.95 * 30 * growth))
    assert p.p50_ms[0] == pytest.approx(20.0 + 0.5 * 30 * growth)
    assert p.p99_ms[0] == pytest.approx(36.5 + 0.99 * 30 * growth)
    later = predict(MODEL, streams, window_s=(1.0, 2.0))
    assert (later.p95_ms > p.p95_ms + 30 * growth - 1e-9).all()  # a second later, a second's backlog more
    more = predict(MODEL, [Stream(30.0, "r50")] * 20, window_s=(0.0, 1.0))
    assert more.p95_ms[0] > p.p95_ms[0]  # more overload, a faster-growing queue
    assert np.isinf(predict(MODEL, streams).p95_ms).all()  # in the long run: no bound


def test_a_window_leaves_the_streams_that_keep_up_as_they_were():
    # a GPU that gives 0.95: six at 60 fps fall behind (round 12 / (0.95 - 0.36) = 20.3 ms), six at 30 fps keep up
    model = dataclasses.replace(MODEL, max_load=0.95)
    mixed = [Stream(30.0, "r50")] * 6 + [Stream(60.0, "r50")] * 6
    plain, windowed = predict(model, mixed), predict(model, mixed, window_s=(0.5, 6.0))
    keep = ~plain.overloaded_streams
    assert keep.any() and plain.overloaded_streams.any()
    assert windowed.p95_ms[keep] == pytest.approx(plain.p95_ms[keep])
    assert np.isfinite(windowed.p95_ms).all() and (windowed.overloaded_streams == plain.overloaded_streams).all()
