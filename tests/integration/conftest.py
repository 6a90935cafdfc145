"""Fixtures of the integration tests: real Kafka, PostgreSQL and kube-apiservers, found, never faked.

Where each service comes from, first found:
  1. the process environment (GPUPLACE_KAFKA_BOOTSTRAP, GPUPLACE_DATABASE_URL, KUBECONFIG and
     GPUPLACE_KUBECONFIG_<CLUSTER>), to point the tests at services someone already runs;
  2. ``$GPUPLACE_STACK_DIR/env`` (default /tmp/gpuplace-stack/env), written by ``deploy/local/stack.sh up``,
     which ``make test`` runs first;
  3. for Kafka and PostgreSQL only, a testcontainers container, and only when a Docker engine answers a ping
     (no container runs KWOK, so the clusters always come from 1 or 2).
A service found nowhere, or found but not answering, fails the test with the reason (``pytest.fail``): a skipped
integration test would let CI pass while testing nothing.

Tests share the services, so each one names what it creates uniquely (``unique_name``) and removes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import aiohttp
import asyncpg
import pytest
from kubernetes_asyncio import client as kube_client
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client.rest import ApiException
from sqlalchemy import make_url

from gpuplace.adapters.kafka import delete_topics, list_topics
from gpuplace.contracts import topics
from gpuplace.harness.pipeline_run import SIMULATED
from gpuplace.harness.stack_env import cluster_kubeconfigs, resolve, stack_dir, stack_env

T = TypeVar("T")

START_STACK = "start it with `bash deploy/local/stack.sh up` (or `make stack-up`)"


def _kafka_from_stack() -> None:
    """The stack's Kafka settings (its SASL_SSL listener, its admin user, each service's password) into this
    process's environment, as sourcing its env file does, unless the environment names a Kafka already.

    The stack's broker has no unauthenticated listener (issue 40). Every Kafka client of the tests, whether a
    Settings(), a bare bootstrap string (adapters/kafka) or a `gpuplace` child process, then logs in as a
    service would; a test that means another user says so (test_kafka_security)."""
    if os.environ.get("GPUPLACE_KAFKA_BOOTSTRAP"):
        return
    for name, value in stack_env().items():
        if name.startswith(("GPUPLACE_KAFKA_", "GPUPLACE_STACK_KAFKA_")):
            os.environ.setdefault(name, value)


_kafka_from_stack()


_ISSUED: set[str] = set()  # every unique_name of this session: its topics are the ones it may delete


def run_id() -> str:
    """A short id for a test's run (topic suffixes, cluster names), recorded like unique_name's names."""
    name = uuid.uuid4().hex[:6]
    _ISSUED.add(name)
    return name


def unique_name(prefix: str) -> str:
    """A DNS-1123-safe name no other test (or earlier run) uses."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    _ISSUED.add(name)
    return name


async def eventually(probe: Callable[[], Awaitable[T | None]], *, timeout_s: float = 30.0, what: str) -> T:
    """Poll ``probe`` every 0.2 s until it returns something other than None/False; fail after timeout_s."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = await probe()
        if value is not None and value is not False:
            return value
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")
        await asyncio.sleep(0.2)


async def equals(value: Awaitable[Any], expected: Any) -> bool:
    """`eventually(lambda: equals(read(), x))`: a probe that is true once the awaited value is `expected`."""
    return (await value) == expected


def _docker_answers() -> bool:
    try:
        import docker

        docker_client = docker.from_env(timeout=3)
        try:
            return bool(docker_client.ping())
        finally:
            docker_client.close()
    except Exception:  # no engine, no socket, no permission: all mean "no Docker here"
        return False


def _tcp_answers(host_port: str, timeout_s: float = 5.0) -> str | None:
    """None when something accepts connections at the first HOST:PORT of a bootstrap list, else the error."""
    host, _, port = host_port.split(",")[0].strip().rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return None
    except (OSError, ValueError) as error:
        return str(error)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    bootstrap = resolve("GPUPLACE_KAFKA_BOOTSTRAP")
    container = None
    if not bootstrap and _docker_answers():
        from testcontainers.community.kafka import KafkaContainer

        container = KafkaContainer().with_kraft().start()
        bootstrap = container.get_bootstrap_server()
    if not bootstrap:
        pytest.fail(f"no Kafka: GPUPLACE_KAFKA_BOOTSTRAP unset, no {stack_dir()}/env, no Docker; {START_STACK}")
    error = _tcp_answers(bootstrap)
    if error:
        pytest.fail(f"Kafka at {bootstrap} does not answer ({error}); {START_STACK}")
    before = _in_thread(list_topics(bootstrap))
    yield bootstrap
    if container is not None:
        container.stop()
    else:
        _in_thread(delete_topics(bootstrap, _left_by_tests(before, _in_thread(list_topics(bootstrap)))))


def _in_thread(work: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end from a sync fixture, on a loop of its own that leaves pytest-asyncio's alone."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work).result()


def _left_by_tests(before: set[str], after: set[str]) -> list[str]:
    """Topics this session created (`gpuplace.pods.v1.poison-…`, `smoke.kafka-…`), to delete at its end.

    Each test names its topics uniquely and a full run creates hundreds; a broker keeping them all restarts
    slowly (minutes once thousands of partitions add up), which the outage tests and the chaos bench then
    measure. Only topics named after a `unique_name` of this session go: another session sharing the broker
    (a bench, a second test run) keeps its own, as do Kafka's (`__…`) and gpuplace's unsuffixed topics, and
    `.run-` topics, a PipelineRun's, which deletes its own.
    """
    return sorted(t for t in after - before
                  if not t.startswith("__") and t not in topics.ALL_TOPICS and ".run-" not in t
                  and any(name in t for name in _ISSUED))


def asyncpg_dsn(url: str) -> str:
    """asyncpg speaks postgresql://; SQLAlchemy's URL names the driver."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


