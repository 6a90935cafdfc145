"""The latency model's state: per-percentile tail constants and per-workload-class profiles.

A pod's frames on a time-sliced GPU (DESIGN.md §6): each frame takes the pod's own *service time*
s when alone (host-side work, kernel launches and GPU work), of which a *work fraction* beta holds
the GPU. Co-runners' frames queue behind one another for the GPU, so a frame's latency percentile is

    p_q = max(solo_ratio_q * s,  offset_q + slope_q * W)          (see predict.py)

where W is the GPU work of the busy period a frame is released into (busy_period.py). The state here
is what is fitted (fit.py) and refitted online (update.py): everything is in milliseconds on the
*reference GPU* (RELATIVE_SPEED 1.0, an H100) and is scaled by a GPU's relative speed when predicting.

The state is immutable: fit and update return a new LatencyModel (state in, state out), and
`as_dict`/`from_dict` give the JSON-able form a service stores between windows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpuplace.core.arrays import FloatArray
from gpuplace.core.model import Pod

QUANTILES = (50, 95, 99)


@dataclass(frozen=True)
class Stream:
    """A pod as the latency model sees it: a camera-rate stream of frames.

    `service_ms` is the pod's own per-frame latency when alone on the reference GPU, if known (profiled
    or declared); None takes the class's. `deadline_ms` is only read by admission (filters/latency_fit.py).
    """

    frame_rate_hz: float
    workload_class: str | None = None
    service_ms: float | None = None
    deadline_ms: float | None = None

    def __post_init__(self) -> None:
        if not self.frame_rate_hz > 0:
            raise ValueError(f"frame_rate_hz must be > 0, got {self.frame_rate_hz}")
        if self.service_ms is not None and not self.service_ms > 0:
            raise ValueError(f"service_ms must be > 0, got {self.service_ms}")
        if self.deadline_ms is not None and not self.deadline_ms > 0:
            raise ValueError(f"deadline_ms must be > 0, got {self.deadline_ms}")

    @property
    def period_ms(self) -> float:
        return 1000.0 / self.frame_rate_hz

    @classmethod
    def of(cls, pod: Pod, service_ms: float | None = None) -> Stream | None:
        """The stream a pod declares (frame rate, class, deadline); None for a pod without a frame rate."""
        if pod.frame_rate_hz is None:
            return None
        return cls(pod.frame_rate_hz, pod.workload_class, service_ms, pod.deadline_ms)


@dataclass(frozen=True)
class Tail:
    """Constants of one percentile: p_q = max(solo_ratio * s, offset_ms + slope * W)."""

    solo_ratio: float
    offset_ms: float
    slope: float


@dataclass(frozen=True)
class ClassProfile:
    """What is known of one workload class, and how many frames of evidence stand behind it.

    A weight of 0 means "prior": nothing observed yet. Online updates average new evidence in with
    these weights (update.py), so a well-observed class moves slowly and a new one quickly.
    """

    service_ms: float
    work_fraction: float
    service_weight: float = 0.0
    work_weight: float = 0.0
    solo_gpu_ms: float | None = None
    """GPU busy time per frame with the class alone on its GPU (its utilisation x frame period), if measured."""

    def __post_init__(self) -> None:
        if not self.service_ms > 0:
            raise ValueError(f"service_ms must be > 0, got {self.service_ms}")
        if self.solo_gpu_ms is not None and not self.solo_gpu_ms >= 0:
            raise ValueError(f"solo_gpu_ms must be >= 0, got {self.solo_gpu_ms}")
        if not 0 < self.work_fraction <= 1:
            raise ValueError(f"work_fraction must be in (0, 1], got {self.work_fraction}")


@dataclass(frozen=True, eq=False)
class WorkEvidence:
    """Online evidence on the classes' work fractions: normal equations of a ridge least squares.

    Each latency window under GPU-bound load gives one linear equation in the classes' work
    fractions (update.py); `gram` and `moment` sum them (frames-weighted, with forgetting), and
    `anchor_fraction`/`anchor_weight` are what each class started from and how many frames that is
    worth. Arrays are over `classes`: gram (K, K), the others (K,).
    """

    classes: tuple[str, ...] = ()
    gram: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    moment: FloatArray = field(default_factory=lambda: np.zeros(0))
    anchor_fraction: FloatArray = field(default_factory=lambda: np.zeros(0))
    anchor_weight: FloatArray = field(default_factory=lambda: np.zeros(0))
    scale_ms: FloatArray = field(default_factory=lambda: np.zeros(0))
    """Typical reference service time of each class: converts anchor weights into ms^2 units."""
    sum_wy2: float = 0.0
    """Frames-weighted sum of squared left-hand sides: with gram and moment, the residual sum of squares."""
    equations: float = 0.0
    """How many window equations the sums hold (faded like them): the residuals' degrees of freedom."""


