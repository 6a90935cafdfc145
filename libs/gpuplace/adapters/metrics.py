"""Every metric a gpuplace process exposes, on Prometheus's client, in one registry per process.

One class holds them all so that the names, labels and meanings a dashboard is written against live in one place
(the README's "Metrics and health" table lists them): the use cases report through the Metrics port
(usecases/ports.py), which PrometheusMetrics implements; the adapters count what only they see (a record
dead-lettered, a consumer's lag, the outbox's backlog) through its other methods.

Label values are closed vocabularies (ports.AttemptResult, ...): never a pod name or a free-text reason, which
would make a new time series per pod. A cluster's counters are created at zero the first time the cluster is
reported, so `rate()` and `increase()` see their first increment.

Gauges that describe state rather than events are read when Prometheus scrapes, not pushed on every change:
pending pods and stranded GPU from the placement service's in-memory clusters (`watching`), consumer lag from
each Kafka consumer (`track_lag`, refreshed by `refresh()` before each scrape), SLO attainment from the latency
windows of the last `slo_horizon_s`. The HTTP server renders in the event loop's thread, so a scrape never reads
a cluster half-updated.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol, get_args

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics import disable_created_metrics
from prometheus_client.registry import Collector

from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.usecases.ports import (
    AttemptResult,
    BindResult,
    ClusterGauges,
    EvictResult,
    NodeGpus,
    PendingReason,
    PlanOutcome,
)

log = logging.getLogger(__name__)
MIB = 1 << 20
SLO_HORIZON_S = 300.0  # SLO attainment is over the latency windows that arrived this long ago at most
REFRESH_TIMEOUT_S = 2.0  # a consumer slow to tell its position keeps its last lag rather than hold the scrape
ATTEMPT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# kube-scheduler's scheduler_pod_scheduling_sli_duration_seconds: ExponentialBuckets(0.01, 2, 20), 10 ms to ~87 min
SLI_BUCKETS = tuple(0.01 * 2 ** i for i in range(20))
# The classic text format every Prometheus (and agent) reads; gpuplace's names need none of 1.0.0's UTF-8 names.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

LagKey = tuple[str, int]  # (topic, partition)


class LagSource(Protocol):
    """One Kafka consumer's lag: records on each partition it holds that it has not handled yet."""

    async def lags(self) -> dict[LagKey, int]: ...


