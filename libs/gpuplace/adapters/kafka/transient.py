"""Which errors are transient: the database or Kafka unreachable or busy, not the record bad.

Transient (is_transient), looked for along the exception's explicit causes (`__cause__`, SQLAlchemy's `.orig`):
connection-level OSError (refused, reset, unreachable: not the file-system kinds), TimeoutError, asyncpg's
connection, shutdown, too-many-connections and transaction-rollback (serialization, deadlock) errors, asyncpg
InterfaceErrors other than its client-side DataError, SQLAlchemy's OperationalError / DisconnectionError /
pool TimeoutError / invalidated connections, and aiokafka's connection, timeout and retriable errors.
Everything else is the record's fault or a bug that the record triggers, and is bounded: notably asyncpg's
DataError ("value out of int32 range"), which SQLAlchemy wraps in an InterfaceError, is NOT transient.
"""

from __future__ import annotations

import asyncpg
from aiokafka import errors as kafka_errors
from sqlalchemy import exc as sa_exc

from gpuplace.adapters import dependencies

_FILE_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)
_TRANSIENT = (
    TimeoutError,  # asyncio.TimeoutError is this class since Python 3.11
    asyncpg.PostgresConnectionError, asyncpg.CannotConnectNowError, asyncpg.OperatorInterventionError,
    asyncpg.InsufficientResourcesError, asyncpg.TransactionRollbackError,
    sa_exc.OperationalError, sa_exc.DisconnectionError, sa_exc.TimeoutError,
    kafka_errors.KafkaConnectionError, kafka_errors.KafkaTimeoutError, kafka_errors.NodeNotReadyError,
)
_NOT_TRANSIENT_INTERFACE = (asyncpg.exceptions._base.DataError, asyncpg.exceptions._base.ClientConfigurationError,
                            asyncpg.exceptions._base.UnsupportedClientFeatureError)


def _causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what it wraps (`raise ... from`, SQLAlchemy's `.orig`), each once. Not `__context__`: an error
    raised while handling an unrelated timeout would look transient and retry forever."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo and len(seen) < 16:
        current = todo.pop(0)
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        todo += [current.__cause__, getattr(current, "orig", None)]
    return seen


def is_transient(exc: BaseException) -> bool:
    """True when `exc` says the database or Kafka is unreachable or busy, not that the record is bad
    (the split is in the module docstring)."""
    chain = _causes(exc)
    if any(isinstance(e, _NOT_TRANSIENT_INTERFACE) for e in chain):
        return False  # asyncpg could not encode a value of the record: retrying cannot help
    if any(isinstance(e, dependencies.Misconfigured) for e in chain):
        return False  # a refusal of the settings (a refused Kafka login, raised from the outage it looked like)
    for e in chain:
        if isinstance(e, _TRANSIENT) or getattr(e, "connection_invalidated", False):
            return True
        if isinstance(e, kafka_errors.KafkaError) and getattr(e, "retriable", False):
            return True
        if isinstance(e, asyncpg.InterfaceError | sa_exc.InterfaceError):
            return True  # "connection is closed", "another operation in progress" after a drop
        if isinstance(e, OSError) and not isinstance(e, _FILE_ERRORS):
            return True  # refused, reset, unreachable; asyncpg's "Multiple exceptions" OSError has no errno
    return False


__all__ = ["is_transient"]
