"""How well the model predicts configs it has not seen: per-config predictions and leave-one-out.

Leave-one-config-out fits on every config but one and predicts the one left out from its mix of
streams alone (classes, frame rates, counts): the service times and GPU work come from the other
configs, never from the one being predicted. The acceptance figures (DESIGN.md §6, issue 6) are the
median absolute error of predicted p95 over configs that are not overloaded, and whether every
overloaded config is flagged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

import numpy as np

from gpuplace.core.latency.fit import fit_stats
from gpuplace.core.latency.frames import ConfigStats, FrameTable, summarise
from gpuplace.core.latency.model import LatencyModel, Stream
from gpuplace.core.latency.predict import predict


class FitOptions(TypedDict, total=False):
    """fit_stats' options other than the GPU speed, passed through by leave_one_config_out."""

    safety_quantile: float
    priors: LatencyModel
    utilisation: Mapping[str, float]


@dataclass(frozen=True)
class ConfigPrediction:
    """One (config, class, frame rate): what was observed and what the model predicts."""

    config: str
    workload_class: str
    frame_rate_hz: float
    observed_p95_ms: float
    predicted_p95_ms: float
    observed_overloaded: bool
    predicted_overload: bool
    load_fraction: float
    within_period: float = 1.0
    """Share of the observed frames that met their frame period."""

    @property
    def error_pct(self) -> float:
        """Signed error of predicted p95 (positive: on the safe side); inf when predicted unbounded."""
        return 100.0 * (self.predicted_p95_ms - self.observed_p95_ms) / self.observed_p95_ms


@dataclass(frozen=True)
class Accuracy:
    """The acceptance figures over a list of predictions."""

    median_abs_error_pct: float
    max_abs_error_pct: float
    under_predicted: int
    """How many bounded configs were predicted below what was observed (unsafe side)."""
    bounded: int
    overloaded: tuple[str, ...]
    flagged: tuple[str, ...]
    false_alarms: tuple[str, ...]
    missed_overloads: int = 0
    """Rows (a config and a class) that met fewer than half their frame periods and were not flagged."""
    flagged_in_time: int = 0
    """Rows that met every frame period and were flagged all the same."""
    others_median_abs_error_pct: float = 0.0
    """Median |p95 error| over the rows neither flagged-worthy (< half met) nor flagged."""
    others_max_abs_error_pct: float = 0.0
    others_p95_abs_error_pct: float = 0.0
    """95th percentile of the other rows' |p95 error| (numpy's linear interpolation between rows)."""

    @property
    def every_overload_flagged(self) -> bool:
        return set(self.overloaded) <= set(self.flagged)


def predict_stats(model: LatencyModel, stats: Sequence[ConfigStats], *, gpu_speed: float) -> list[ConfigPrediction]:
    """Predict every row of `stats` from its mix of streams on a GPU of relative speed `gpu_speed`; a row predicted
    overloaded gets the percentiles its backlog reaches over the frames it observed (predict.py), not inf."""
    out = []
    for row in stats:
        streams = [Stream(fps, cls) for cls, fps, n in row.mix for _ in range(n)]
        me = next(i for i, s in enumerate(streams)
                  if s.workload_class == row.workload_class and s.frame_rate_hz == row.frame_rate_hz)
        prediction = predict(model, streams, speed=gpu_speed, window_s=row.released_s)  # overloaded: over the run
        out.append(ConfigPrediction(row.config, row.workload_class, row.frame_rate_hz, row.p95_ms,
                                    float(prediction.p95_ms[me]), row.overloaded,
                                    bool(prediction.overloaded_streams[me]), prediction.load_fraction,
                                    row.within_period))
    return out


def leave_one_config_out(table: FrameTable, *, gpu_speed: float,
                         **fit_options: Unpack[FitOptions]) -> list[ConfigPrediction]:
    """Predict each config with a model fitted on all the others (see the module docstring)."""
    stats = summarise(table)
    configs = list(dict.fromkeys(s.config for s in stats))
    out = []
    for held_out in configs:
        model = fit_stats([s for s in stats if s.config != held_out], gpu_speed=gpu_speed, **fit_options)
        out += predict_stats(model, [s for s in stats if s.config == held_out], gpu_speed=gpu_speed)
    return out


def leave_one_model_out(table: FrameTable, workload_class: str, *, gpu_speed: float,
                        **fit_options: Unpack[FitOptions]) -> list[ConfigPrediction]:
    """Predict every co-location of `workload_class` (a config where it shares the GPU) from a fit that knows it
    only from its solo configs (one stream of it alone) and everything else from the other classes' configs:
    how a new model, profiled alone, is predicted before any co-location of it was seen."""
    stats = summarise(table)
    if workload_class not in {s.workload_class for s in stats}:
        raise ValueError(f"no config runs class {workload_class!r}")
    held_out = {s.config for s in stats
                if any(cls == workload_class for cls, _, _ in s.mix) and s.streams > 1}
    if not held_out:
        raise ValueError(f"class {workload_class!r} is never co-located: nothing to predict")
    model = fit_stats([s for s in stats if s.config not in held_out], gpu_speed=gpu_speed, **fit_options)
    return predict_stats(model, [s for s in stats if s.config in held_out], gpu_speed=gpu_speed)


def accuracy(predictions: Sequence[ConfigPrediction]) -> Accuracy:
    """The figures per config (observed overload as frames.py tells it) and per row, by frames that met their period
    (issue 38: rows below half flagged, rows that met them all not flagged, the others within 10%)."""
    bounded = [p for p in predictions if not p.observed_overloaded]
    errors = np.array([abs(p.error_pct) for p in bounded]) if bounded else np.zeros(1)
    others = [p for p in predictions if p.within_period >= 0.5 and not p.predicted_overload]
    other_errors = np.array([abs(p.error_pct) for p in others]) if others else np.zeros(1)
    return Accuracy(
        median_abs_error_pct=float(np.median(errors)), max_abs_error_pct=float(errors.max()),
        under_predicted=sum(p.error_pct < 0 for p in bounded), bounded=len(bounded),
        overloaded=_configs(p for p in predictions if p.observed_overloaded),
        flagged=_configs(p for p in predictions if p.predicted_overload),
        false_alarms=_configs(p for p in bounded if p.predicted_overload),
        missed_overloads=sum(p.within_period < 0.5 and not p.predicted_overload for p in predictions),
        flagged_in_time=sum(p.within_period >= 1.0 and p.predicted_overload for p in predictions),
        others_median_abs_error_pct=float(np.median(other_errors)),
        others_max_abs_error_pct=float(other_errors.max()),
        others_p95_abs_error_pct=float(np.percentile(other_errors, 95)),
    )


def _configs(predictions: Iterable[ConfigPrediction]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.config for p in predictions))


__all__ = ["Accuracy", "ConfigPrediction", "FitOptions", "accuracy", "leave_one_config_out", "leave_one_model_out",
           "predict_stats"]
