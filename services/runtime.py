"""How every service process runs: logging, a stop event wired to SIGINT/SIGTERM, clean shutdown, and a service
that outlives an outage of Kafka, PostgreSQL or an apiserver.

A service whose dependencies are away (at start, or long enough mid-run that a client gives up) fails with a
transient error (adapters.kafka.is_transient). Exiting would leave the restart to the orchestrator's
CrashLoopBackOff, whose pauses grow to five minutes, and a whole consumer-group rebalance on each restart; so
`keep_running` starts the service again in process after a growing pause (0.5 s doubling to 2 s, one warning
line per try: short, because a worker that waits past its dependency's return leaves its partitions unread).
Anything else (bad settings, a bug) still ends the process.

`run` gives the process its event loop: uvloop unless GPUPLACE_EVENT_LOOP=asyncio. The services are sockets and
callbacks (watch streams, Kafka, PostgreSQL, binds), and uvloop does that part in C: about 6% more binds/s in
`gpuplace bench pipeline` on a loaded two-core machine (A/B alternated: 55.8 and 55.1 against 53.2 and 51.4).

`run` also takes what the interpreter imported out of the cyclic garbage collector's sight (`gc.freeze`) and lets
the youngest generation grow to GC_YOUNG_THRESHOLD objects before it is collected. A service imports about 175,000
container objects (kubernetes_asyncio's models, SQLAlchemy, pydantic), and every full collection walked them all
again: during one `gpuplace bench pipeline --nodes 200 --pods 2000`, placement spent 1.88 s of its 12.3 s of CPU in
the collector (each collection timed with `gc.callbacks` and thread CPU time); with the imports frozen, 1.02 s;
with the young threshold at 10,000 as well, 0.66 s (cluster-watcher 0.56 -> 0.34 s). Reference counting still
frees almost everything at once; the threshold only delays the collection of cycles, a few MB at most.

`serve` also opens the process's HTTP port (GPUPLACE_HTTP_PORT: /metrics, /healthz, /readyz, http_server.py)
before any service starts, and hands every service the process's one Telemetry: a service restarted in process
reports into the same counters, and is not ready while it waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Protocol

from gpuplace.adapters.dependencies import Unreachable
from gpuplace.adapters.kafka import is_transient
from gpuplace.settings import Settings
from services import http_server
from services.telemetry import Telemetry

ServiceMain = Callable[[Settings, asyncio.Event], Awaitable[None]]


class Service(Protocol):
    """A service's `run`: until `stop`, reporting through `telemetry` (its own, unserved, when None)."""

    def __call__(self, settings: Settings, stop: asyncio.Event, *,
                 telemetry: Telemetry | None = None) -> Awaitable[None]: ...


log = logging.getLogger(__name__)
HEALTHY_RUN_S = 60.0  # a run this long before failing starts the pauses over
GC_YOUNG_THRESHOLD = 10_000  # allocations between collections of the youngest generation (CPython's default: 700)


class RepeatLimiter(logging.Filter):
    """At most one line per logger and message template every `interval_s` from the client libraries named by
    `prefixes`: during a Kafka outage aiokafka logs each reconnect attempt (every retry_backoff_ms, per client),
    tens of lines a second that bury the one line saying why. The next line that passes says how many it hid."""

    def __init__(self, prefixes: tuple[str, ...] = ("aiokafka",), interval_s: float = 10.0) -> None:
        super().__init__()
        self._prefixes, self._interval_s = prefixes, interval_s
        self._last: dict[tuple[str, object], float] = {}
        self._hidden: dict[tuple[str, object], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self._prefixes):
            return True
        key = (record.name, record.msg)
        last = self._last.get(key)
        if last is not None and record.created - last < self._interval_s:
            self._hidden[key] = self._hidden.get(key, 0) + 1
            return False
        self._last[key] = record.created
        if hidden := self._hidden.pop(key, 0):
            record.msg, record.args = f"{record.getMessage()} ({hidden} like it hidden)", None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line (GPUPLACE_LOG_FORMAT=json) for log pipelines that index fields: time (UTC,
    RFC 3339), level, logger, message, and the traceback as one string when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                 "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, log_format: str = "text") -> None:
    """Root logging for a service process: `text` lines for a terminal, or `json` lines for a log pipeline."""
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    for handler in logging.getLogger().handlers:
        if log_format == "json":
            handler.setFormatter(JsonFormatter())
        handler.addFilter(RepeatLimiter())


def run(main: Coroutine[object, object, None], settings: Settings) -> None:
    """Run `main` to completion on the event loop the settings name (see the module docstring)."""
    settle_garbage_collector()
    loop_factory = None
    if settings.event_loop == "uvloop":
        import uvloop  # imported here: only a service process needs it

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main)


def settle_garbage_collector() -> None:
    """Freeze what is alive now (the imports) out of every later collection, and collect the youngest generation
    less often (see the module docstring). The collection first leaves no garbage among what is frozen."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, oldest)


async def keep_running(main: ServiceMain, settings: Settings, stop: asyncio.Event, *,
                       max_pause_s: float = 2.0, name: str | None = None) -> None:
    """Run `main` until `stop`; start it again after a growing pause when it fails with a transient error."""
    loop = asyncio.get_running_loop()
    failures = 0
    name = name or getattr(main, "__module__", repr(main))
    while not stop.is_set():
        started = loop.time()
        try:
            await main(settings, stop)
            return
        except Exception as exc:
            if stop.is_set() or not is_transient(exc):
                raise
            failures = 1 if loop.time() - started > HEALTHY_RUN_S else failures + 1
            pause = min(0.5 * 2 ** (failures - 1), max_pause_s)
            why = exc if isinstance(exc, Unreachable) else f"a dependency is unreachable ({type(exc).__name__}: {exc})"
            log.warning("%s: %s; starting again in %.1f s (try %d)", name, why, pause, failures + 1)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)


async def serve(services: Mapping[str, Service], settings: Settings) -> None:
    """Run services (name -> run) until a signal arrives, then stop them all; the HTTP port is open throughout."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    telemetry = Telemetry()
    async with http_server.serving(telemetry, settings.http_port):
        await run_services(services, settings, stop, telemetry)


async def run_services(services: Mapping[str, Service], settings: Settings, stop: asyncio.Event,
                       telemetry: Telemetry) -> None:
    """Each service kept running (keep_running) until `stop` or until one fails for good, then all stopped;
    the first failure is raised."""
    for name in services:
        telemetry.health.expect(name)
    tasks = [asyncio.create_task(keep_running(functools.partial(run, telemetry=telemetry), settings, stop, name=name))
             for name, run in services.items()]
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
    stop.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    stopper.cancel()
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result


__all__ = ["JsonFormatter", "RepeatLimiter", "Service", "ServiceMain", "configure_logging", "keep_running",
           "run_services", "serve", "settle_garbage_collector"]