class PrometheusMetrics:
    """The Metrics port on prometheus_client, and the adapters' own metrics; `exposition()` is the /metrics body.

    Each instance has its own registry (tests and several pipelines in one process never share counters), with
    the client's process, platform and garbage-collector metrics beside gpuplace's."""

    def __init__(self, *, slo_horizon_s: float = SLO_HORIZON_S, clock: Callable[[], float] = time.monotonic,
                 process_metrics: bool = True) -> None:
        # no `_created` series beside every counter: half the output, nothing read. The ignore: prometheus_client
        # leaves this one function unannotated.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry = CollectorRegistry(auto_describe=True)
        if process_metrics:
            for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                registry.register(collector)
        self._scheduling_metrics(registry)
        self._pipeline_metrics(registry)
        self._backlog = _Backlog()  # only a process with an outbox relay (placement) reports one
        self._hinted: dict[str, set[tuple[str, str]]] = {}
        self._clusters_seen: set[str] = set()
        self._workloads_seen: set[tuple[str, str]] = set()
        self._sources: dict[int, Callable[[], Iterable[ClusterGauges]]] = {}
        self._source_ids = itertools.count()
        self._lag_sources: weakref.WeakSet[LagSource] = weakref.WeakSet()  # what a stopped consumer drops
        self._last_lags: weakref.WeakKeyDictionary[LagSource, dict[LagKey, int]] = weakref.WeakKeyDictionary()
        self._slo = _SloWindows(slo_horizon_s, clock)
        registry.register(self._backlog)
        registry.register(_ClusterCollector(self._sources))
        registry.register(self._slo)

    def _scheduling_metrics(self, registry: CollectorRegistry) -> None:
        """Placement's and defragmentation's: attempts, binds, the scheduling SLI, evictions, plans, misses."""
        self._attempts = Counter(
            "gpuplace_scheduling_attempts", "Scheduling attempts (decide, then reserve) by what they came to.",
            ["cluster", "result"], registry=registry)
        self._attempt_seconds = Histogram(
            "gpuplace_scheduling_attempt_duration_seconds",
            "Time one scheduling attempt took to decide and reserve (the commit and the bind excluded).",
            ["result"], buckets=ATTEMPT_BUCKETS, registry=registry)
        self._binds = Counter("gpuplace_binds", "Pods bound through pods/binding.", ["cluster"], registry=registry)
        self._scheduled_seconds = Histogram(
            "gpuplace_pod_scheduling_sli_duration_seconds",
            "Time from placement first seeing a pod pending to its bind recorded, over every attempt it took "
            "(kube-scheduler's scheduler_pod_scheduling_sli_duration_seconds, same buckets).",
            ["cluster"], buckets=SLI_BUCKETS, registry=registry)
        self._bind_failures = Counter(
            "gpuplace_bind_failures", "Bind calls that did not bind the pod, by why.", ["cluster", "reason"],
            registry=registry)
        self._evictions = Counter(
            "gpuplace_evictions", "Evictions of defragmentation plans, by outcome.", ["cluster", "outcome"],
            registry=registry)
        self._plans = Counter(
            "gpuplace_defrag_plans", "Defragmentation plans by outcome.", ["cluster", "outcome"], registry=registry)
        self._deadline_misses = Counter(
            "gpuplace_deadline_misses", "Frames past their deadline, as the pods' latency windows report them.",
            ["cluster", "workload"], registry=registry)

    def _pipeline_metrics(self, registry: CollectorRegistry) -> None:
        """The pipeline's own: consumer lag, dead letters, scale hints, and the apiservers' failures and APIs."""
        self._lag = Gauge(
            "gpuplace_consumer_lag_records", "Records of a partition this process consumes not handled yet.",
            ["topic", "partition"], registry=registry)
        self._dead_letters = Counter(
            "gpuplace_dead_letters", "Records sent to the dead-letter topic, by the topic they came from.",
            ["topic"], registry=registry)
        self._scale_hint_nodes = Gauge(
            "gpuplace_scale_hint_nodes", "Nodes of a shape the latest scale hint says would place the waiting pods, "
            "by what mostly blocks those pods (capacity, fragmentation, latency).", ["cluster", "shape", "blocked_by"],
            registry=registry)
        self._kube_failures = Counter(
            "gpuplace_kube_api_failures", "Calls to a cluster's apiserver that failed, by what was called (a watched "
            "kind, `credentials` for readiness's probe) and what the failure means (unauthorized: credentials "
            "rejected; forbidden: RBAC; not_served: an API the cluster does not serve).", ["cluster", "call", "reason"],
            registry=registry)
        self._kube_served = Gauge(
            "gpuplace_kube_api_served", "1 when the cluster's apiserver serves an optional API gpuplace uses "
            "(resource.k8s.io/v1: DRA), 0 when it does not (discovery, at start and after a 404).", ["cluster", "api"],
            registry=registry)

    # -- the Metrics port (usecases/ports.py) ------------------------------------------------------------------
    def scheduling_attempt(self, cluster: str, result: AttemptResult, seconds: float) -> None:
        self._cluster(cluster)
        self._attempts.labels(cluster, result).inc()
        self._attempt_seconds.labels(result).observe(max(0.0, seconds))

    def bind(self, cluster: str, result: BindResult) -> None:
        self._cluster(cluster)
        if result == "bound":
            self._binds.labels(cluster).inc()
        else:
            self._bind_failures.labels(cluster, result).inc()

    def pod_scheduled(self, cluster: str, seconds: float) -> None:
        self._cluster(cluster)
        self._scheduled_seconds.labels(cluster).observe(max(0.0, seconds))

    def eviction(self, cluster: str, result: EvictResult) -> None:
        self._cluster(cluster)
        self._evictions.labels(cluster, result).inc()

    def defrag_plan(self, cluster: str, outcome: PlanOutcome) -> None:
        self._cluster(cluster)
        self._plans.labels(cluster, outcome).inc()

    def latency_window(self, cluster: str, workload: str, frames: int, deadline_misses: int) -> None:
        if (cluster, workload) not in self._workloads_seen:
            self._workloads_seen.add((cluster, workload))
            self._deadline_misses.labels(cluster, workload)
        self._deadline_misses.labels(cluster, workload).inc(deadline_misses)
        self._slo.add(cluster, workload, frames, deadline_misses)

    def scale_hint(self, cluster: str, additions: Sequence[tuple[str, str, int]]) -> None:
        for shape, blocked_by in self._hinted.pop(cluster, set()):  # a shape no longer hinted goes, not stays stale
            self._scale_hint_nodes.remove(cluster, shape, blocked_by)
        labels = self._hinted[cluster] = set()
        for shape, blocked_by, nodes in additions:
            self._scale_hint_nodes.labels(cluster, shape, blocked_by).inc(nodes)
            labels.add((shape, blocked_by))

    @contextlib.contextmanager
    def watching(self, source: Callable[[], Iterable[ClusterGauges]]) -> Iterator[None]:
        key = next(self._source_ids)
        self._sources[key] = source
        try:
            yield
        finally:
            del self._sources[key]

    # -- what the adapters count -------------------------------------------------------------------------------
    def dead_lettered(self, topic: str) -> None:
        self._dead_letters.labels(topic).inc()

    def kube_api_failure(self, cluster: str, call: str, reason: str) -> None:
        """A failed apiserver call (adapters/kube/api_health.Report): `call` is a kind or `credentials`, `reason`
        one of api_health.FailureReason."""
        self._kube_failures.labels(cluster, call, reason).inc()

    def kube_api_served(self, cluster: str, api: str, served: bool) -> None:
        self._kube_served.labels(cluster, api).set(1 if served else 0)

    def outbox_backlog(self, rows: int) -> None:
        self._backlog.rows = rows

    def track_lag(self, source: LagSource) -> None:
        """Report `source`'s lag at each scrape for as long as it lives (held weakly: a consumer whose broker
        was closed and dropped, after a restart in process, is no longer asked)."""
        self._lag_sources.add(source)

    async def refresh(self) -> None:
        """What must be awaited before a scrape: each consumer's lag (its position may need a call to Kafka).
        A consumer that does not answer within REFRESH_TIMEOUT_S keeps the lag it last reported."""
        sources = list(self._lag_sources)
        results = await asyncio.gather(*(asyncio.wait_for(s.lags(), REFRESH_TIMEOUT_S) for s in sources),
                                       return_exceptions=True)
        for source, result in zip(sources, results, strict=True):
            if isinstance(result, BaseException):
                log.debug("consumer lag not refreshed: %r", result)
            else:
                self._last_lags[source] = result
        self._lag.clear()  # partitions no consumer here holds any more are someone else's to report
        for lags in self._last_lags.values():
            for (topic, partition), lag in lags.items():
                self._lag.labels(topic, str(partition)).set(lag)

    def exposition(self) -> bytes:
        """The registry in Prometheus's text format (CONTENT_TYPE)."""
        return generate_latest(self.registry)

    def _cluster(self, cluster: str) -> None:
        """Create a cluster's counters at zero the first time it is reported (see the module docstring)."""
        if cluster in self._clusters_seen:
            return
        self._clusters_seen.add(cluster)
        for result in get_args(AttemptResult):
            self._attempts.labels(cluster, result)
        self._binds.labels(cluster)
        self._scheduled_seconds.labels(cluster)
        for bind_result in get_args(BindResult):
            if bind_result != "bound":
                self._bind_failures.labels(cluster, bind_result)
        for evict_result in get_args(EvictResult):
            self._evictions.labels(cluster, evict_result)
        for outcome in get_args(PlanOutcome):
            self._plans.labels(cluster, outcome)


