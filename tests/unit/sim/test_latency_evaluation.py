"""Issue 6 acceptance on the shared H200 data: leave-one-config-out, p95 within 10% (median) over the
configs that are not overloaded, and every overloaded config flagged."""

import dataclasses

import pytest

from gpuplace.core.latency import fit, frames
from gpuplace.core.latency.model import DEFAULT_MODEL, QUANTILES, Stream
from gpuplace.core.latency.predict import predict
from gpuplace.core.latency.speed import relative_speed
from gpuplace.sim import latency_evaluation
from gpuplace.traces import colocation

H200 = relative_speed(colocation.DEFAULT_GPU)


@pytest.fixture(scope="module")
def table():
    directory = colocation.data_dir()
    if not (directory / colocation.FRAMES_FILE).is_file():
        pytest.skip(f"shared colocation data not found in {directory}")
    return colocation.read_frames(directory)


@pytest.fixture(scope="module")
def cv(table):
    return latency_evaluation.leave_one_config_out(table, gpu_speed=H200)


def test_every_config_is_predicted_from_the_others(cv, table):
    assert len({p.config for p in cv}) == len(set(table.config.tolist())) == 16
    assert len(cv) == 19  # two mixed configs have two models each


def test_median_absolute_p95_error_is_at_most_10_pct_on_bounded_configs(cv):
    accuracy = latency_evaluation.accuracy(cv)
    assert accuracy.bounded == 19
    assert accuracy.median_abs_error_pct <= 10.0, [(p.config, p.workload_class, round(p.error_pct, 1)) for p in cv]


def test_every_overloaded_config_is_flagged_and_no_bounded_one_is(cv, table):
    accuracy = latency_evaluation.accuracy(cv)
    observed = [s.config for s in frames.summarise(table) if s.overloaded]
    assert list(accuracy.overloaded) == observed
    assert accuracy.every_overload_flagged
    assert accuracy.false_alarms == ()


def test_the_data_holds_no_overloaded_config(table):
    # Every config keeps p95 inside its frame period and its latency does not grow over the run; the
    # heaviest, 16 x ResNet-50 at 30 fps (94% utilisation), has p95 32.7 ms of a 33.3 ms period.
    stats = frames.summarise(table)
    assert not any(s.overloaded for s in stats)
    assert max(s.p95_ms * s.frame_rate_hz / 1000 for s in stats) < 1.0


def test_predictions_err_on_the_safe_side(cv):
    # Most predictions are at or above what was seen, and none is more than ~11% below.
    errors = [p.error_pct for p in cv]
    assert sum(e >= 0 for e in errors) >= 0.75 * len(errors)
    assert min(errors) > -12.0


def test_the_fitted_model_flags_18_resnet50_streams_as_overloaded(table):
    # DESIGN.md §1: 16 streams at 30 fps stay inside the frame period, two more push p95 past 370 ms.
    model = fit.fit(table, gpu_speed=H200)
    sixteen, eighteen = (predict(model, [Stream(30.0, "r50")] * n, speed=H200) for n in (16, 18))
    assert not sixteen.overloaded and sixteen.p95_ms[0] < 1000 / 30
    assert eighteen.overloaded and eighteen.load_fraction > 1.0


def test_the_gpu_work_read_off_the_p95_slope_is_the_gpu_utilisation(table):
    # NVML: 16 x ResNet-50 at 30 fps run at 93.9% utilisation, 16 x ResNet-18 at 42.6% (within 5 points)
    model = fit.fit(table, gpu_speed=H200)
    r50, r18 = (predict(model, [Stream(30.0, c)] * 16, speed=H200).load_fraction for c in ("r50", "r18"))
    assert r50 == pytest.approx(0.939, abs=0.05) and r18 == pytest.approx(0.426, abs=0.05)


def test_the_default_tails_are_the_shared_data_fit_rounded_up(table):
    fitted = fit.fit(table, gpu_speed=H200)
    for q in QUANTILES:
        default, fresh = DEFAULT_MODEL.tail(q), fitted.tail(q)
        for name in ("solo_ratio", "offset_ms", "slope"):
            d, f = getattr(default, name), getattr(fresh, name)
            assert f - 1e-9 <= d <= f + 0.1, (q, name, d, f)


def test_fit_and_eval_on_the_same_data_match_the_data_summary(table):
    # colocation_summary.csv: r50x16_30 p95 32.657 ms (first 10% of frames dropped)
    stats = {(s.config, s.workload_class): s for s in frames.summarise(table)}
    assert stats[("r50x16_30", "r50")].p95_ms == pytest.approx(32.657, abs=0.01)
    assert dataclasses.asdict(stats[("mix_r50x6at15_r18x6at60", "r18")])["mix"] == (
        ("r18", 60.0, 6), ("r50", 15.0, 6))


def test_the_other_rows_error_figures_leave_out_the_starved_and_the_flagged():
    def row(config, predicted, within=1.0, flagged=False):
        return latency_evaluation.ConfigPrediction(config, "a", 30.0, 10.0, predicted, within < 0.5, flagged, 0.5,
                                                   within)

    # 20 rows within 1% and two 30% off; a starved row and a flagged one, far off, are not "other" rows
    rows = [row(f"c{i}", 10.1) for i in range(20)] + [row("far", 13.0), row("farther", 13.0),
                                                      row("starved", 99.0, within=0.1, flagged=True),
                                                      row("flagged", 50.0, within=0.9, flagged=True)]
    accuracy = latency_evaluation.accuracy(rows)
    assert accuracy.others_max_abs_error_pct == pytest.approx(30.0)
    assert accuracy.others_median_abs_error_pct == pytest.approx(1.0)
    assert accuracy.others_p95_abs_error_pct == pytest.approx(1.0 + 0.95 * 29.0)  # 95% of the way to the 21st row