@pytest.fixture(scope="session")
async def database_url() -> AsyncIterator[str]:
    """A postgresql+asyncpg:// URL, checked to answer, whose role may create databases (the stack's can)."""
    url = resolve("GPUPLACE_DATABASE_URL")
    container = None
    if not url and _docker_answers():
        from testcontainers.community.postgres import PostgresContainer

        container = PostgresContainer("postgres:15", driver="asyncpg").start()
        url = container.get_connection_url()
    if not url:
        pytest.fail(f"no PostgreSQL: GPUPLACE_DATABASE_URL unset, no {stack_dir()}/env, no Docker; {START_STACK}")
    try:
        connection = await asyncpg.connect(asyncpg_dsn(url), timeout=10)
    except (TimeoutError, OSError, asyncpg.PostgresError) as error:
        pytest.fail(f"PostgreSQL at {url.split('@')[-1]} does not answer ({error!r}); {START_STACK}")
    await connection.close()
    yield url
    if container is not None:
        container.stop()


@pytest.fixture
async def fresh_database(database_url: str) -> AsyncIterator[str]:
    """A new, empty database of the test's own, owned by the stack's role (not migrated: a test that needs the
    schema migrates it); dropped after the test. For tests whose processes must see nothing else's rows, or that
    must not depend on the schema another branch left in the shared database."""
    name = unique_name("db").replace("-", "_")
    admin = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield make_url(database_url).set(database=name).render_as_string(hide_password=False)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture(scope="session")
async def kube_clusters() -> AsyncIterator[dict[str, kube_client.ApiClient]]:
    """cluster name -> ApiClient for every cluster of the stack (GPUPLACE_STACK_CLUSTERS), checked to answer."""
    kubeconfigs = cluster_kubeconfigs()
    if not kubeconfigs:
        pytest.fail(f"no cluster: KUBECONFIG, GPUPLACE_KUBECONFIG_<CLUSTER> unset, no {stack_dir()}/env; {START_STACK}")
    clients: dict[str, kube_client.ApiClient] = {}
    try:
        for name, path in kubeconfigs.items():
            try:
                api = await kube_config.new_client_from_config(config_file=path)
            except (OSError, kube_config.ConfigException) as error:
                pytest.fail(f"cluster {name}: cannot load kubeconfig {path} ({error}); {START_STACK}")
            clients[name] = api
            try:
                await kube_client.VersionApi(api).get_code(_request_timeout=10)
            except (TimeoutError, OSError, aiohttp.ClientError, ApiException) as error:
                pytest.fail(f"cluster {name}: apiserver in {path} does not answer ({error!r}); {START_STACK}")
        yield clients
    finally:
        for api in clients.values():
            await api.close()


@pytest.fixture(scope="session")
def kube(kube_clusters: dict[str, kube_client.ApiClient]) -> kube_client.ApiClient:
    """The first cluster's client (KUBECONFIG's cluster when the stack wrote the environment)."""
    return next(iter(kube_clusters.values()))


@pytest.fixture
async def namespace(kube: kube_client.ApiClient) -> AsyncIterator[str]:
    """A fresh namespace, deleted (with everything in it) after the test."""
    core = kube_client.CoreV1Api(kube)
    name = unique_name("it")
    await core.create_namespace({"metadata": {"name": name, "labels": {"gpuplace.io/test": "integration"}}})
    yield name
    with contextlib.suppress(ApiException):
        await core.delete_namespace(name)


@pytest.fixture
async def gpu_node(kube: kube_client.ApiClient) -> AsyncIterator[dict[str, Any]]:
    """A fake GPU node (8 x 16 GiB V100 by GPU Feature Discovery labels) that KWOK keeps Ready; deleted after."""
    core = kube_client.CoreV1Api(kube)
    name = unique_name("gpu-node")
    gpu_count = 8
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB",
                "nvidia.com/gpu.memory": "16384",
                "nvidia.com/gpu.count": str(gpu_count),
                "type": "kwok",
                **SIMULATED,
            },
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": []},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpu_count)},
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpu_count)},
        },
    }
    await core.create_node(node)
    yield node
    with contextlib.suppress(ApiException):
        await core.delete_node(name)