@dataclass(frozen=True)
class LatencyModel:
    """Tails for p50/p95/p99 and class profiles; the priors say what an unseen class is assumed to be.

    Safe-side priors: a class never observed holds the GPU for its whole service time
    (`prior_work_fraction` 1.0), and a pod with neither its own nor its class's service time is
    assumed to need `prior_service_share` of its frame period per frame.
    """

    p50: Tail
    p95: Tail
    p99: Tail
    classes: Mapping[str, ClassProfile] = field(default_factory=dict)
    prior_work_fraction: float = 1.0
    prior_service_share: float = 0.5
    max_load: float = 1.0
    """What the GPU can give: the load (sum of frame rate x GPU work per frame) at which it saturates and the streams
    it cannot keep up with have no bound (saturation.py)."""
    evidence: WorkEvidence = field(default_factory=WorkEvidence)
    switch_ms: float = 0.0
    """GPU time a frame costs beyond its solo busy time once the GPU is shared (the fit's largest among the classes
    seen both ways); what a class known only alone is charged on top of its solo_gpu_ms (fit.py)."""

    def tail(self, q: int) -> Tail:
        try:
            return {50: self.p50, 95: self.p95, 99: self.p99}[q]
        except KeyError:
            raise ValueError(f"percentile must be one of {QUANTILES}, got {q}") from None

    def service_ms(self, stream: Stream) -> float:
        """Reference-GPU service time: the stream's own, else its class's, else the safe prior."""
        if stream.service_ms is not None:
            return stream.service_ms
        profile = self.classes.get(stream.workload_class or "")
        if profile is not None:
            return profile.service_ms
        return self.prior_service_share * stream.period_ms

    def work_fraction(self, workload_class: str | None) -> float:
        profile = self.classes.get(workload_class or "")
        return self.prior_work_fraction if profile is None else profile.work_fraction

    def work_ms(self, stream: Stream) -> float:
        """Reference-GPU work per frame: what each co-runner's frame waits behind."""
        return self.work_fraction(stream.workload_class) * self.service_ms(stream)

    def with_class(self, name: str, profile: ClassProfile) -> LatencyModel:
        return replace(self, classes={**self.classes, name: profile})


DEFAULT_MODEL = LatencyModel(
    # Fitted on ../shared/data/h200-colocation (`gpuplace latency fit`, H200 = 1.15 x reference) and
    # rounded up; tests/unit/sim/test_latency_evaluation.py checks them against a fresh fit.
    p50=Tail(solo_ratio=1.02, offset_ms=5.4, slope=0.63),
    p95=Tail(solo_ratio=1.36, offset_ms=2.3, slope=1.0),
    p99=Tail(solo_ratio=1.45, offset_ms=2.2, slope=1.01),
    # A class never seen co-located holds the GPU for this share of its service time: the largest share fitted on
    # both H200 sessions (ResNet-50, 0.282; ResNet-18 0.235), rounded up. The dataclass's own default (1.0, the
    # whole service time) refused every co-location of a new model, so it never met the co-runners that teach it.
    prior_work_fraction=0.29,
)
"""Tails fitted on the H200 colocation data, no class profiles: every class starts from the prior."""


def as_dict(model: LatencyModel) -> dict[str, Any]:
    """JSON-able form of the state (what a service persists between latency windows)."""
    tails = {f"p{q}": vars(model.tail(q)).copy() for q in QUANTILES}
    evidence = {k: (v.tolist() if isinstance(v, np.ndarray) else list(v) if isinstance(v, tuple) else float(v))
                for k, v in vars(model.evidence).items()}
    return {"tails": tails, "classes": {k: vars(v).copy() for k, v in sorted(model.classes.items())},
            "prior_work_fraction": model.prior_work_fraction, "prior_service_share": model.prior_service_share,
            "max_load": model.max_load, "evidence": evidence, "switch_ms": model.switch_ms}


def from_dict(data: Mapping[str, Any]) -> LatencyModel:
    """Inverse of as_dict; KeyError/TypeError/ValueError on a malformed state."""
    tails = {q: Tail(**data["tails"][f"p{q}"]) for q in QUANTILES}
    classes = {str(k): ClassProfile(**v) for k, v in data.get("classes", {}).items()}
    raw = data.get("evidence") or {}
    k = len(raw.get("classes", ()))

    def vector(name: str) -> FloatArray:
        return np.asarray(raw.get(name, np.zeros(k)), dtype=np.float64).reshape(k)

    evidence = WorkEvidence(
        tuple(str(c) for c in raw.get("classes", ())),
        np.asarray(raw.get("gram", np.zeros((k, k))), dtype=np.float64).reshape(k, k),
        vector("moment"), vector("anchor_fraction"), vector("anchor_weight"), vector("scale_ms"),
        float(raw.get("sum_wy2", 0.0)), float(raw.get("equations", 0.0)),
    )
    return LatencyModel(tails[50], tails[95], tails[99], classes,
                        float(data.get("prior_work_fraction", 1.0)), float(data.get("prior_service_share", 0.5)),
                        float(data.get("max_load", 1.0)), evidence, float(data.get("switch_ms", 0.0)))


__all__ = ["ClassProfile", "DEFAULT_MODEL", "LatencyModel", "QUANTILES", "Stream", "Tail", "WorkEvidence", "as_dict",
           "from_dict"]
