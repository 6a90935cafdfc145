"""Online refit from latency windows: state in, state out; a new class starts from the safe prior."""

import dataclasses
import json

import numpy as np
import pytest

from gpuplace.core.latency.model import ClassProfile, LatencyModel, Stream, Tail, as_dict, from_dict
from gpuplace.core.latency.predict import predict
from gpuplace.core.latency.update import LatencyWindow, update

TAILS = dict(p50=Tail(1.0, 3.0, 0.5), p95=Tail(1.2, 2.0, 1.0), p99=Tail(1.3, 2.5, 1.0))
TRUTH = LatencyModel(**TAILS, classes={"det": ClassProfile(4.0, 0.4), "seg": ClassProfile(9.0, 0.6)})
NEW = LatencyModel(**TAILS)


def observed(streams, speed=1.0, frames=600):
    """The window the truth would report for streams[0], sharing the GPU with the rest."""
    p = predict(TRUTH, streams, speed=speed)
    return LatencyWindow(streams[0], tuple(streams[1:]), speed, float(p.p50_ms[0]), float(p.p95_ms[0]),
                         float(p.p99_ms[0]), frames)


def test_a_class_never_seen_holds_the_gpu_for_its_whole_service_time():
    assert NEW.work_fraction("det") == 1.0
    assert NEW.work_ms(Stream(30.0, "det", service_ms=4.0)) == 4.0


def test_gpu_bound_windows_of_one_class_bring_its_work_fraction_down_to_the_truth():
    # 6 detection streams at 30 fps, 4 ms each, truth 0.4: W = 6 x 1.6 = 9.6, p95 = 11.6 ms.
    # One equation for one unknown leaves no residual to judge it by: the safe value stays at the prior.
    # Thirty noise-free windows: the estimate is 0.4 (a little above, pulled by the prior) and tight.
    window = observed([Stream(30.0, "det", 4.0)] * 6)
    assert window.p95_ms == pytest.approx(11.6)
    assert update(NEW, [window]).classes["det"].work_fraction == 1.0
    many = update(NEW, [window] * 30)
    assert 0.4 <= many.classes["det"].work_fraction == pytest.approx(0.4, abs=0.02)


def test_noisy_windows_keep_the_learned_value_above_the_estimate():
    rng = np.random.default_rng(1)
    windows = []
    for _ in range(12):
        w = observed([Stream(30.0, "det", 4.0)] * int(rng.integers(4, 9)))
        noise = float(np.exp(rng.normal(0, 0.05)))
        windows.append(dataclasses.replace(w, p50_ms=w.p50_ms * noise, p95_ms=w.p95_ms * noise,
                                           p99_ms=w.p99_ms * noise))
    safe = update(NEW, windows).classes["det"].work_fraction
    point = update(NEW, windows, confidence_z=0.0).classes["det"].work_fraction
    assert point < safe < 1.0 and point == pytest.approx(0.4, abs=0.05)


def test_classes_new_together_are_solved_together():
    rng = np.random.default_rng(0)
    windows = []
    for _ in range(60):
        det, seg = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        streams = [Stream(30.0, "det", 4.0)] * det + [Stream(15.0, "seg", 9.0)] * seg
        rng.shuffle(streams)
        windows.append(observed(streams, speed=float(rng.choice([0.65, 1.0, 1.15]))))
    model = update(NEW, windows)
    assert model.classes["det"].work_fraction == pytest.approx(0.4, abs=0.03)
    assert model.classes["seg"].work_fraction == pytest.approx(0.6, abs=0.03)


def test_windows_below_the_gpu_bound_regime_say_nothing_about_work():
    # alone, p95 = max(1.2 x 4, 2 + 1.6) = 4.8: the solo floor, not the GPU queue
    model = update(NEW, [observed([Stream(30.0, "det", 4.0)])])
    assert model.classes["det"].work_fraction == 1.0


def test_a_window_alone_teaches_the_service_time_of_the_class():
    # p50 alone on a GPU at half speed: 8 ms -> 4 ms on the reference GPU, half-way from the 16.7 ms prior
    window = LatencyWindow(Stream(30.0, "det"), (), 0.5, 8.0, 9.6, 10.4, 600)
    model = update(NEW, [window])
    assert model.classes["det"].service_ms == pytest.approx((0.5 * 1000 / 30 + 4.0) / 2)


def test_update_returns_a_new_state_and_leaves_the_old_one_alone():
    before = as_dict(NEW)
    after = update(NEW, [observed([Stream(30.0, "det", 4.0)] * 6)])
    assert as_dict(NEW) == before and after is not NEW and "det" in after.classes


def test_the_state_round_trips_through_json():
    model = update(NEW, [observed([Stream(30.0, "det", 4.0)] * 3 + [Stream(15.0, "seg", 9.0)] * 2)] * 3)
    again = from_dict(json.loads(json.dumps(as_dict(model))))
    assert again.classes == model.classes
    assert np.allclose(again.evidence.gram, model.evidence.gram)
    more = [observed([Stream(15.0, "seg", 9.0)] * 4)]
    assert update(again, more).classes == update(model, more).classes


def test_windows_without_a_class_or_frames_change_nothing():
    window = observed([Stream(30.0, None, 4.0)] * 6)
    assert update(NEW, [window, dataclasses.replace(observed([Stream(30.0, "det", 4.0)] * 6), frames=0)]) is NEW


def test_a_window_checks_its_percentiles():
    with pytest.raises(ValueError):
        LatencyWindow(Stream(30.0, "det"), (), 1.0, 10.0, 9.0, 11.0, 10)


def test_a_window_of_a_stream_faster_than_a_co_runner_teaches_no_work():
    # ResNet-18 at 60 fps beside ResNet-50 at 15 fps: a quarter of its frames meet the ResNet-50 ones, so its p95 over
    # all frames is a lower quantile of that busy period; read as the p95 it would take r18's work for less than it is
    model = LatencyModel(**TAILS, classes={"r18": ClassProfile(3.7, 0.29), "r50": ClassProfile(7.0, 0.29)})
    co_runners = (Stream(15.0, "r50"),) * 6 + (Stream(60.0, "r18"),) * 5
    window = LatencyWindow(Stream(60.0, "r18"), co_runners, 1.15, 5.8, 26.0, 27.6, 1944)
    assert update(model, [window]).evidence.equations == 0
    # the same percentiles from a stream at the slow one's rate: every frame meets it, one equation
    same_rate = LatencyWindow(Stream(15.0, "r18"), co_runners[:6], 1.15, 12.0, 26.0, 27.6, 1944)
    assert update(model, [same_rate]).evidence.equations == pytest.approx(1.0)
