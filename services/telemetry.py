"""What a service process tells the platform about itself: its metrics, and whether its services are ready.

One Telemetry per process (runtime.serve makes it; `gpuplace up` shares it between the services it runs), handed
to each service's `run`, which reports through `metrics` and declares, once its clients are up, what it depends
on (`health.running`). The HTTP server (http_server.py) reads both.

Readiness is "every service this process runs is running, and what each depends on answers now": a service
waiting out an outage in process (runtime.keep_running) is alive but not ready, and /readyz says which
dependency is away. Each check is bounded, so a dependency that hangs reads as away rather than holding the probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field

from gpuplace.adapters.metrics import PrometheusMetrics

Check = Callable[[], Awaitable[None]]
"""A dependency check: returns when the dependency answers, raises (any exception) when it does not."""
CHECK_TIMEOUT_S = 3.0


class Health:
    """The services a process is expected to run, and the checks of those running now."""

    def __init__(self, check_timeout_s: float = CHECK_TIMEOUT_S) -> None:
        self._timeout_s = check_timeout_s
        self._expected: list[str] = []
        self._running: dict[int, tuple[str, dict[str, Check]]] = {}
        self._notes: dict[int, Callable[[], Iterable[str]]] = {}
        self._ids = itertools.count()

    def expect(self, service: str) -> None:
        """`service` must be running for the process to be ready (from before it starts)."""
        if service not in self._expected:
            self._expected.append(service)

    @contextlib.contextmanager
    def running(self, service: str, **checks: Check) -> Iterator[None]:
        """`service` runs while the block does, ready when every one of `checks` (dependency name -> check)
        passes."""
        key = next(self._ids)
        self._running[key] = (service, dict(checks))
        try:
            yield
        finally:
            del self._running[key]

    @contextlib.contextmanager
    def noting(self, source: Callable[[], Iterable[str]]) -> Iterator[None]:
        """While the block runs, /readyz also says what `source` returns (cheap, synchronous): facts an operator
        should know that do not make the process unready, such as an API its cluster does not serve."""
        key = next(self._ids)
        self._notes[key] = source
        try:
            yield
        finally:
            del self._notes[key]

    def notes(self) -> list[str]:
        return [line for source in list(self._notes.values()) for line in source()]

    async def problems(self) -> list[str]:
        """Why the process is not ready, one short line per service and dependency; [] when it is."""
        running = list(self._running.values())
        names = {name for name, _ in running}
        found = [f"{name}: not running (starting, or starting again after an outage)"
                 for name in self._expected if name not in names]
        labelled = [(f"{name}: {dependency}", check)
                    for name, checks in running for dependency, check in checks.items()]
        results = await asyncio.gather(*(asyncio.wait_for(check(), self._timeout_s) for _, check in labelled),
                                       return_exceptions=True)
        found += [f"{label}: {_why(result)}" for (label, _), result in zip(labelled, results, strict=True)
                  if isinstance(result, BaseException)]
        return found


def _why(exc: BaseException) -> str:
    """A short reason: the exception's class and the first line of its message (SQLAlchemy appends the
    statement and a link; a driver's message names host and port, never the password)."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return "no answer in time"
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:200]}" if first else type(exc).__name__


@dataclass
class Telemetry:
    metrics: PrometheusMetrics = field(default_factory=PrometheusMetrics)
    health: Health = field(default_factory=Health)


__all__ = ["CHECK_TIMEOUT_S", "Check", "Health", "Telemetry"]
