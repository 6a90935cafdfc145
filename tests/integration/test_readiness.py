"""/readyz on the real stack: 503 while PostgreSQL is away, 200 once it is back, the service alive throughout.

The shared PostgreSQL is never stopped: the service reaches it through a TCP proxy of the test's own, which
cuts every connection and turns new ones away for the outage, then forwards again.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

import aiohttp
import pytest

from gpuplace.adapters.kafka import ensure_topics
from gpuplace.adapters.metrics import PrometheusMetrics
from gpuplace.adapters.postgres import migrate
from gpuplace.contracts import topics
from gpuplace.settings import Settings
from services import http_server, runtime
from services.latency_ingest import app as latency_ingest
from services.telemetry import Health, Telemetry
from tests.integration.conftest import eventually, run_id

pytestmark = pytest.mark.integration


class TcpProxy:
    """127.0.0.1:<port> forwards to `target`; `cut()` drops every connection and turns new ones away (closed as
    soon as accepted, as a database going down does), `restore()` forwards again."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._up = True
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        assert self._server is not None
        self._server.close()

    def cut(self) -> None:
        self._up = False
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    def restore(self) -> None:
        self._up = True

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._up:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._open |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        self._open.discard(writer)
        writer.close()


async def _readyz(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/readyz") as response:
        return response.status, await response.text()


async def test_readyz_is_503_while_the_database_is_away_and_200_once_it_is_back(kafka_bootstrap: str,
                                                                               database_url: str) -> None:
    await migrate.upgrade_async(database_url)
    target = urlsplit(database_url)
    run = run_id()
    async with TcpProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        proxied = database_url.replace(f"@{target.hostname}:{target.port}/", f"@127.0.0.1:{proxy.port}/", 1)
        assert proxied != database_url
        settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=proxied, topic_suffix=f".ready-{run}")
        await ensure_topics(kafka_bootstrap, [settings.topic(topics.LATENCY)])
        telemetry = Telemetry(PrometheusMetrics(process_metrics=False), Health(check_timeout_s=2.0))
        stop = asyncio.Event()
        async with http_server.serving(telemetry, 0, host="127.0.0.1") as (host, port):
            url = f"http://{host}:{port}"
            service = asyncio.create_task(runtime.run_services({"latency-ingest": latency_ingest.run}, settings, stop,
                                                               telemetry))
            try:
                await eventually(lambda: _status(url, 200), timeout_s=60, what="/readyz 200 with the database up")

                proxy.cut()
                status, body = await eventually(lambda: _status(url, 503), timeout_s=30,
                                                what="/readyz 503 with the database away")
                assert body.startswith("latency-ingest: postgres: "), body
                assert "kafka" not in body  # Kafka still answers: only what is away is named
                assert len(body.splitlines()) == 1
                async with aiohttp.ClientSession() as session, session.get(f"{url}/healthz") as alive:
                    assert alive.status == 200  # not ready, but alive: no restart wanted
                assert not service.done()

                proxy.restore()
                await eventually(lambda: _status(url, 200), timeout_s=60, what="/readyz 200 with the database back")
            finally:
                stop.set()
                await asyncio.wait_for(service, 30)


async def _status(url: str, expected: int) -> tuple[int, str] | None:
    try:
        status, body = await _readyz(url)
    except aiohttp.ClientError:
        return None
    return (status, body) if status == expected else None
