"""The process runtime: client-library log floods are limited, a transient failure restarts the service in
process, anything else ends it."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest
from aiokafka.errors import KafkaConnectionError

from gpuplace.adapters.metrics import PrometheusMetrics
from gpuplace.settings import Settings
from services import runtime
from services.telemetry import Telemetry


def _record(name: str, msg: str, created: float, *args: object) -> logging.LogRecord:
    record = logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)
    record.created = created
    return record


def test_repeated_client_library_lines_pass_once_per_interval_and_say_how_many_were_hidden():
    limiter = runtime.RepeatLimiter(interval_s=10.0)
    template = "Unable connect to node with id %s: %s"
    passed = [limiter.filter(_record("aiokafka", template, t / 10, 1, "refused")) for t in range(200)]
    assert sum(passed) == 2  # at 0 s and at 10 s, of 200 lines in 20 s
    late = _record("aiokafka", template, 20.0, 1, "refused")
    assert limiter.filter(late) and late.getMessage() == "Unable connect to node with id 1: refused (99 like it hidden)"
    assert all(limiter.filter(_record("gpuplace.placement", "x", t / 10)) for t in range(50))  # ours: untouched


async def test_a_transient_failure_starts_the_service_again_and_a_bug_ends_it(monkeypatch):
    monkeypatch.setattr(runtime, "HEALTHY_RUN_S", 60.0)
    runs: list[int] = []
    stop = asyncio.Event()

    async def flaky(settings: Settings, stop_event: asyncio.Event) -> None:
        runs.append(1)
        if len(runs) < 3:
            raise KafkaConnectionError("Unable to bootstrap")
        stop_event.set()

    await asyncio.wait_for(runtime.keep_running(flaky, Settings(), stop, max_pause_s=0.01), 5)
    assert len(runs) == 3

    async def broken(settings: Settings, stop_event: asyncio.Event) -> None:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        await runtime.keep_running(broken, Settings(), asyncio.Event())


async def test_every_service_gets_the_process_telemetry_and_is_not_ready_until_it_runs():
    telemetry = Telemetry(PrometheusMetrics(process_metrics=False))
    stop, started = asyncio.Event(), asyncio.Event()
    seen: list[Telemetry | None] = []

    async def ready(settings: Settings, stop_event: asyncio.Event, *, telemetry: Telemetry | None = None) -> None:
        seen.append(telemetry)
        assert telemetry is not None
        with telemetry.health.running("ready"):
            started.set()
            await stop_event.wait()

    async def starting(settings: Settings, stop_event: asyncio.Event, *, telemetry: Telemetry | None = None) -> None:
        seen.append(telemetry)
        await stop_event.wait()

    services = asyncio.create_task(runtime.run_services({"ready": ready, "starting": starting}, Settings(), stop,
                                                        telemetry))
    await asyncio.wait_for(started.wait(), 5)
    assert seen == [telemetry, telemetry]
    assert await telemetry.health.problems() == [
        "starting: not running (starting, or starting again after an outage)"]
    stop.set()
    await asyncio.wait_for(services, 5)
    assert len(await telemetry.health.problems()) == 2  # stopped: neither runs


@pytest.mark.parametrize(("event_loop", "loop_type"),
                         [("uvloop", "uvloop.Loop"), ("asyncio", "_UnixSelectorEventLoop")])
def test_a_service_process_runs_on_the_event_loop_its_settings_name(event_loop, loop_type):
    seen: list[str] = []

    async def main() -> None:
        loop = type(asyncio.get_running_loop())
        seen.append(f"{loop.__module__}.{loop.__qualname__}" if loop.__module__ == "uvloop" else loop.__qualname__)

    runtime.run(main(), Settings(event_loop=event_loop))
    assert seen == [loop_type]


def test_an_unknown_event_loop_is_refused_by_the_settings():
    with pytest.raises(ValueError, match="event_loop"):
        Settings(event_loop="trio")


def test_a_service_process_freezes_its_imports_out_of_the_collector_and_collects_the_young_less_often():
    before_threshold = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)  # CPython's defaults (another test here may have run a service already)
    try:
        runtime.run(asyncio.sleep(0), Settings(event_loop="asyncio"))
        assert gc.get_freeze_count() > 10_000  # this test process's imports, at least
        assert gc.get_threshold() == (runtime.GC_YOUNG_THRESHOLD, 10, 10)
        garbage = [[]]
        garbage[0].append(garbage)  # a cycle made after the freeze is still collected
        del garbage
        assert gc.collect() >= 1
    finally:
        gc.unfreeze()
        gc.set_threshold(*before_threshold)
