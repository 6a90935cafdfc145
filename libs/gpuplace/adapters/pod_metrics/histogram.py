"""A pod's frame latency histogram, read from its Prometheus exposition text, and one window of it.

A Prometheus histogram is cumulative: bucket `le` counts every frame since the process started that took at most
`le` seconds. Two scrapes `window_s` apart give the frames of that window as the difference of their buckets
(a process restart, when counts go down, starts the window afresh: the new counts are the window). Percentiles are
read off the window's buckets as Prometheus' histogram_quantile does: linear within the bucket the rank falls in,
and the highest finite bound when it falls in the +Inf bucket (so a window whose p95 is past the last bucket says
"at least" that much). Seconds are Prometheus' base unit; what leaves this module is in milliseconds.

Series of the metric that differ in labels other than `le` (a pod with one series per camera, say) are summed:
the pod's frames are what its deadline is about.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from gpuplace.core.arrays import FloatArray


class HistogramError(ValueError):
    """The text is not the exposition format, or the metric is not a usable histogram; the message says which."""


@dataclass(frozen=True, eq=False)
class Histogram:
    """Cumulative counts per upper bound: `upper_s` (n_buckets,) ascending and ending with inf, `cumulative` the
    same shape and non-decreasing."""

    upper_s: FloatArray
    cumulative: FloatArray

    @property
    def count(self) -> float:
        return float(self.cumulative[-1]) if len(self.cumulative) else 0.0

    def since(self, earlier: Histogram | None) -> Histogram:
        """The frames observed after `earlier` (the whole of this one if there is none, the buckets differ, or a
        counter went down: the process restarted)."""
        if earlier is None or not np.array_equal(earlier.upper_s, self.upper_s):
            return self
        delta = self.cumulative - earlier.cumulative  # (n_buckets,)
        if (delta < 0).any():
            return self
        return Histogram(self.upper_s, delta)

    def quantile_ms(self, q: float) -> float:
        """The q-quantile (0 < q < 1) in ms, as histogram_quantile reads it; nan without frames."""
        if not 0 < q < 1:
            raise ValueError(f"q must be in (0, 1), got {q}")
        total = self.count
        if total <= 0:
            return math.nan
        rank = q * total
        i = int(np.searchsorted(self.cumulative, rank, side="left"))  # first bucket holding the rank
        if math.isinf(self.upper_s[i]):
            finite = self.upper_s[np.isfinite(self.upper_s)]
            return 1000.0 * float(finite[-1]) if len(finite) else math.nan
        lower_s = float(self.upper_s[i - 1]) if i > 0 else 0.0
        below = float(self.cumulative[i - 1]) if i > 0 else 0.0
        in_bucket = float(self.cumulative[i]) - below
        share = (rank - below) / in_bucket if in_bucket > 0 else 1.0
        return 1000.0 * (lower_s + (float(self.upper_s[i]) - lower_s) * share)

    def count_over_ms(self, threshold_ms: float) -> int:
        """Frames slower than `threshold_ms`, interpolating linearly within the bucket the threshold falls in."""
        t_s = threshold_ms / 1000.0
        bounds = np.concatenate([[0.0], self.upper_s])  # (n_buckets + 1,)
        counts = np.concatenate([[0.0], self.cumulative])
        i = int(np.searchsorted(bounds, t_s, side="right"))
        if i >= len(bounds):
            return 0
        if math.isinf(bounds[i]):
            at_most = counts[i - 1]
        else:
            share = (t_s - bounds[i - 1]) / (bounds[i] - bounds[i - 1])
            at_most = counts[i - 1] + share * (counts[i] - counts[i - 1])
        return int(round(self.count - float(at_most)))


def parse_histogram(text: str, metric: str) -> Histogram | None:
    """The histogram `metric` (its family name, without _bucket) in exposition text; None if the text does not
    have it. HistogramError if the text is malformed or the buckets make no histogram."""
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as error:
        raise HistogramError(f"not Prometheus exposition text: {error}") from None
    buckets: dict[float, float] = {}
    for family in families:  # by sample name: without a TYPE line the parser names the family after the sample
        for sample in family.samples:
            if sample.name != f"{metric}_bucket" or "le" not in sample.labels:
                continue
            try:
                upper = float(sample.labels["le"])
            except ValueError:
                raise HistogramError(f"{metric}: bucket bound le={sample.labels['le']!r} is not a number") from None
            buckets[upper] = buckets.get(upper, 0.0) + float(sample.value)
    if not buckets:
        return None
    upper_s = np.array(sorted(buckets))  # (n_buckets,)
    cumulative = np.array([buckets[u] for u in upper_s])
    if not math.isinf(upper_s[-1]) or (upper_s[:-1] <= 0).any():
        raise HistogramError(f"{metric}: buckets must be positive bounds ending with le=\"+Inf\"")
    if (np.diff(cumulative) < 0).any() or (cumulative < 0).any() or not np.isfinite(cumulative).all():
        raise HistogramError(f"{metric}: bucket counts must be cumulative (non-decreasing) and finite")
    return Histogram(upper_s, cumulative)


__all__ = ["Histogram", "HistogramError", "parse_histogram"]
