"""The one HTTP port of a service process (GPUPLACE_HTTP_PORT): /metrics, /healthz, /readyz.

- `GET /metrics`: Prometheus's text format (adapters/metrics.py), consumer lag refreshed first;
- `GET /healthz`: liveness, 200 whenever the event loop answers (the handler runs on it: a loop blocked by a
  runaway computation or a deadlock does not answer, and the kubelet restarts the container);
- `GET /readyz`: readiness, 200 when every service of the process is running and its dependencies answer, 503
  with one plain-text line per problem otherwise (services/telemetry.Health); either is followed by the notes the
  services declared (an API a cluster does not serve), one line each.

A small handler on asyncio's own server rather than a web framework: three read-only paths, one response per
connection (`Connection: close`), and it renders on the event loop, so a scrape reads the placement service's
clusters between two of its steps, never during one. Port 0 takes any free port (tests, the demo and the chaos
bench, which run many processes on one machine); a port in use ends the process with one line naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
from collections.abc import AsyncIterator

from gpuplace.adapters.metrics import CONTENT_TYPE
from services.telemetry import Telemetry

log = logging.getLogger(__name__)
HOST = "0.0.0.0"  # every interface: Prometheus and the kubelet reach the pod on its pod IP
READ_TIMEOUT_S = 5.0
MAX_HEADER_LINES = 100
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error",
            503: "Service Unavailable"}
TEXT = "text/plain; charset=utf-8"


@contextlib.asynccontextmanager
async def serving(telemetry: Telemetry, port: int, host: str = HOST) -> AsyncIterator[tuple[str, int]]:
    """Serve the endpoints while the block runs; yields the address bound (the port chosen, for port 0)."""
    try:
        server = await asyncio.start_server(functools.partial(_handle, telemetry), host, port)
    except OSError as exc:
        why = "address already in use (set GPUPLACE_HTTP_PORT to a free port, or 0 for any)" \
            if exc.errno == errno.EADDRINUSE else os.strerror(exc.errno) if exc.errno else str(exc)
        raise SystemExit(f"GPUPLACE_HTTP_PORT={port}: cannot listen on {host}:{port}: {why}") from None
    bound = server.sockets[0].getsockname()
    address = (str(bound[0]), int(bound[1]))
    log.info("serving /metrics, /healthz and /readyz on http://%s:%d", *address)
    try:
        yield address
    finally:
        server.close()
        await server.wait_closed()


async def _handle(telemetry: Telemetry, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = False
    try:
        try:
            method, path = await asyncio.wait_for(_read_request(reader), READ_TIMEOUT_S)
        except (ValueError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            status, content_type, body = 400, TEXT, b"bad request\n"
        else:
            head = method == "HEAD"
            status, content_type, body = await _route(telemetry, method, path)
        writer.write(f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode())
        if not head:
            writer.write(body)
        await writer.drain()
    except (ConnectionError, TimeoutError):
        pass  # the client went away: nothing to answer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str]:
    """The method and path of one request; its headers are read and ignored (no request has a body)."""
    parts = (await reader.readline()).decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError("not an HTTP request line")
    for _ in range(MAX_HEADER_LINES):
        if (await reader.readline()).strip() == b"":
            return parts[0], parts[1].split("?", 1)[0]
    raise ValueError("too many header lines")


async def _route(telemetry: Telemetry, method: str, path: str) -> tuple[int, str, bytes]:
    if path not in ("/metrics", "/healthz", "/readyz"):
        return 404, TEXT, b"not found: try /metrics, /healthz or /readyz\n"
    if method not in ("GET", "HEAD"):
        return 405, TEXT, b"only GET and HEAD\n"
    try:
        if path == "/metrics":
            await telemetry.metrics.refresh()
            return 200, CONTENT_TYPE, telemetry.metrics.exposition()
        if path == "/healthz":
            return 200, TEXT, b"ok\n"
        problems = await telemetry.health.problems()
    except Exception as exc:  # noqa: BLE001 - answer, and say so in the log, rather than drop the connection
        log.exception("%s failed", path)
        return 500, TEXT, f"{path} failed: {type(exc).__name__}\n".encode()
    notes = telemetry.health.notes()  # facts beside readiness ("DRA off in cluster east"), after its verdict
    if problems:
        return 503, TEXT, ("\n".join([*problems, *notes]) + "\n").encode()
    return 200, TEXT, ("\n".join(["ok", *notes]) + "\n").encode()


__all__ = ["HOST", "serving"]
