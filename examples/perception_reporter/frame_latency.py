"""The frame latency histogram gpuplace reads: copy this module into a workload that exports nothing yet.

    gpuplace_frame_latency_seconds   histogram, seconds (Prometheus' base unit)

One observation per frame: the time from the frame's *release* (when the camera delivered it, or when the
stream's clock said it was due) to its result, so waiting behind co-runners on a shared GPU counts, as it does for
the deadline. Not the inference call alone: a frame that waited 20 ms before a 5 ms call took 25 ms.

The buckets sit around perception deadlines (a 30 fps frame period is 33.3 ms, 60 fps 16.7 ms, 15 fps 66.7 ms;
80 ms and 100 ms are common SLAM deadlines): gpuplace reads percentiles by interpolating inside a bucket, and
counts deadline misses the same way, so a bucket edge at the deadline makes both exact there. Past the last
finite bucket (1 s) a frame only says "at least 1 s": the GPU is overloaded by then.

Serve it on a port and annotate the pod (gpu-agent scrapes it every GPUPLACE_LATENCY_WINDOW_S):
    gpuplace.io/latency-port: "9400"
    gpuplace.io/latency-path: "/metrics"     # the default
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, start_http_server

METRIC = "gpuplace_frame_latency_seconds"
BUCKETS_S = (0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.0167, 0.02, 0.025, 0.03, 0.0333, 0.04, 0.05, 0.0667,
             0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
"""Upper bounds in seconds; +Inf is added by prometheus_client."""


class FrameLatency:
    """One histogram in its own registry (so nothing else of the process is exposed unless the caller wants it)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._histogram = Histogram(METRIC, "Frame latency: release of the frame to its result, in seconds.",
                                    buckets=BUCKETS_S, registry=self.registry)

    def observe(self, released_s: float, done_s: float) -> None:
        """Record one frame released at `released_s` and done at `done_s` (one clock, e.g. time.monotonic())."""
        if done_s < released_s:
            raise ValueError(f"a frame cannot be done ({done_s}) before its release ({released_s})")
        self._histogram.observe(done_s - released_s)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:  # noqa: S104 - the pod IP is what gpu-agent scrapes
        """Serve /metrics on `port` from a background thread."""
        start_http_server(port, addr=addr, registry=self.registry)


__all__ = ["BUCKETS_S", "METRIC", "FrameLatency"]
