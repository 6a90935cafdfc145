"""One round of scrapes against pods served over real HTTP on loopback: baselines, windows, failures."""

import pytest
from aiohttp import web

from gpuplace.adapters.pod_metrics.scraper import PodLatencyScraper
from gpuplace.adapters.pod_metrics.targets import ScrapeTarget

METRIC = "gpuplace_frame_latency_seconds"


def exposition(within_10ms: int, within_40ms: int, total: int) -> str:
    return (f'{METRIC}_bucket{{le="0.01"}} {within_10ms}\n{METRIC}_bucket{{le="0.04"}} {within_40ms}\n'
            f'{METRIC}_bucket{{le="+Inf"}} {total}\n{METRIC}_count {total}\n')


@pytest.fixture
async def server():
    served = {"text": exposition(0, 0, 0)}

    async def metrics(_request):
        return web.Response(text=served["text"])

    async def broken(_request):
        return web.Response(text="not {metrics")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/broken", broken)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield served, port
    await runner.cleanup()


def target(port: int, path: str = "/metrics", uid: str = "u1") -> ScrapeTarget:
    return ScrapeTarget(uid=uid, namespace="perception", pod="det-0", url=f"http://127.0.0.1:{port}{path}",
                        workload="detector", gpu_index=1, deadline_ms=33.3, co_runners=("perception/seg-0",))


async def test_the_first_scrape_sets_a_baseline_and_the_next_gives_the_window(server):
    served, port = server
    scraper = PodLatencyScraper(cluster="east", region="eu", node="gpu-1", metric=METRIC)
    served["text"] = exposition(100, 190, 200)
    assert await scraper.windows([target(port)], now_s=100.0) == []
    # 300 frames in the next 10 s: 150 within 10 ms, 140 more within 40 ms, 10 beyond
    served["text"] = exposition(250, 480, 500)
    [window] = await scraper.windows([target(port)], now_s=110.0)
    assert (window.frames, window.window_s, window.node, window.gpu_index) == (300, 10.0, "gpu-1", 1)
    assert window.p50_ms == pytest.approx(10.0)  # rank 150: the top of the first bucket
    assert window.p95_ms == pytest.approx(10 + 30 * 135 / 140)  # rank 285: 135th of the 140 in (10, 40 ms]
    # within 33.3 ms: 150 + 140 x 23.3 / 30 = 258.7; so 300 - 258.7 = 41 frames late
    assert window.deadline_misses == 41
    assert window.co_runners == ["perception/seg-0"] and window.workload == "detector"
    assert window.kafka_key() == b"east/perception/det-0"


async def test_no_frames_no_window_and_a_failed_scrape_keeps_the_baseline(server):
    served, port = server
    scraper = PodLatencyScraper(cluster="east", region="eu", node="gpu-1", metric=METRIC)
    served["text"] = exposition(10, 10, 10)
    await scraper.windows([target(port)], now_s=1.0)
    assert await scraper.windows([target(port)], now_s=2.0) == []  # nothing new
    gone = target(port + 1 if port < 65535 else port - 1)
    assert await scraper.windows([target(port, "/broken"), gone], now_s=3.0) == []
    served["text"] = exposition(20, 20, 20)
    [window] = await scraper.windows([target(port)], now_s=4.0)
    assert window.frames == 10 and window.window_s == 2.0  # from the scrape at 2.0, the broken one skipped
