"""gpuplace over Kafka's SASL_SSL listener of the local stack (issue 20: no Kafka TLS/SASL settings existed, and
anyone who reached the broker could write forged events).

The stack's broker serves SASL_SSL on its own port: TLS with a certificate of the stack's CA, SASL/PLAIN user
`gpuplace` (deploy/local/lib/kafka.sh). placement runs on it end to end (its admin client, consumer and producer);
a client without TLS, or with a wrong password, is refused; the password appears in no log line.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from gpuplace.adapters.dependencies import Unreachable
from gpuplace.adapters.kafka import ensure_topics, make_broker
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import database
from gpuplace.contracts import topics
from gpuplace.contracts.events import NodeEvent
from gpuplace.harness.stack_env import cluster_kubeconfigs, resolve
from gpuplace.settings import Settings
from services import runtime
from services.placement import app as placement
from tests.integration.conftest import START_STACK, eventually, run_id

pytestmark = pytest.mark.integration


@pytest.fixture
def sasl() -> dict[str, str]:
    names = ("GPUPLACE_STACK_KAFKA_SASL_BOOTSTRAP", "GPUPLACE_STACK_KAFKA_SASL_USERNAME",
             "GPUPLACE_STACK_KAFKA_SASL_PASSWORD", "GPUPLACE_STACK_KAFKA_CA_FILE")
    found = {name: resolve(name) for name in names}
    missing = [name for name, value in found.items() if not value]
    if missing:
        pytest.fail(f"the stack's Kafka SASL_SSL listener is not described ({', '.join(missing)} unset): "
                    f"{START_STACK}; a stack started before it existed needs `stack.sh restart kafka` then `up`")
    return {"kafka_bootstrap": found[names[0]], "kafka_security_protocol": "SASL_SSL",
            "kafka_sasl_mechanism": "PLAIN", "kafka_username": found[names[1]], "kafka_password": found[names[2]],
            "kafka_ca_file": found[names[3]]}


async def test_placement_runs_end_to_end_over_sasl_ssl_and_never_logs_the_password(
        sasl: dict[str, str], database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    run = run_id()
    settings = Settings(**sasl, database_url=database_url, cluster=f"east-{run}", topic_suffix=f".sasl-{run}",
                        kubeconfig=next(iter(cluster_kubeconfigs().values())), defrag_enabled=False)
    await migrate.upgrade_async(database_url)
    await ensure_topics(settings.kafka, [settings.topic(t) for t in topics.ALL_TOPICS])
    stop = asyncio.Event()
    service = asyncio.create_task(runtime.keep_running(placement.run, settings, stop))
    try:
        node = NodeEvent(cluster=settings.cluster, kind="upsert", name="n1", cpu_milli=1000, memory_mib=1024)
        broker = make_broker(settings.kafka)
        async with broker:
            await broker.start()
            await broker.publish(node.model_dump_json(by_alias=True).encode(), topic=settings.topic(topics.NODES),
                                 key=node.kafka_key())
        async with database(settings) as uow_factory:
            async def stored() -> bool:
                async with uow_factory() as uow:
                    return bool(await uow.state.load_nodes(settings.cluster))
            await eventually(stored, timeout_s=60, what="the node sent over SASL_SSL stored by placement")
        assert not service.done()
    finally:
        stop.set()
        await asyncio.gather(service, return_exceptions=True)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert sasl["kafka_password"] not in logged and sasl["kafka_password"] not in repr(settings)
    # aiokafka logs the SASL handshake at DEBUG: the line is there, with the password written as ***
    assert any("SaslAuthenticateRequest" in r.getMessage() and "***" in r.getMessage() for r in caplog.records)


async def test_a_client_without_tls_or_with_a_wrong_password_is_refused(
        sasl: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    probe = [f"gpuplace.sasl-probe-{run_id()}"]
    with pytest.raises(Exception):  # noqa: B017,PT011 - plaintext speaks no TLS: aiokafka fails or times out
        await asyncio.wait_for(ensure_topics(sasl["kafka_bootstrap"], probe), 20)
    wrong = Settings(**{**sasl, "kafka_password": "not-the-password"})
    with pytest.raises(Unreachable, match="cannot reach Kafka at .* refusing these TLS/SASL settings"):
        await ensure_topics(wrong.kafka, probe)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "Authentication failed" in logged  # aiokafka says why, once the handshake is refused
    assert "not-the-password" not in logged
