"""The fleet report's figures (`gpuplace report --fleet`): per region and cluster, GPUs, GPU memory allocated and
stranded, SLO attainment, p95 per workload, and the pods that wait and why.

`FleetReport` is what the page and `--json` are rendered from, whatever the source: the fleet state in PostgreSQL
or a replayed event log (usecases/fleet_sources.py), or a simulated run, whose output needs only to be put in these
dataclasses (`FleetReport.from_json` reads the report's own JSON back). Clusters carry the figures; regions and the
fleet are sums of their clusters, computed here once so that the page and the JSON cannot disagree.

Stranded GPU memory is placement's measure (usecases/gpu_gauges._stranded, DESIGN §6): the free GPU memory that the
typical workload M could not use, M being the shapes of the cluster's pods (those holding a place and those
waiting). SLO attainment is the metrics' (adapters/metrics.py): the share of frames within their deadline. A
latency window carries percentiles, not frames, and percentiles do not add: a workload's p95 here is the 95th
percentile of its windows' p95 (95 % of the windows had a p95 at most this), beside the worst window's.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from gpuplace.core.fragmentation import stranded_gpu_memory
from gpuplace.core.model import Pod
from gpuplace.core.workload import typical_workload
from gpuplace.usecases.cluster_view import ClusterView
from gpuplace.usecases.pod_states import PodState
from gpuplace.usecases.ports import Row

UNKNOWN_REGION = "unknown"
_FILTER = re.compile(r"\(([A-Z][A-Za-z]+)\)")  # "... free (GpuFit)": the filter that refused, as decide writes it


@dataclass(frozen=True)
class WorkloadLatency:
    """One workload's latency windows in one cluster, summed (repositories.Latency.latency_by_workload)."""

    workload: str
    windows: int
    frames: int
    deadline_misses: int
    p95_ms: float
    worst_p95_ms: float
    deadline_ms: float | None = None

    @property
    def slo_attainment(self) -> float | None:
        return None if self.frames <= 0 else 1.0 - self.deadline_misses / self.frames


@dataclass
class ClusterFigures:
    """One cluster's figures. `gpu_memory_stranded_mib` is None when there is nothing to measure it against
    (no GPU, or no pod to take the typical workload from)."""

    region: str
    cluster: str
    nodes: int = 0
    gpus: int = 0
    gpus_in_use: int = 0  # holding at least one pod's grant
    gpus_closed: int = 0  # closed to new pods: an SLO violation on it, or unhealthy
    gpu_memory_mib: int = 0
    gpu_memory_allocated_mib: int = 0
    gpu_memory_stranded_mib: float | None = None
    pods_placed: int = 0
    pods_waiting: dict[str, int] = field(default_factory=dict)  # why -> pods
    latency: list[WorkloadLatency] = field(default_factory=list)

    @property
    def frames(self) -> int:
        return sum(w.frames for w in self.latency)

    @property
    def deadline_misses(self) -> int:
        return sum(w.deadline_misses for w in self.latency)

    @property
    def waiting(self) -> int:
        return sum(self.pods_waiting.values())


@dataclass
class Totals:
    """The sums over several clusters (a region, or the fleet)."""

    name: str
    clusters: int = 0
    nodes: int = 0
    gpus: int = 0
    gpus_in_use: int = 0
    gpus_closed: int = 0
    gpu_memory_mib: int = 0
    gpu_memory_allocated_mib: int = 0
    gpu_memory_stranded_mib: float | None = None  # None when no cluster of it could be measured
    pods_placed: int = 0
    pods_waiting: int = 0
    frames: int = 0
    deadline_misses: int = 0

    @property
    def allocated_pct(self) -> float | None:
        return _pct(self.gpu_memory_allocated_mib, self.gpu_memory_mib)

    @property
    def stranded_pct(self) -> float | None:
        return None if self.gpu_memory_stranded_mib is None else _pct(self.gpu_memory_stranded_mib,
                                                                        self.gpu_memory_mib)

    @property
    def slo_attainment(self) -> float | None:
        return None if self.frames <= 0 else 1.0 - self.deadline_misses / self.frames

    def add(self, c: ClusterFigures) -> None:
        self.clusters += 1
        self.nodes += c.nodes
        self.gpus += c.gpus
        self.gpus_in_use += c.gpus_in_use
        self.gpus_closed += c.gpus_closed
        self.gpu_memory_mib += c.gpu_memory_mib
        self.gpu_memory_allocated_mib += c.gpu_memory_allocated_mib
        if c.gpu_memory_stranded_mib is not None:
            self.gpu_memory_stranded_mib = (self.gpu_memory_stranded_mib or 0.0) + c.gpu_memory_stranded_mib
        self.pods_placed += c.pods_placed
        self.pods_waiting += c.waiting
        self.frames += c.frames
        self.deadline_misses += c.deadline_misses


