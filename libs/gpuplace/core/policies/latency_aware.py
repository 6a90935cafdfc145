"""latency_aware(base, ...): any policy, restricted to GPUs where every pod keeps its deadline.

A composition, not a policy of its own: the base policy (FGD, the house policy, a baseline) keeps its
objective, and the latency filter (filters/latency_fit.py) decides where it may act. The base sees a
view of the snapshot in which every GPU that would break a deadline shows no free share and no free
memory, so its filter, its score and its own GPU choice all stay inside the feasible GPUs without
knowing about latency. The view is made once per pod and cycle and reused by filter, score and
choose_gpus (the runtime calls them in that order on one snapshot).

Pods the wrapper knows no stream for (no frame rate) pass to the base unchanged; they still load
the GPUs they land on only if the caller charges them to GpuLoad. `model` may be replaced between
cycles (an online refit, latency/update.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from weakref import WeakKeyDictionary

from gpuplace.core.arrays import BoolArray, IntArray, ScoreArray
from gpuplace.core.demand import Demand
from gpuplace.core.filters import latency_fit
from gpuplace.core.filters.latency_fit import LatencyCheck
from gpuplace.core.framework.interface import Code, Policy, Status
from gpuplace.core.framework.runtime import span_penalty
from gpuplace.core.framework.verdicts import CycleState, Verdict, feasible, one_status, verdicts_of
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import LatencyModel, Stream
from gpuplace.core.snapshot import ClusterSnapshot, MaskedViews

SUFFIX = "+latency"


class LatencyAware:
    """`base` behind the latency filter; see the module docstring."""

    def __init__(self, base: Policy, model: LatencyModel, gpu_load: GpuLoad, streams: Mapping[str, Stream], *,
                 margin: float = latency_fit.DEFAULT_MARGIN, name: str | None = None) -> None:
        self.base = base
        self.model = model
        self.gpu_load = gpu_load
        self.streams = streams
        self.margin = margin
        self.name = name or f"{base.name}{SUFFIX}"
        self._cached: tuple[tuple[object, ...], ClusterSnapshot, LatencyCheck] | None = None  # (key, view, check)

    @property
    def span_penalty(self) -> float:
        """The base's (core/topology.py): latency changes where the pod may go, not what spanning costs."""
        return span_penalty(self.base)

    def verdicts(self, state: CycleState) -> list[Verdict]:
        """The base's verdicts on the real snapshot, then the latency filter's, then the base's on the latency
        view as one verdict of this policy's ("rejected by policy ...": the base refuses what latency leaves it,
        e.g. a pod that needs two GPUs where one keeps the deadlines). In that order a node's reason is the
        plainest true one: no CPU before no fast GPU before not enough fast GPUs. The feasible nodes are those
        of the base on the view that the latency filter passes (the view only takes room away)."""
        base = verdicts_of(self.base, state)
        view = self._view(state.snapshot, state.demand)
        if view is None:
            return base
        masked, check = view
        rejected = Status(Code.UNSCHEDULABLE, (f"rejected by policy {self.name}",), self.name)
        on_view = feasible(verdicts_of(self.base, CycleState(masked, state.demand)))
        return [*base, latency_fit.verdict(check), Verdict(self.name, on_view, lambda rows: one_status(rejected, rows))]

    def filter(self, snapshot: ClusterSnapshot, demand: Demand) -> BoolArray:
        return feasible(self.verdicts(CycleState(snapshot, demand)))

    def score(self, snapshot: ClusterSnapshot, demand: Demand, candidates: IntArray) -> ScoreArray:
        view = self._view(snapshot, demand)
        return self.base.score(snapshot if view is None else view[0], demand, candidates)

    def choose_gpus(self, snapshot: ClusterSnapshot, demand: Demand, node: int) -> tuple[int, ...]:
        view = self._view(snapshot, demand)
        return self.base.choose_gpus(snapshot if view is None else view[0], demand, node)

    def check(self, snapshot: ClusterSnapshot, demand: Demand) -> LatencyCheck | None:
        """The latency verdict for `demand` on every GPU (None when the pod has no stream)."""
        view = self._view(snapshot, demand)
        return None if view is None else view[1]

    def _view(self, snapshot: ClusterSnapshot, demand: Demand) -> tuple[ClusterSnapshot, LatencyCheck] | None:
        stream = self.streams.get(demand.pod_name)
        if stream is None or not demand.needs_gpu:
            return None
        key = (demand, snapshot, snapshot.uid, snapshot.version.tobytes(), self.gpu_load.version, self.model,
               self.margin)
        if self._cached is not None and _same(self._cached[0], key):
            return self._cached[1], self._cached[2]
        check = latency_fit.pre_filter(self.gpu_load, self.model, stream, snapshot.gpu_exists, margin=self.margin)
        views = _VIEWS.get(snapshot)
        if views is None:
            _VIEWS[snapshot] = views = MaskedViews(snapshot)
        masked = views.view(snapshot, snapshot.gpu_exists & ~check.feasible)
        self._cached = (key, masked, check)
        return masked, check


_VIEWS: WeakKeyDictionary[ClusterSnapshot, MaskedViews] = WeakKeyDictionary()
"""Per snapshot, its latency views: a wrapper lives for one pod (usecases/decide.py), the views' lineage as long as
the snapshot, so the base policy's per-state caches follow the views row by row."""


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """Identity for objects, equality for values: a cached view is reused only for the very same inputs."""
    return all((x is y) if not isinstance(x, (int, bytes, float)) else x == y for x, y in zip(a, b, strict=True))


def latency_aware(base: Policy, model: LatencyModel, gpu_load: GpuLoad, streams: Mapping[str, Stream], *,
                  margin: float = latency_fit.DEFAULT_MARGIN, name: str | None = None) -> LatencyAware:
    """Wrap `base` so it only places pods where every pod keeps predicted p95 within its deadline."""
    return LatencyAware(base, model, gpu_load, streams, margin=margin, name=name)


__all__ = ["SUFFIX", "LatencyAware", "latency_aware"]
