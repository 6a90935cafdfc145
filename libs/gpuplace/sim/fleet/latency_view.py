"""The latency filter as an autoscaler needs it: on a cluster that grows by nodes not yet there.

The hint-driven autoscaler (sim/autoscaler.py) places the waiting pods with the policy on copies of the cluster
with nodes appended (nodes being provisioned, nodes its trials add). With the latency filter on, as the placement
service decides, a pod with a frame rate may only go where every stream keeps its deadline; without the filter the
autoscaler would place perception pods on GPUs whose time is taken and add nothing for them. `ElasticLatency` is
the cluster's policy behind the latency filter on any such copy: the existing rows carry the cluster's streams as
charged (its live GpuLoad), appended rows are empty GPUs at their model's speed. A load is made once per row layout
and never changes: the streams of pods the autoscaler places in its own run are not charged (the next tick sees
them as running, if they landed), so one run may stack more streams on a new GPU than the filter would.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpuplace.core.arrays import BoolArray, IntArray, ScoreArray
from gpuplace.core.demand import Demand
from gpuplace.core.framework.interface import Policy
from gpuplace.core.framework.runtime import span_penalty
from gpuplace.core.framework.verdicts import CycleState, Verdict
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import LatencyModel, Stream
from gpuplace.core.policies.latency_aware import LatencyAware, latency_aware
from gpuplace.core.snapshot import ClusterSnapshot

_SLOTS = (("frame_rate_hz", 0.0), ("service_ms", np.nan), ("deadline_ms", np.inf), ("class_id", -1))


def grown_load(load: GpuLoad, snapshot: ClusterSnapshot) -> GpuLoad:
    """`load` (for the first rows of `snapshot`) extended to every row of `snapshot`: a frozen copy whose
    appended rows hold no stream, at the speed of their GPU model."""
    out = load.frozen_copy()
    rows, gpus, slots = load.frame_rate_hz.shape
    n, width = snapshot.n_nodes, max(gpus, snapshot.max_gpus)
    if n < rows:
        raise ValueError(f"the snapshot has {n} rows, fewer than the load's {rows}")
    if (n, width) == (rows, gpus):
        return out
    out.speed = GpuLoad.for_snapshot(snapshot).speed
    for name, fill in _SLOTS:
        old = getattr(load, name)
        new = np.full((n, width, slots), fill, dtype=old.dtype)
        new[:rows, :gpus] = old
        setattr(out, name, new)
    out.node_version = np.zeros(n, dtype=np.int64)
    out.node_version[:rows] = load.node_version
    return out


class ElasticLatency:
    """`base` behind the latency filter on any snapshot whose first rows are the cluster's (module docstring)."""

    def __init__(self, base: Policy, model: LatencyModel, load: GpuLoad, streams: Mapping[str, Stream]) -> None:
        self.base, self.model, self.streams = base, model, streams
        self._load = load.frozen_copy()  # the cluster's streams as they are when the autoscaler asks
        self._wrapped: dict[tuple[bytes, tuple[str, ...]], LatencyAware] = {}
        self.name = latency_aware(base, model, self._load, streams).name

    @property
    def span_penalty(self) -> float:
        return span_penalty(self.base)

    def _for(self, snapshot: ClusterSnapshot) -> LatencyAware:
        key = (snapshot.gpu_type_id.tobytes(), tuple(t.model for t in snapshot.gpu_types))  # rows and their speeds
        wrapped = self._wrapped.get(key)
        if wrapped is None:
            wrapped = self._wrapped[key] = latency_aware(self.base, self.model, grown_load(self._load, snapshot),
                                                         self.streams)
        return wrapped

    def verdicts(self, state: CycleState) -> list[Verdict]:
        return self._for(state.snapshot).verdicts(state)

    def filter(self, snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
        return self._for(snapshot).filter(snapshot, demand)

    def score(self, snapshot: ClusterSnapshot, demand: Demand, candidates: IntArray) -> ScoreArray:
        return self._for(snapshot).score(snapshot, demand, candidates)

    def choose_gpus(self, snapshot: ClusterSnapshot, demand: Demand, node: int) -> tuple[int, ...]:
        return self._for(snapshot).choose_gpus(snapshot, demand, node)


__all__ = ["ElasticLatency", "grown_load"]