@dataclass(frozen=True)
class SeriesPoint:
    """One region's figures at one time of a run (a simulation, or a replayed log): what the page plots over
    time when a source has it."""

    t_s: float
    region: str
    gpu_memory_allocated_mib: float
    gpu_memory_stranded_mib: float
    pods_waiting: int = 0


@dataclass
class FleetReport:
    """What the report renders: the clusters' figures, where they come from, and any series over time."""

    source: str  # "postgresql", "log FILE", "simulation ..."
    clusters: list[ClusterFigures] = field(default_factory=list)
    series: list[SeriesPoint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the source could not tell, in words

    def regions(self) -> list[Totals]:
        found: dict[str, Totals] = {}
        for c in sorted(self.clusters, key=lambda c: (c.region, c.cluster)):
            found.setdefault(c.region, Totals(c.region)).add(c)
        return list(found.values())

    def fleet(self) -> Totals:
        total = Totals("fleet")
        for c in self.clusters:
            total.add(c)
        return total

    def waiting_reasons(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for c in self.clusters:
            counts.update(c.pods_waiting)
        return counts

    def as_json(self) -> dict[str, Any]:
        """The same figures as the page: clusters as given, regions and fleet as summed (with their ratios)."""
        return {
            "source": self.source, "notes": list(self.notes),
            "fleet": _totals_json(self.fleet()),
            "regions": [_totals_json(t) for t in self.regions()],
            "clusters": [_cluster_json(c) for c in sorted(self.clusters, key=lambda c: (c.region, c.cluster))],
            "series": [asdict(p) for p in self.series],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FleetReport:
        """A report from its JSON (`as_json`); region and fleet totals are summed again, not read."""
        clusters = []
        for c in data.get("clusters", []):
            known = {k: v for k, v in c.items() if k in ClusterFigures.__dataclass_fields__}
            known["latency"] = [WorkloadLatency(**{k: v for k, v in w.items()
                                                   if k in WorkloadLatency.__dataclass_fields__})
                                for w in c.get("latency", [])]
            clusters.append(ClusterFigures(**known))
        series = [SeriesPoint(**p) for p in data.get("series", [])]
        return cls(str(data.get("source", "json")), clusters, series, list(data.get("notes", [])))


def cluster_figures(cluster: str, region: str, view: ClusterView, *, workload_pods: Sequence[Pod],
                    waiting: Iterable[Row], latency: Iterable[Row | WorkloadLatency]) -> ClusterFigures:
    """One cluster's figures from its view (capacity and holds, as placement hydrates it), the pods whose shapes
    make its typical workload, the rows of the pods that wait, and its latency per workload."""
    figures = ClusterFigures(region=region, cluster=cluster)
    snapshot = view.snapshot
    if snapshot is not None:
        slots = np.arange(snapshot.max_gpus)[None, :] < snapshot.gpu_count[:, None]  # (n_nodes, max_gpus)
        capacity = np.where(slots, snapshot.gpu_memory_mib[:, None], 0)
        figures.nodes = snapshot.n_nodes
        figures.gpus = int(slots.sum())
        figures.gpus_closed = int((slots & ~snapshot.gpu_exists).sum())
        figures.gpu_memory_mib = int(capacity.sum())
        figures.gpu_memory_allocated_mib = int((capacity - np.where(slots, snapshot.free_memory_mib, 0)).sum())
        used = {(h.node, i) for h in view.holds.values() for i in h.gpu_indices}
        figures.gpus_in_use = len(used)
        if workload_pods and snapshot.total_gpus > 0:
            workload = typical_workload(list(workload_pods), snapshot.gpu_types)
            # to the thousandth of a MiB: a sum of expectations carries float noise (4514.000000000001 MiB stranded
            # of 4514 free failed "never more than free")
            figures.gpu_memory_stranded_mib = round(float(stranded_gpu_memory(snapshot, workload).sum()), 3)
    figures.pods_placed = len(view.holds)
    figures.pods_waiting = dict(Counter(why_waiting(row) for row in waiting))
    figures.latency = [w if isinstance(w, WorkloadLatency) else _latency(w) for w in latency]
    return figures


def why_waiting(row: Row) -> str:
    """A waiting pod's reason in a few words: the filters that refused it (`unschedulable: GpuFit+NodeRules`),
    from the reason placement stored on its row, else its state (a pending pod not tried yet is `queued`)."""
    reason = row.get("reason") or ""
    if row["state"] == PodState.UNSCHEDULABLE:
        filters = sorted(set(_FILTER.findall(reason)))
        if filters:
            return "unschedulable: " + "+".join(filters)
        return "unschedulable: " + (reason.split(":", 1)[0].strip()[:40] or "no reason recorded")
    return f"pending: {reason[:40]}" if reason else "queued"


def summarize_windows(windows: Iterable[Mapping[str, Any]]) -> list[WorkloadLatency]:
    """Latency windows (the columns of `latency_windows`) summed per workload, as latency_by_workload sums
    them in PostgreSQL: for a source that has the windows themselves (an event log)."""
    by_workload: dict[str, list[Mapping[str, Any]]] = {}
    for w in windows:
        by_workload.setdefault(str(w["workload"]), []).append(w)
    found = []
    for workload, rows in sorted(by_workload.items()):
        p95 = np.array(sorted(float(w["p95_ms"]) for w in rows))
        deadlines = [float(w["deadline_ms"]) for w in rows if w.get("deadline_ms") is not None]
        found.append(WorkloadLatency(
            workload=workload, windows=len(rows), frames=sum(int(w["frames"]) for w in rows),
            deadline_misses=sum(int(w["deadline_misses"]) for w in rows),
            p95_ms=float(np.percentile(p95, 95)),  # linear, as percentile_cont
            worst_p95_ms=float(p95[-1]), deadline_ms=min(deadlines, default=None)))
    return found


def region_of(labels_and_regions: Iterable[str | None]) -> str:
    """A cluster's region: the one its nodes report (the most common, should they disagree), else unknown."""
    counts = Counter(r for r in labels_and_regions if r)
    return counts.most_common(1)[0][0] if counts else UNKNOWN_REGION


def _latency(row: Row) -> WorkloadLatency:
    return WorkloadLatency(
        workload=str(row["workload"]), windows=int(row["windows"]), frames=int(row["frames"]),
        deadline_misses=int(row["deadline_misses"]), p95_ms=float(row["p95_ms"]),
        worst_p95_ms=float(row["worst_p95_ms"]),
        deadline_ms=None if row.get("deadline_ms") is None else float(row["deadline_ms"]))


def _pct(part: float, whole: float) -> float | None:
    return None if whole <= 0 else 100.0 * part / whole


def _totals_json(t: Totals) -> dict[str, Any]:
    return {**asdict(t), "allocated_pct": t.allocated_pct, "stranded_pct": t.stranded_pct,
            "slo_attainment": t.slo_attainment}


def _cluster_json(c: ClusterFigures) -> dict[str, Any]:
    out = asdict(c)
    out["latency"] = [{**asdict(w), "slo_attainment": w.slo_attainment} for w in c.latency]
    total = Totals(c.cluster)
    total.add(c)
    out.update(allocated_pct=total.allocated_pct, stranded_pct=total.stranded_pct,
               slo_attainment=total.slo_attainment, frames=c.frames, deadline_misses=c.deadline_misses)
    return out


__all__ = ["ClusterFigures", "FleetReport", "SeriesPoint", "Totals", "UNKNOWN_REGION", "WorkloadLatency",
           "cluster_figures", "region_of", "summarize_windows", "why_waiting"]
