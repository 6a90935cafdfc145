"""Past saturation, from hand-worked cases: the GPU's round, which streams it cannot keep up with, what the
others wait for, and the fit reading GPU work off a saturated config's round."""

from dataclasses import replace

import numpy as np
import pytest

from gpuplace.core.latency import fit, frames
from gpuplace.core.latency.model import DEFAULT_MODEL, ClassProfile, LatencyModel, Stream, Tail
from gpuplace.core.latency.predict import predict
from gpuplace.core.latency.saturation import overloaded, saturation_round
from tests.unit.latency.test_fit_and_frames import synthetic

# p95 = max(1.2 s, 2 + W); "big" does 2 ms of GPU work per frame, "small" 1 ms
MODEL = LatencyModel(
    p50=Tail(1.0, 3.0, 0.5), p95=Tail(1.2, 2.0, 1.0), p99=Tail(1.3, 2.5, 1.0),
    classes={"big": ClassProfile(service_ms=8.0, work_fraction=0.25),
             "small": ClassProfile(service_ms=4.0, work_fraction=0.25)},
)


def test_below_capacity_there_is_no_round():
    # 10 x 2 ms at 50 ms periods: load 0.4
    assert saturation_round(np.full(10, 2.0), np.full(10, 50.0)) == 0.0


def test_the_round_serves_one_frame_of_each_stream_behind_and_what_the_others_release():
    # 10 x 2 ms at 40 ms (load 0.5) and 8 x 1 ms at 10 ms (load 0.8): 1.3 > 1. If only the 10 ms streams are
    # behind: R = 8 x 1 / (1 - 0.5) = 16 ms, between 10 and 40 ms: they are behind, the others keep up.
    work, period = np.array([2.0] * 10 + [1.0] * 8), np.array([40.0] * 10 + [10.0] * 8)
    r = saturation_round(work, period)
    assert r == pytest.approx(16.0)
    assert overloaded(period, r).tolist() == [False] * 10 + [True] * 8


def test_equal_periods_past_capacity_leave_every_stream_behind():
    # 20 x 2 ms at 30 ms: R = 40 ms > 30 ms for all
    work, period = np.full(20, 2.0), np.full(20, 30.0)
    r = saturation_round(work, period)
    assert r == pytest.approx(40.0) and overloaded(period, r).all()


def test_a_lower_capacity_lengthens_the_round():
    # capacity 0.8: 0.8 R = 8 x 1 + 0.5 R... R = 8 / (0.8 - 0.5) = 26.7 ms
    work, period = np.array([2.0] * 10 + [1.0] * 8), np.array([40.0] * 10 + [10.0] * 8)
    assert saturation_round(work, period, capacity=0.8) == pytest.approx(8 / 0.3)


def test_rows_are_independent_and_inputs_checked():
    work = np.array([[2.0] * 3, [20.0] * 3])
    period = np.full((2, 3), 30.0)
    r = saturation_round(work, period)
    assert r[0] == 0.0 and r[1] == pytest.approx(60.0)
    with pytest.raises(ValueError):
        saturation_round(np.array([-1.0]), np.array([30.0]))
    with pytest.raises(ValueError):
        saturation_round(np.array([1.0]), np.array([30.0]), capacity=0.0)


def test_a_saturated_gpu_flags_the_streams_it_cannot_keep_up_with_and_predicts_the_others():
    # A GPU that gives 0.9 of its time. big: work 2 ms at 20 fps (50 ms), x10, load 0.4; small: work 1 ms at
    # 100 fps (10 ms), x8, load 0.8. Round: 0.9 R = 8 x 1 + 0.4 R -> R = 16 ms: small is behind, big keeps up.
    # For big, the small streams release a frame once a round:
    # W = 10 x 2 + 8 x 1 x max(1, W / 16) -> W = 20 / (1 - 0.5) = 40 ms (< 50): p95 = 2 + 40 = 42 ms.
    model = replace(MODEL, max_load=0.9)
    p = predict(model, [Stream(20.0, "big")] * 10 + [Stream(100.0, "small")] * 8)
    assert p.overloaded and p.round_ms == pytest.approx(16.0)
    assert p.overloaded_streams.tolist() == [False] * 10 + [True] * 8
    assert p.p95_ms[:10] == pytest.approx(np.full(10, 42.0))
    assert np.isinf(p.p95_ms[10:]).all() and np.isinf(p.busy_work_ms)


def test_at_full_capacity_a_stream_whose_busy_period_would_not_end_is_overloaded_too():
    # The same mix on a GPU that gives all its time: R = 8 / (1 - 0.4) = 13.3 ms, and for big W = 20 / (1 - 0.6)
    # = 50 ms, its whole period: the GPU never idles, so its backlog does not shrink either.
    p = predict(MODEL, [Stream(20.0, "big")] * 10 + [Stream(100.0, "small")] * 8)
    assert p.round_ms == pytest.approx(8 / 0.6)
    assert p.overloaded_streams[10:].all()
    assert all(np.isinf(p.p95_ms[i]) == bool(p.overloaded_streams[i]) for i in range(18))


