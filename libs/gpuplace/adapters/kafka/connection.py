"""How gpuplace reaches Kafka: the access settings (bootstrap, TLS, SASL) as aiokafka's options and as
FastStream's security, the broker factory, and the checks that a broker answers.

aiokafka logs every request at DEBUG, the SASL handshake's included: the password in use is redacted from those
logs (_Redact) before any client sends it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
from collections.abc import AsyncIterator
from typing import Required, TypedDict

from aiokafka.helpers import create_ssl_context
from faststream.kafka import KafkaBroker
from faststream.security import BaseSecurity, SASLPlaintext, SASLScram256, SASLScram512

from gpuplace.adapters import dependencies
from gpuplace.adapters.kafka import login
from gpuplace.adapters.kafka.partitioning import cluster_partitioner, key_partitioner
from gpuplace.settings import KafkaAccess, KafkaProtocol, KafkaSettings, SaslMechanism

log = logging.getLogger(__name__)
LINGER_MS = 10
"""How long a producer holds a record for others to share its request (aiokafka's linger_ms; 0 by default there,
5 ms in Kafka's own producer since 4.0, KIP-1030). A watcher in a burst produces a record every few milliseconds,
and each one sent alone paid a whole produce request, TLS write included. At 600 records a second on the local
stack's SASL_SSL listener (bench/producer_linger.py, three rounds): 376/423/397 us of CPU a record at 0 ms,
297/249/261 at 5, 237/226/221 at 10, 179/184/172 at 20. It adds at most 10 ms to a pod's way to its bind (one
produce is on it, the watcher's), against seconds of queueing in a burst."""

# A bare bootstrap list (tests, a bench's probes) is reached with the environment's GPUPLACE_KAFKA_* TLS and SASL
# settings, as a service would be: the local stack, like production, has no unauthenticated listener.
Kafka = KafkaAccess | str


def _access(kafka: Kafka) -> KafkaAccess:
    return KafkaSettings(kafka_bootstrap=kafka).kafka if isinstance(kafka, str) else kafka


def _ssl_context(access: KafkaAccess) -> ssl.SSLContext:
    """Verify the brokers (against `ca_file`, else the system's CAs) and, for mutual TLS, present a certificate."""
    for path in (access.ca_file, access.cert_file, access.key_file):
        if path and not os.path.isfile(path):
            raise ValueError(f"Kafka TLS file {path} does not exist")
    context: ssl.SSLContext = create_ssl_context(cafile=access.ca_file, certfile=access.cert_file,
                                                keyfile=access.key_file)  # typed in aiokafka, which has no py.typed
    return context


class _Redact(logging.Filter):
    """aiokafka logs every request at DEBUG (`aiokafka.conn`), the SASL/PLAIN handshake's included, whose bytes
    carry the password: with GPUPLACE_LOG_LEVEL=DEBUG it would reach the logs. This filter, on that logger
    itself (so it holds whatever handlers the process has), writes *** in place of each password in use."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if any(secret in message for secret in self.secrets):
            for secret in self.secrets:
                message = message.replace(secret, "***")
            record.msg, record.args = message, None
        return True


_REDACT = _Redact()


def _password(access: KafkaAccess) -> str:
    """The SASL password, registered for redaction from aiokafka's request logs before any client sends it."""
    password = access.password.get_secret_value() if access.password else ""
    if password and password not in _REDACT.secrets:
        _REDACT.secrets.add(password)
        logging.getLogger("aiokafka.conn").addFilter(_REDACT)  # adding the same filter twice keeps one
    return password


class ClientOptions(TypedDict, total=False):
    """The keyword arguments of aiokafka's clients that say where Kafka is and how to log in (client_options)."""

    bootstrap_servers: Required[str]
    security_protocol: Required[KafkaProtocol]
    ssl_context: ssl.SSLContext  # with SSL and SASL_SSL
    sasl_mechanism: SaslMechanism  # with SASL_*
    sasl_plain_username: str | None
    sasl_plain_password: str


def client_options(kafka: Kafka) -> ClientOptions:
    """aiokafka keyword arguments (bootstrap, TLS, SASL) for any client: admin, producer, consumer."""
    access = _access(kafka)
    options: ClientOptions = {"bootstrap_servers": access.bootstrap, "security_protocol": access.security_protocol}
    if access.security_protocol.endswith("SSL"):
        options["ssl_context"] = _ssl_context(access)
    if access.security_protocol.startswith("SASL_"):
        options["sasl_mechanism"] = access.sasl_mechanism
        options["sasl_plain_username"] = access.username
        options["sasl_plain_password"] = _password(access)
    return options


def _security(access: KafkaAccess) -> BaseSecurity | None:
    """The same settings in FastStream's terms (https://faststream.ag2.ai/latest/kafka/security/)."""
    tls = access.security_protocol.endswith("SSL")
    context = _ssl_context(access) if tls else None
    if not access.security_protocol.startswith("SASL_"):
        return BaseSecurity(ssl_context=context, use_ssl=True) if tls else None
    sasl = {"PLAIN": SASLPlaintext, "SCRAM-SHA-256": SASLScram256, "SCRAM-SHA-512": SASLScram512}
    return sasl[access.sasl_mechanism](access.username or "", _password(access), ssl_context=context, use_ssl=tls)


def make_broker(kafka: Kafka, *, client_id: str = "gpuplace", by_cluster: bool = True,
                linger_ms: int = LINGER_MS) -> KafkaBroker:
    """A broker whose producer sends every record of a cluster to one partition (what placement needs of the
    pods, nodes and placements topics), or with `by_cluster=False` spreads them by the whole key: telemetry,
    read by stateless ingest workers, should not funnel a large cluster's GPUs through one partition."""
    access = _access(kafka)
    partitioner = cluster_partitioner if by_cluster else key_partitioner
    return KafkaBroker(access.bootstrap, client_id=client_id, enable_idempotence=True, partitioner=partitioner,
                       linger_ms=linger_ms, security=_security(access), logger=log, log_level=logging.DEBUG)


@contextlib.asynccontextmanager
async def reaching(kafka: Kafka) -> AsyncIterator[None]:
    """`dependencies.reaching` for Kafka: brokers that do not answer raise `Unreachable`, and brokers that
    refuse the SASL login `Misconfigured` ("refused the login for user placement (SASL authentication
    failed)"), which aiokafka alone reports as the same "Unable to bootstrap" (adapters/kafka/login)."""
    access = _access(kafka)
    try:
        with dependencies.reaching(dependencies.kafka(access)):
            yield
    except dependencies.Unreachable as exc:
        refused = await login.refusal(access, client_options(access))
        if refused is None:
            raise
        raise dependencies.Misconfigured(dependencies.kafka_login(access), refused) from exc


async def start_broker(broker: KafkaBroker, kafka: Kafka) -> None:
    """`broker.start()`; brokers that do not answer raise `dependencies.Unreachable`, naming the address and
    GPUPLACE_KAFKA_BOOTSTRAP, rather than aiokafka's "Unable to bootstrap" deep in a traceback; a refused
    login raises `dependencies.Misconfigured` naming the user."""
    async with reaching(kafka):
        await broker.start()


async def check_broker(broker: KafkaBroker, timeout_s: float = 2.0) -> None:
    """Raise unless a broker answers `broker`'s admin client within `timeout_s` (a readiness check)."""
    if not await broker.ping(timeout_s):
        raise ConnectionError(f"no Kafka broker answered within {timeout_s:g} s")


__all__ = ["ClientOptions", "Kafka", "check_broker", "client_options", "make_broker", "reaching", "start_broker"]
