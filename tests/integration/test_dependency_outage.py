"""Services wait out an unreachable Kafka or PostgreSQL, with a growing pause, instead of exiting (issue 20: a
service started while a dependency was away crash-looped, and its partitions stalled until it came back).

The dependency is made unreachable without touching the shared stack: the service is pointed at a local port
where nothing listens, and a TCP relay to the real Kafka or PostgreSQL opens there later.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer

from gpuplace.adapters.kafka import client_options, ensure_topics, make_broker
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import cluster_api, database
from gpuplace.contracts import topics
from gpuplace.contracts.events import NodeEvent
from gpuplace.harness.pipeline_run import FLEET_LABEL
from gpuplace.harness.shared_cluster import delete_quietly, node_manifest
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from services import runtime
from services.cluster_watcher import app as cluster_watcher
from services.placement import app as placement
from tests.integration.conftest import eventually, run_id

pytestmark = pytest.mark.integration
AWAY_S = 6.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def relay(port: int, target: str) -> AsyncIterator[None]:
    """127.0.0.1:`port` forwards to `target` (HOST:PORT) while the block runs."""
    host, _, target_port = target.rpartition(":")

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host or "127.0.0.1", int(target_port))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(connect, "127.0.0.1", port)
    try:
        yield
    finally:
        server.close()


def _retries(caplog: pytest.LogCaptureFixture) -> list[str]:
    """keep_running's line per try: `<service>: cannot reach <dependency> at <address> (<setting>): <reason>;
    starting again in ...` (adapters.dependencies), or `a dependency is unreachable (...)` for other outages."""
    return [r.getMessage() for r in caplog.records if "starting again in" in r.getMessage()]


async def test_cluster_watcher_waits_for_kafka_and_publishes_once_it_is_reachable(
        kafka_bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    run, port = run_id(), _free_port()
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    # one replica, no namespace of its own for a Lease: without election (test_leader_election has it)
    settings = Settings(kafka_bootstrap=f"127.0.0.1:{port}", cluster=f"east-{run}", topic_suffix=f".outage-{run}",
                        node_label_selector=f"{FLEET_LABEL}={run}", leader_election=False)
    await ensure_topics(kafka_bootstrap, [settings.topic(topics.NODES)])
    caplog.set_level(logging.WARNING, logger=runtime.__name__)
    stop = asyncio.Event()
    async with cluster_api(kubeconfig) as api:
        await api.core.create_node(node_manifest(f"outage-{run}", run, gpus=1))
        watcher = asyncio.create_task(runtime.keep_running(
            lambda s, e: cluster_watcher.run(s, e, kubeconfig=kubeconfig), settings, stop))
        try:
            await asyncio.sleep(AWAY_S)
            assert not watcher.done(), "cluster-watcher exited while Kafka was unreachable"
            tries = _retries(caplog)
            assert 2 <= len(tries) <= 8, tries  # 0.5, 1, 2, 2 s pauses: a handful of lines, not a flood
            async with relay(port, kafka_bootstrap):
                nodes = AIOKafkaConsumer(settings.topic(topics.NODES), **client_options(kafka_bootstrap),
                                         auto_offset_reset="earliest", group_id=None)
                await nodes.start()
                try:
                    record = await asyncio.wait_for(nodes.getone(), 45)
                    assert json.loads(record.value)["name"] == f"outage-{run}"
                finally:
                    await nodes.stop()
        finally:
            stop.set()
            await asyncio.gather(watcher, return_exceptions=True)
            await delete_quietly(api.core.delete_node(f"outage-{run}"))


async def test_placement_waits_for_postgresql_and_stores_events_once_it_is_reachable(
        kafka_bootstrap: str, database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    run, port = run_id(), _free_port()
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    real = Settings(database_url=database_url)
    host_port = database_url.split("@", 1)[1].split("/", 1)[0]
    away = database_url.replace(host_port, f"127.0.0.1:{port}")
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=away,
                        cluster=f"east-{run}", kubeconfig=kubeconfig, topic_suffix=f".outage-{run}",
                        defrag_enabled=False)
    await migrate.upgrade_async(database_url)
    await ensure_topics(kafka_bootstrap, [settings.topic(t) for t in topics.ALL_TOPICS])
    caplog.set_level(logging.WARNING, logger=runtime.__name__)
    stop = asyncio.Event()
    service = asyncio.create_task(runtime.keep_running(placement.run, settings, stop))
    try:
        await asyncio.sleep(AWAY_S)
        assert not service.done(), "placement exited while PostgreSQL was unreachable"
        assert 2 <= len(_retries(caplog)) <= 8, _retries(caplog)
        assert f"cannot reach PostgreSQL at 127.0.0.1:{port}/" in _retries(caplog)[0]
        assert "(GPUPLACE_DATABASE_URL)" in _retries(caplog)[0]
        node = NodeEvent(cluster=settings.cluster, kind="upsert", name="n1", cpu_milli=1000, memory_mib=1024)
        async with relay(port, host_port):
            broker = make_broker(kafka_bootstrap)
            async with broker:
                await broker.start()
                await broker.publish(node.model_dump_json(by_alias=True).encode(),
                                     topic=settings.topic(topics.NODES), key=node.kafka_key())
            async with database(real) as uow_factory:
                async def stored() -> bool:
                    async with uow_factory() as uow:
                        return bool(await uow.nodes.load_nodes(settings.cluster))
                await eventually(stored, timeout_s=45, what="the node stored once PostgreSQL is reachable")
            stop.set()
            await asyncio.wait_for(service, 30)
    finally:
        stop.set()
        await asyncio.gather(service, return_exceptions=True)
