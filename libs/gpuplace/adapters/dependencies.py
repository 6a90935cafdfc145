"""What gpuplace depends on (PostgreSQL, Kafka, a cluster's apiserver), and errors that say which one failed.

A failure to connect used to surface as the client library's own exception at the end of a 500-line traceback:
`ConnectionRefusedError: Connect call failed ('127.0.0.1', 1)` names neither the database nor the setting that
points there. Each place that first reaches a dependency wraps the call in `reaching(dependency)`, which turns
that into one line an operator can act on:

    cannot reach PostgreSQL at 127.0.0.1:1/gpuplace (GPUPLACE_DATABASE_URL): connection refused

Two kinds, because services treat them differently (services/runtime.keep_running):
- `Unreachable` (a ConnectionError, so `adapters.kafka.is_transient` holds): nothing answered, or it answered
  that it cannot serve yet. A service waits for the dependency in process; a one-shot command exits.
- `Misconfigured`: it answered and refused what the settings say (bad password, no such database, a
  kubeconfig file that is not there). Retrying cannot help: a service exits with that line.

Addresses never include credentials: a database URL is shown as host:port/database only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import asyncpg
from aiokafka import errors as kafka_errors
from kubernetes_asyncio.config import ConfigException
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from gpuplace.settings import KafkaAccess


@dataclass(frozen=True)
class Dependency:
    """One service gpuplace needs: what it is, where, and the setting that says where."""

    name: str
    address: str
    setting: str


class Unreachable(ConnectionError):
    """Nothing answered at the dependency's address (or it answered that it cannot serve yet)."""

    def __init__(self, dependency: Dependency, reason: str) -> None:
        super().__init__(f"cannot reach {dependency.name} at {dependency.address} ({dependency.setting}): {reason}")
        self.dependency = dependency


class Misconfigured(RuntimeError):
    """The dependency answered and refused what the settings ask of it; retrying cannot help."""

    def __init__(self, dependency: Dependency, reason: str) -> None:
        super().__init__(f"{dependency.name} at {dependency.address}: {reason} ({dependency.setting})")
        self.dependency = dependency


def postgres(database_url: str) -> Dependency:
    url = make_url(database_url)
    return Dependency("PostgreSQL", f"{url.host or 'localhost'}:{url.port or 5432}/{url.database or ''}",
                      "GPUPLACE_DATABASE_URL")


def kafka(access: KafkaAccess | str) -> Dependency:
    bootstrap = access if isinstance(access, str) else access.bootstrap
    return Dependency("Kafka", bootstrap, "GPUPLACE_KAFKA_BOOTSTRAP")


def kafka_login(access: KafkaAccess) -> Dependency:
    """Kafka when it refused the login: the settings to fix are the user and password, not the address."""
    return Dependency("Kafka", access.bootstrap, "GPUPLACE_KAFKA_USERNAME, GPUPLACE_KAFKA_PASSWORD")


def kubernetes(kubeconfig: str) -> Dependency:
    """Only reading the kubeconfig is wrapped: the apiserver itself is first called by the informers, which retry."""
    return Dependency("kubeconfig", kubeconfig, "KUBECONFIG, GPUPLACE_KUBECONFIG or GPUPLACE_KUBECONFIGS")


# Answers that name a wrong setting, not an outage.
_REFUSALS = (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError,
             asyncpg.InvalidCatalogNameError, kafka_errors.AuthenticationFailedError,
             kafka_errors.UnsupportedSaslMechanismError, FileNotFoundError, PermissionError, IsADirectoryError,
             ConfigException)
_OUTAGES = (OSError, TimeoutError, asyncpg.CannotConnectNowError, asyncpg.PostgresConnectionError,
            kafka_errors.KafkaConnectionError, kafka_errors.NodeNotReadyError, kafka_errors.KafkaTimeoutError)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what it was raised from (SQLAlchemy keeps the driver's error in `.orig` as well)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        orig = getattr(current, "orig", None)
        current = current.__cause__ or (orig if isinstance(orig, BaseException) else None)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError) or "Connect call failed" in str(exc):
        return "connection refused"
    if isinstance(exc, kafka_errors.KafkaConnectionError) and "bootstrap" in str(exc):
        # aiokafka raises this one error whether the brokers are down or refused the TLS/SASL handshake
        # (it logs which, per broker, just before)
        return "no broker of the bootstrap list could be connected to (down, or refusing these TLS/SASL settings)"
    if isinstance(exc, FileNotFoundError):
        return f"no such file: {exc.filename}" if exc.filename else "no such file"
    if isinstance(exc, TimeoutError) and not str(exc):
        return "no answer (timed out)"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def classify(dependency: Dependency, exc: BaseException) -> BaseException:
    """`Misconfigured` or `Unreachable` for an error reaching `dependency`; `exc` itself if it is neither
    (a bug, or a failure after the connection that the caller should see as it is)."""
    chain = list(_chain(exc))
    if any(isinstance(e, Unreachable | Misconfigured) for e in chain):
        return exc
    for e in chain:
        if isinstance(e, _REFUSALS):
            return Misconfigured(dependency, _reason(e))
    for e in reversed(chain):  # the driver's own error words it best: SQLAlchemy's adds SQL and a link
        if isinstance(e, _OUTAGES) or isinstance(e, sa_exc.OperationalError | sa_exc.InterfaceError):
            return Unreachable(dependency, _reason(e))
    return exc


@contextlib.contextmanager
def reaching(dependency: Dependency) -> Iterator[None]:
    """Re-raise a failure to reach `dependency` as `Unreachable` or `Misconfigured` (from the original, which
    `--debug` shows). Works around `await` too: `with reaching(dep): await connect()`."""
    try:
        yield
    except Exception as exc:
        translated = classify(dependency, exc)
        if translated is exc:
            raise
        raise translated from exc


__all__ = ["Dependency", "Misconfigured", "Unreachable", "classify", "kafka", "kafka_login", "kubernetes", "postgres",
           "reaching"]
