"""Observed summaries and the offline fit on synthetic frames whose answer is known."""

import numpy as np
import pytest

from gpuplace.core.latency import fit, frames
from gpuplace.core.latency.frames import FrameTable


def synthetic(configs):
    """configs: {name: [(class, fps, n_streams, latency function(frame, worker) -> ms)]}, 100 frames each."""
    cols = {k: [] for k in ("config", "workload_class", "worker", "frame_rate_hz", "frame", "latency_ms")}
    for name, kinds in configs.items():
        worker = 0
        for cls, fps, n, latency in kinds:
            for _ in range(n):
                for f in range(100):
                    for key, value in zip(cols, (name, cls, worker, fps, f, latency(f, worker)), strict=True):
                        cols[key].append(value)
                worker += 1
    return FrameTable(*(np.array(v, dtype=object if k in ("config", "workload_class") else None)
                        for k, v in cols.items()))


def test_warm_up_frames_are_dropped_and_percentiles_taken_per_class():
    # the first 10 frames are slow (ramp-up); afterwards frame f takes 10 + f % 10 ms
    table = synthetic({"c": [("a", 30.0, 2, lambda f, w: 100.0 if f < 10 else 10.0 + f % 10)]})
    [row] = frames.summarise(table)
    assert row.frames == 180 and row.p50_ms == pytest.approx(14.5) and row.mix == (("a", 30.0, 2),)
    assert not row.overloaded


def test_a_growing_backlog_is_observed_overloaded():
    # latency grows 1 ms per frame: after 100 frames it is far past the 33 ms period
    table = synthetic({"c": [("a", 30.0, 1, lambda f, w: 5.0 + f)]})
    assert frames.summarise(table)[0].overloaded


def test_fit_recovers_work_per_frame_and_offset():
    # A class alone: 8 ms at p50 (p95 9 ms). With n streams at 30 fps, p95 = 1.5 + 2 n ms: GPU work
    # 2 ms per frame, offset 1.5 ms. The fit must find b = 2 (work fraction 2 / 8) and offset 1.5.
    def loaded(n):
        return lambda f, w: (1.5 + 2.0 * n) * (0.8 + 0.2 * ((f * 7 + w) % 20) / 19)  # p95 ~ 1.5 + 2n

    configs = {"solo": [("a", 30.0, 1, lambda f, w: 8.0 + (f % 20) / 19)]}
    configs |= {f"x{n}": [("a", 30.0, n, loaded(n))] for n in (4, 6, 8, 10, 12)}
    model = fit.fit(synthetic(configs), gpu_speed=1.0, safety_quantile=0.5)
    profile = model.classes["a"]
    assert profile.service_ms == pytest.approx(8.5, abs=0.1)
    assert profile.work_fraction * profile.service_ms == pytest.approx(2.0, rel=0.03)
    assert model.p95.slope == pytest.approx(1.0, abs=0.02)


def test_fit_keeps_times_on_the_reference_gpu():
    configs = {"solo": [("a", 30.0, 1, lambda f, w: 8.0)], "x8": [("a", 30.0, 8, lambda f, w: 17.0)],
               "x12": [("a", 30.0, 12, lambda f, w: 25.0)]}
    on_h200 = fit.fit(synthetic(configs), gpu_speed=1.15)
    on_ref = fit.fit(synthetic(configs), gpu_speed=1.0)
    assert on_h200.classes["a"].service_ms == pytest.approx(1.15 * on_ref.classes["a"].service_ms)
    assert on_h200.p95.offset_ms == pytest.approx(1.15 * on_ref.p95.offset_ms)


def test_fit_refuses_nothing_to_fit():
    table = synthetic({"c": [("a", 30.0, 1, lambda f, w: 5.0 + f)]})
    with pytest.raises(ValueError, match="overloaded"):
        fit.fit(table, gpu_speed=1.0)


def test_a_frame_table_checks_its_columns():
    with pytest.raises(ValueError):
        FrameTable(np.array(["c"]), np.array(["a"]), np.array([0]), np.array([30.0]), np.array([0]),
                   np.array([1.0, 2.0]))


def test_a_faster_streams_critical_percentiles_are_those_of_its_frames_released_with_the_slowest():
    # ResNet-18 at 60 fps beside ResNet-50 at 15 fps, as on the H200: one frame in four is released with the
    # slow stream and waits 20 ms, the others 5 ms
    table = synthetic({"c": [("a", 60.0, 1, lambda f, w: 20.0 if f % 4 == 0 else 5.0),
                             ("b", 15.0, 1, lambda f, w: 22.0)]})
    a, b = sorted(frames.summarise(table), key=lambda r: r.workload_class)
    assert a.p50_ms == pytest.approx(5.0) and a.critical_ms == pytest.approx((20.0, 20.0, 20.0))
    assert a.critical_percentile_ms(50) == pytest.approx(20.0)
    assert b.critical_ms is None and b.critical_percentile_ms(95) == b.p95_ms


def test_first_served_percentiles_are_the_least_latency_of_each_release():
    # three streams released together: worker w completes after 5 + 3 w ms
    table = synthetic({"c": [("a", 30.0, 3, lambda f, w: 5.0 + 3.0 * w)]})
    [row] = frames.summarise(table)
    assert row.p50_ms == pytest.approx(8.0) and row.first_ms == pytest.approx((5.0, 5.0, 5.0))
    alone = frames.summarise(synthetic({"s": [("a", 30.0, 1, lambda f, w: 5.0 + f % 3)]}))[0]
    assert alone.first_ms is None and alone.first_percentile_ms(95) == alone.p95_ms


def test_a_class_never_alone_takes_its_service_time_from_first_served_frames():
    # four streams: the first served of each release takes 4 ms, the others wait behind it (6, 8, 10 ms)
    table = synthetic({"c4": [("a", 30.0, 4, lambda f, w: 4.0 + 2.0 * w)]})
    model = fit.fit(table, gpu_speed=1.0)
    assert model.classes["a"].service_ms == pytest.approx(4.0)
