"""The local stack's Kafka is authenticated and authorized as production's should be (issue 20 added TLS and SASL
settings; issue 40: the stack still listened in plaintext next to them, and any client could write any topic).

Every listener of the stack's broker wants a SASL login (deploy/local/lib/kafka.sh): the clients' SASL_SSL one
on GPUPLACE_KAFKA_BOOTSTRAP, and the controller's and the inter-broker one beside it, which only the broker's own
user opens. Each service logs in as its own user, and deploy/local/kafka/acls.txt is all it may do: only
cluster-watcher writes the pods and nodes topics, only placement the placements topic, a subscriber only reads.
"""

from __future__ import annotations

import asyncio
import logging
import os

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as kafka_errors
from pydantic import SecretStr

from gpuplace.adapters.dependencies import Misconfigured
from gpuplace.adapters.kafka import client_options, ensure_topics, make_broker
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import database
from gpuplace.contracts import topics
from gpuplace.contracts.events import NodeEvent
from gpuplace.harness.kafka_users import password_variable
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import KafkaAccess, KafkaSettings, Settings
from services import runtime
from services.placement import app as placement
from tests.integration.conftest import START_STACK, eventually, run_id

pytestmark = pytest.mark.integration


@pytest.fixture
def admin(kafka_bootstrap: str) -> KafkaAccess:
    """The stack's Kafka as the tests reach it: SASL_SSL, its admin user (tests/integration/conftest)."""
    access = KafkaSettings(kafka_bootstrap=kafka_bootstrap).kafka
    if access.security_protocol != "SASL_SSL":
        pytest.fail(f"Kafka at {kafka_bootstrap} is reached with {access.security_protocol}: the stack's broker "
                    f"must want SASL_SSL; {START_STACK} (a stack started before issue 40: `stack.sh up` again)")
    return access


def as_user(admin: KafkaAccess, user: str, password: str | None = None) -> KafkaAccess:
    """The same broker as another of the stack's users, with its password from the stack's env file."""
    if password is None:
        password = os.environ.get(password_variable(user))
        if not password:
            pytest.fail(f"{password_variable(user)} unset: the stack gives every service a Kafka user; {START_STACK}")
    return KafkaAccess(admin.bootstrap, "SASL_SSL", admin.sasl_mechanism, user, SecretStr(password), admin.ca_file)


async def write(access: KafkaAccess, topic: str) -> None:
    producer = AIOKafkaProducer(**client_options(access), request_timeout_ms=10_000)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"{}", key=b"east/x")
    finally:
        await producer.stop()


async def test_a_plaintext_producer_is_refused_on_every_listener_of_the_default_stack(kafka_bootstrap: str) -> None:
    """No port of the stack's broker takes a client that does not log in: the clients' listener (TLS and SASL),
    the controller's (bootstrap + 1) and the inter-broker one (bootstrap + 2), both SASL for the broker's user."""
    host, _, port = kafka_bootstrap.rpartition(":")
    for address in (kafka_bootstrap, f"{host}:{int(port) + 1}", f"{host}:{int(port) + 2}"):
        producer = AIOKafkaProducer(bootstrap_servers=address, request_timeout_ms=5000)
        with pytest.raises(kafka_errors.KafkaConnectionError, match="Unable to bootstrap"):
            await asyncio.wait_for(producer.start(), 30)
        await producer.stop()


async def test_tls_without_a_login_is_refused(admin: KafkaAccess) -> None:
    tls_only = KafkaAccess(admin.bootstrap, "SSL", ca_file=admin.ca_file)
    producer = AIOKafkaProducer(**client_options(tls_only), request_timeout_ms=5000)
    with pytest.raises(kafka_errors.KafkaConnectionError, match="Unable to bootstrap"):
        await asyncio.wait_for(producer.start(), 30)
    await producer.stop()


async def test_a_wrong_password_is_reported_as_a_refused_login(admin: KafkaAccess,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = as_user(admin, "placement", password="not-the-password")
    with pytest.raises(Misconfigured) as refused:
        await ensure_topics(wrong, [f"gpuplace.pods.v1.login-{run_id()}"])
    assert str(refused.value) == (f"Kafka at {admin.bootstrap}: refused the login for user placement (SASL "
                                  "authentication failed) (GPUPLACE_KAFKA_USERNAME, GPUPLACE_KAFKA_PASSWORD)")
    assert "not-the-password" not in "\n".join(r.getMessage() for r in caplog.records)


async def test_each_service_writes_only_its_own_topics_and_a_subscriber_only_reads(admin: KafkaAccess) -> None:
    run = run_id()
    pods, placements = f"{topics.PODS}.acl-{run}", f"{topics.PLACEMENTS}.acl-{run}"
    await ensure_topics(admin, [pods, placements], partitions=1)
    await write(as_user(admin, "cluster-watcher"), pods)
    await write(as_user(admin, "placement"), placements)
    refused = [("subscriber", pods), ("placement", pods), ("cluster-watcher", placements),
               ("subscriber", placements), ("gpu-agent", pods), ("telemetry-ingest", placements)]
    for user, topic in refused:
        with pytest.raises(kafka_errors.TopicAuthorizationFailedError):
            await write(as_user(admin, user), topic)
    # the subscriber reads what placement wrote (a group-less consumer: its own groups are its business)
    reader = AIOKafkaConsumer(placements, **client_options(as_user(admin, "subscriber")), group_id=None,
                              auto_offset_reset="earliest")
    await reader.start()
    try:
        batch = await reader.getmany(timeout_ms=10_000)
    finally:
        await reader.stop()
    assert [r.value for records in batch.values() for r in records] == [b"{}"]


async def test_placement_runs_end_to_end_as_its_own_user_and_never_logs_the_password(
        admin: KafkaAccess, database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """placement's admin client, consumer and producer, as user `placement`, on what cluster-watcher's user
    wrote: the ACL table is enough for the service, and no log line carries a password."""
    caplog.set_level(logging.DEBUG)
    run = run_id()
    own = as_user(admin, "placement")
    settings = Settings(**own.as_settings(), database_url=database_url, cluster=f"east-{run}",
                        topic_suffix=f".sasl-{run}", kubeconfig=next(iter(cluster_kubeconfigs().values())),
                        defrag_enabled=False)
    await migrate.upgrade_async(database_url)
    await ensure_topics(admin, [settings.topic(t) for t in topics.ALL_TOPICS])
    stop = asyncio.Event()
    service = asyncio.create_task(runtime.keep_running(placement.run, settings, stop))
    watcher = as_user(admin, "cluster-watcher")
    try:
        node = NodeEvent(cluster=settings.cluster, kind="upsert", name="n1", cpu_milli=1000, memory_mib=1024)
        broker = make_broker(watcher)
        async with broker:
            await broker.start()
            await broker.publish(node.model_dump_json(by_alias=True).encode(), topic=settings.topic(topics.NODES),
                                 key=node.kafka_key())
        async with database(settings) as uow_factory:
            async def stored() -> bool:
                async with uow_factory() as uow:
                    return bool(await uow.nodes.load_nodes(settings.cluster))
            await eventually(stored, timeout_s=60, what="the node cluster-watcher's user sent, stored by placement")
        assert not service.done()
    finally:
        stop.set()
        await asyncio.gather(service, return_exceptions=True)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for access in (own, watcher):
        secret = access.password.get_secret_value() if access.password else "unset"
        assert secret not in logged and secret not in repr(settings)
    # aiokafka logs the SASL handshake at DEBUG: the line is there, with the password written as ***
    assert any("SaslAuthenticateRequest" in r.getMessage() and "***" in r.getMessage() for r in caplog.records)
