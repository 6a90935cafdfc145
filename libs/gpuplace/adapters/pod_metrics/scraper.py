"""Scrape the opted-in pods of a node and turn what each served since the last scrape into a latency window.

Each round, every target (targets.py) is fetched concurrently over HTTP; its histogram (histogram.py) less the
one of the previous round is the window: frames, p50/p95/p99, deadline misses, with the pod's GPU and the pods
that share it. The first scrape of a pod (or the first after it came back with new buckets) only sets the baseline;
a window without frames is not published. A pod that does not answer, or answers something that is not its
histogram, is skipped this round and keeps its baseline; the agent logs it and carries on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from gpuplace.adapters.pod_metrics.histogram import Histogram, HistogramError, parse_histogram
from gpuplace.adapters.pod_metrics.targets import ScrapeTarget
from gpuplace.contracts.events import LatencyWindow

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class _Baseline:
    histogram: Histogram
    at_s: float


class PodLatencyScraper:
    """Keeps each pod's last histogram between rounds; `windows` is one round."""

    def __init__(self, *, cluster: str, region: str, node: str, metric: str, timeout_s: float = 2.0) -> None:
        self._cluster, self._region, self._node, self._metric = cluster, region, node, metric
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._last: dict[str, _Baseline] = {}

    async def windows(self, targets: Sequence[ScrapeTarget], now_s: float) -> list[LatencyWindow]:
        """Scrape every target once; the windows of those with frames since their baseline."""
        async with aiohttp.ClientSession(timeout=self._timeout) as session:
            texts = await asyncio.gather(*(self._fetch(session, t) for t in targets))
        out = []
        for target, text in zip(targets, texts, strict=True):
            if text is None:
                continue
            window = self._window(target, text, now_s)
            if window is not None:
                out.append(window)
        live = {t.uid for t in targets}
        self._last = {uid: b for uid, b in self._last.items() if uid in live}  # pods gone: forget them
        return out

    async def _fetch(self, session: aiohttp.ClientSession, target: ScrapeTarget) -> str | None:
        try:
            async with session.get(target.url) as response:
                response.raise_for_status()
                return await response.text()
        except (aiohttp.ClientError, TimeoutError) as error:
            log.warning("latency scrape of %s/%s at %s failed: %s", target.namespace, target.pod, target.url, error)
            return None

    def _window(self, target: ScrapeTarget, text: str, now_s: float) -> LatencyWindow | None:
        try:
            histogram = parse_histogram(text, self._metric)
        except HistogramError as error:
            log.warning("latency scrape of %s/%s: %s", target.namespace, target.pod, error)
            return None
        if histogram is None:
            log.warning("latency scrape of %s/%s: no histogram %s", target.namespace, target.pod, self._metric)
            return None
        last = self._last.get(target.uid)
        self._last[target.uid] = _Baseline(histogram, now_s)
        if last is None or now_s <= last.at_s:
            return None
        window = histogram.since(last.histogram)
        frames = int(round(window.count))
        if frames < 1:
            return None
        p50, p95, p99 = (window.quantile_ms(q) for q in (0.50, 0.95, 0.99))
        misses = 0 if target.deadline_ms is None else min(frames, window.count_over_ms(target.deadline_ms))
        return LatencyWindow(
            cluster=self._cluster, region=self._region, namespace=target.namespace, pod=target.pod,
            workload=target.workload, node=self._node, gpu_index=target.gpu_index, window_s=now_s - last.at_s,
            frames=frames, p50_ms=p50, p95_ms=p95, p99_ms=p99, deadline_ms=target.deadline_ms,
            deadline_misses=misses, co_runners=list(target.co_runners))


__all__ = ["PodLatencyScraper"]