class _ClusterCollector(Collector):
    """Pending pods and stranded GPU of the clusters the watched placement services hold, read at each scrape.

    Two sources reporting one cluster (two placement workers in one process while a partition moves between
    them) add their pending pods; the stranded GPU of the last one is kept."""

    def __init__(self, sources: dict[int, Callable[[], Iterable[ClusterGauges]]]) -> None:
        self._sources = sources

    def describe(self) -> list[Metric]:
        return [*self._families(), *_node_gpu_families({})]

    def collect(self) -> Iterable[Metric]:
        pending: dict[tuple[str, str], int] = {}
        share: dict[str, float] = {}
        memory: dict[str, float] = {}
        nodes: dict[tuple[str, str], NodeGpus] = {}
        for source in list(self._sources.values()):
            try:
                clusters = list(source())
            except Exception:  # noqa: BLE001 - a scrape must not fail: the other metrics still go out
                log.warning("reading cluster gauges failed", exc_info=True)
                continue
            for gauges in clusters:
                for reason in get_args(PendingReason):
                    key = (gauges.cluster, reason)
                    pending[key] = pending.get(key, 0) + int(gauges.pending.get(reason, 0))
                if gauges.stranded_share is not None:
                    share[gauges.cluster] = gauges.stranded_share
                if gauges.stranded_memory_mib is not None:
                    memory[gauges.cluster] = gauges.stranded_memory_mib * MIB
                nodes.update(((gauges.cluster, n.node), n) for n in gauges.gpus)  # the last source's, as stranded
        pending_family, share_family, memory_family = self._families()
        for (cluster, reason), pods in sorted(pending.items()):
            pending_family.add_metric([cluster, reason], pods)
        for cluster, value in sorted(share.items()):
            share_family.add_metric([cluster], value)
        for cluster, value in sorted(memory.items()):
            memory_family.add_metric([cluster], value)
        return [pending_family, share_family, memory_family, *_node_gpu_families(nodes)]

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily("gpuplace_pending_pods", "Pods gpuplace places that are not bound yet, by why.",
                              labels=["cluster", "reason"]),
            GaugeMetricFamily("gpuplace_stranded_gpu_share",
                              "Fraction of the cluster's GPU share that is free but unusable by the typical "
                              "workload (the FGD fragmentation measure F(M), summed over nodes).",
                              labels=["cluster"]),
            GaugeMetricFamily("gpuplace_stranded_gpu_memory_bytes",
                              "Free GPU memory the typical workload could not use (F(M)'s rule on memory).",
                              labels=["cluster"]),
        )


