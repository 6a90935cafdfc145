"""The process's HTTP port: /metrics, /healthz and /readyz over a real socket, what readiness says about the
services and their dependencies, and a port in use refused with one line."""

from __future__ import annotations

import asyncio
import socket

import pytest

from gpuplace.adapters.metrics import PrometheusMetrics
from services import http_server
from services.telemetry import Health, Telemetry


async def request(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    response = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return int(status_line.split()[1]), {k.lower(): v for k, v in headers.items()}, body


async def get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    return await request(port, f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n".encode())


def telemetry(check_timeout_s: float = 3.0) -> Telemetry:
    return Telemetry(PrometheusMetrics(process_metrics=False), Health(check_timeout_s))


async def test_metrics_are_served_in_prometheus_text_format_with_lag_refreshed_first():
    served = telemetry()
    served.metrics.bind("east", "bound")

    class Lag:
        async def lags(self):
            return {("gpuplace.pods.v1", 2): 5}

    lag = Lag()
    served.metrics.track_lag(lag)
    async with http_server.serving(served, 0, host="127.0.0.1") as (_, port):
        status, headers, body = await get(port, "/metrics")
        head_status, head_headers, head_body = await get(port, "/metrics", "HEAD")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert int(headers["content-length"]) == len(body)
    text = body.decode()
    assert 'gpuplace_binds_total{cluster="east"} 1.0' in text
    assert 'gpuplace_consumer_lag_records{partition="2",topic="gpuplace.pods.v1"} 5.0' in text
    assert head_status == 200 and head_body == b"" and int(head_headers["content-length"]) > 0


async def test_liveness_answers_while_the_loop_does_and_wrong_requests_are_told_so():
    async with http_server.serving(telemetry(), 0, host="127.0.0.1") as (_, port):
        status, headers, body = await get(port, "/healthz")
        assert (status, headers["content-type"], body) == (200, "text/plain; charset=utf-8", b"ok\n")
        status, _, body = await get(port, "/healthz?verbose=1")
        assert (status, body) == (200, b"ok\n")
        assert (await get(port, "/nothing"))[0] == 404
        assert (await get(port, "/metrics", "POST"))[0] == 405
        assert (await request(port, b"hello\r\n\r\n"))[0] == 400


async def test_readiness_says_which_service_is_not_running_and_which_dependency_is_away():
    served = telemetry(check_timeout_s=0.2)
    served.health.expect("placement")
    served.health.expect("latency-ingest")
    database = {"up": True}

    async def postgres() -> None:
        if not database["up"]:
            raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 25432)")

    async def kafka_hangs() -> None:
        await asyncio.Event().wait()

    async def kafka() -> None:
        pass

    async with http_server.serving(served, 0, host="127.0.0.1") as (_, port):
        status, headers, body = await get(port, "/readyz")
        assert status == 503 and headers["content-type"].startswith("text/plain")
        assert body.decode().splitlines() == [
            "placement: not running (starting, or starting again after an outage)",
            "latency-ingest: not running (starting, or starting again after an outage)"]

        with served.health.running("placement", postgres=postgres, kafka=kafka), \
                served.health.running("latency-ingest", kafka=kafka):
            status, _, body = await get(port, "/readyz")
            assert (status, body) == (200, b"ok\n")
            database["up"] = False
            status, _, body = await get(port, "/readyz")
            assert status == 503
            assert body.decode() == "placement: postgres: ConnectionRefusedError: [Errno 111] Connect call failed " \
                                    "('127.0.0.1', 25432)\n"
            database["up"] = True
            assert (await get(port, "/readyz"))[0] == 200

        with served.health.running("placement", kafka=kafka_hangs), served.health.running("latency-ingest"):
            status, _, body = await asyncio.wait_for(get(port, "/readyz"), 2)
        assert (status, body) == (503, b"placement: kafka: no answer in time\n")


async def test_readiness_ends_with_the_notes_the_services_declared_whatever_its_verdict():
    served = telemetry()
    database = {"up": True}

    async def postgres() -> None:
        if not database["up"]:
            raise ConnectionRefusedError(111, "refused")

    note = "DRA off in cluster east: its apiserver serves no resource.k8s.io/v1"
    async with http_server.serving(served, 0, host="127.0.0.1") as (_, port):
        with served.health.running("cluster-watcher", postgres=postgres), served.health.noting(lambda: [note]):
            assert (await get(port, "/readyz"))[::2] == (200, f"ok\n{note}\n".encode())
            database["up"] = False
            status, _, body = await get(port, "/readyz")
            assert status == 503 and body.decode().splitlines()[1:] == [note]
        assert (await get(port, "/readyz"))[::2] == (200, b"ok\n")  # the block ended: its notes went with it


async def test_port_zero_takes_a_free_port_and_a_port_in_use_ends_with_one_line_naming_the_setting():
    async with http_server.serving(telemetry(), 0, host="127.0.0.1") as (host, port):
        assert host == "127.0.0.1" and port > 0
        with pytest.raises(SystemExit) as refused:
            async with http_server.serving(telemetry(), port, host="127.0.0.1"):
                pass
    message = str(refused.value)
    assert message.startswith(f"GPUPLACE_HTTP_PORT={port}: cannot listen on 127.0.0.1:{port}: ")
    assert "in use" in message and "\n" not in message
    with pytest.raises(ConnectionRefusedError):  # the block ended: nothing listens there any more
        socket.create_connection(("127.0.0.1", port), timeout=1)
