"""The example perception program's histogram is what gpu-agent reads: served over HTTP, parsed, windowed."""

import socket
import urllib.request

import pytest
from prometheus_client import generate_latest

from examples.perception_reporter.frame_latency import BUCKETS_S, METRIC, FrameLatency
from examples.perception_reporter.program import run, simulated
from gpuplace.adapters.pod_metrics.histogram import parse_histogram


def test_buckets_have_edges_at_the_common_frame_periods():
    for period_s in (1 / 60, 1 / 30, 1 / 15):
        assert min(abs(b - period_s) for b in BUCKETS_S) < 1e-4, period_s
    assert list(BUCKETS_S) == sorted(BUCKETS_S)


def test_every_frame_is_timed_from_release_to_result():
    # a clock the loop reads: released at 0, 10, 20 ms; the first frame done at 5 ms, then the "inference" takes
    # 25 ms, so the second frame (released at 10 ms) waits and is done at 30 ms: 20 ms; the third at 55 ms: 35 ms
    now = iter([0.0, 0.0, 0.005, 0.005, 0.030, 0.030, 0.055]).__next__
    latency = FrameLatency()
    assert run(100.0, lambda: None, latency, frames=3, clock=now) == 3
    histogram = parse_histogram(generate_latest(latency.registry).decode(), METRIC)
    assert histogram is not None and histogram.count == 3
    assert histogram.count_over_ms(33.3) == 1 and histogram.count_over_ms(16.7) == 2


def test_the_program_serves_the_histogram_gpu_agent_scrapes():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    latency = FrameLatency()
    latency.serve(port, addr="127.0.0.1")
    run(1000.0, simulated(0.1), latency, frames=20)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        histogram = parse_histogram(response.read().decode(), METRIC)
    assert histogram is not None and histogram.count == 20
    with pytest.raises(ValueError, match="before its release"):
        latency.observe(2.0, 1.0)