def test_below_saturation_no_stream_is_overloaded():
    p = predict(MODEL, [Stream(30.0, "big")] * 16)  # load 0.96
    assert not p.overloaded and not p.overloaded_streams.any() and p.round_ms == 0.0


def test_the_fit_reads_gpu_work_off_a_saturated_configs_round():
    # Class a: 8 ms alone; with n streams at 30 fps p95 = 1.5 + 2 n (2 ms of GPU work per frame). A config of
    # 20 streams is saturated: each stream is served every 20 x 2 = 40 ms, so frame f completes at 40 f ms
    # after the start and its latency grows as 40 f - 33.3 f. The round equation says 2 ms again, and the
    # capacity, the share of the round that work fills, is 1.
    def loaded(n):
        return lambda f, w: (1.5 + 2.0 * n) * (0.8 + 0.2 * ((f * 7 + w) % 20) / 19)

    configs = {"solo": [("a", 30.0, 1, lambda f, w: 8.0 + (f % 20) / 19)]}
    configs |= {f"x{n}": [("a", 30.0, n, loaded(n))] for n in (4, 8, 12)}
    configs |= {"x20": [("a", 30.0, 20, lambda f, w: 40.0 + f * (40.0 - 1000 / 30))]}
    stats = frames.summarise(synthetic(configs))
    saturated = next(s for s in stats if s.config == "x20")
    assert saturated.overloaded and saturated.served_interval_ms == pytest.approx(40.0)
    assert saturated.within_period == 0.0
    model = fit.fit_stats(stats, gpu_speed=1.0, safety_quantile=0.5)
    profile = model.classes["a"]
    assert profile.work_fraction * profile.service_ms == pytest.approx(2.0, rel=0.03)
    assert model.max_load == pytest.approx(1.0, abs=0.03)
    assert predict(model, [Stream(30.0, "a")] * 20).overloaded_streams.all()


def test_a_class_seen_only_alone_is_charged_its_solo_gpu_time_plus_the_switch_cost():
    # a: alone 8 ms, 5% utilisation at 30 fps (1.667 ms busy per frame), 2 ms of work co-located: switch 0.333.
    # b: seen only alone, 10 ms, 9% at 30 fps (3 ms busy): 3 + 0.333 = 3.333 ms of work (fraction 0.333), more
    # than a's share of its service time (2 / 8.5 x 10 = 2.35 ms).
    def loaded(n):
        return lambda f, w: (1.5 + 2.0 * n) * (0.8 + 0.2 * ((f * 7 + w) % 20) / 19)

    configs = {"solo": [("a", 30.0, 1, lambda f, w: 8.0 + (f % 20) / 19)],
               "solo_b": [("b", 30.0, 1, lambda f, w: 10.0)]}
    configs |= {f"x{n}": [("a", 30.0, n, loaded(n))] for n in (4, 8, 12)}
    table = synthetic(configs)
    model = fit.fit(table, gpu_speed=1.0, safety_quantile=0.5, utilisation={"solo": 0.05, "solo_b": 0.09})
    a, b = model.classes["a"], model.classes["b"]
    assert model.switch_ms == pytest.approx(a.work_fraction * a.service_ms - 5.0 / 3, abs=1e-9)
    assert b.work_fraction * b.service_ms == pytest.approx(3.0 + model.switch_ms)
    without = fit.fit(table, gpu_speed=1.0, safety_quantile=0.5)  # no utilisation: a's share of b's service time
    assert without.classes["b"].work_fraction == pytest.approx(a.work_fraction)
    with pytest.raises(ValueError, match="fractions"):
        fit.fit(table, gpu_speed=1.0, utilisation={"solo": 5.0})


def test_the_default_model_packs_a_class_known_only_from_its_solo_profile():
    # Two perception models never seen co-located, profiled alone on an H200 at 30 fps: 12 and 9 ms per frame
    # (13.8 and 10.35 ms on the reference GPU). Two of each on one H200: with the whole service time on the GPU
    # (the dataclass's prior 1.0) the load is 2 x (12 + 9) x 30 / 1000 = 1.26: every stream flagged overloaded.
    # DEFAULT_MODEL charges 0.29 of it: load 0.37, W = 0.29 x 42 = 12.2 ms, p95 = max(1.36 x 12, 2.09 + 12.2) =
    # 16.3 ms for the 12 ms model, inside its 33.3 ms period.
    streams = [Stream(30.0, "seg", service_ms=13.8), Stream(30.0, "det", service_ms=10.35)] * 2
    assert predict(replace(DEFAULT_MODEL, prior_work_fraction=1.0), streams, speed=1.15).overloaded_streams.all()
    p = predict(DEFAULT_MODEL, streams, speed=1.15)
    assert not p.overloaded and p.load_fraction == pytest.approx(0.29 * 2 * 21 * 30 / 1000)
    assert p.p95_ms[0] == pytest.approx(1.36 * 12.0) and (p.p95_ms < 1000 / 30).all()