def _node_gpu_families(nodes: dict[tuple[str, str], NodeGpus]) -> list[GaugeMetricFamily]:
    """GPU capacity and allocation per node, labelled with its GPU model (sum by model for a cluster's figures)."""
    labels = ["cluster", "node", "model"]
    families: list[tuple[GaugeMetricFamily, Callable[[NodeGpus], float]]] = [
        (GaugeMetricFamily("gpuplace_node_gpus", "GPUs of the node.", labels=labels), lambda n: n.gpus),
        (GaugeMetricFamily("gpuplace_node_gpus_allocated", "GPUs of the node given to pods, in whole GPUs (shares "
                           "added: two half-GPU pods are 1).", labels=labels),
         lambda n: n.share_allocated_milli / MILLI_PER_GPU),
        (GaugeMetricFamily("gpuplace_node_gpu_memory_bytes", "GPU memory of the node, over its GPUs.", labels=labels),
         lambda n: n.memory_mib * MIB),
        (GaugeMetricFamily("gpuplace_node_gpu_memory_allocated_bytes", "GPU memory of the node given to pods.",
                           labels=labels), lambda n: n.memory_allocated_mib * MIB),
    ]
    for (cluster, node), gpus in sorted(nodes.items()):
        for family, value in families:
            family.add_metric([cluster, node, gpus.model], value(gpus))
    return [family for family, _ in families]


class _Backlog(Collector):
    """The outbox backlog, exposed once a relay has counted it: a process without a relay says nothing, rather
    than a backlog of 0 it does not know."""

    def __init__(self) -> None:
        self.rows: int | None = None

    def describe(self) -> list[Metric]:
        return [self._family()]

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        if self.rows is not None:
            family.add_metric([], self.rows)
        return [family]

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("gpuplace_outbox_backlog_rows", "Committed outbox rows not published to Kafka yet "
                                 "(the whole outbox: every placement worker's relay reports the same number).")


class _SloWindows(Collector):
    """SLO attainment per cluster and workload: the share of frames within their deadline over the latency
    windows of the last `horizon_s`. A workload that stops reporting drops out once its windows are older."""

    def __init__(self, horizon_s: float, clock: Callable[[], float]) -> None:
        self._horizon_s = horizon_s
        self._clock = clock
        self._windows: dict[tuple[str, str], deque[tuple[float, int, int]]] = {}

    def add(self, cluster: str, workload: str, frames: int, misses: int) -> None:
        self._windows.setdefault((cluster, workload), deque()).append((self._clock(), frames, misses))

    def describe(self) -> list[Metric]:
        return [self._family()]

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        oldest = self._clock() - self._horizon_s
        for key, windows in sorted(self._windows.items()):
            while windows and windows[0][0] < oldest:
                windows.popleft()
            frames = sum(w[1] for w in windows)
            if frames:
                family.add_metric(list(key), 1.0 - sum(w[2] for w in windows) / frames)
        for key in [k for k, w in self._windows.items() if not w]:
            del self._windows[key]
        return [family]

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "gpuplace_slo_attainment_ratio",
            f"Share of frames within their deadline over the latency windows of the last {self._horizon_s:g} s.",
            labels=["cluster", "workload"])


__all__ = ["CONTENT_TYPE", "LagKey", "LagSource", "PrometheusMetrics", "SLI_BUCKETS", "SLO_HORIZON_S"]
