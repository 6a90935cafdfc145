"""Errors reaching a dependency become one line naming it, its address and its setting (adapters.dependencies)."""

from __future__ import annotations

import asyncpg
import pytest
from aiokafka import errors as kafka_errors
from sqlalchemy import exc as sa_exc

from gpuplace.adapters import dependencies
from gpuplace.adapters.dependencies import Misconfigured, Unreachable, classify, reaching
from gpuplace.adapters.kafka import is_transient

DB = dependencies.postgres("postgresql+asyncpg://gpuplace:s3cret@db.example:6543/fleet")


def test_the_address_of_a_database_url_leaves_the_credentials_out() -> None:
    assert DB.address == "db.example:6543/fleet"
    assert dependencies.postgres("postgresql+asyncpg://u@host/db").address == "host:5432/db"


def test_a_refused_connection_is_unreachable_and_transient() -> None:
    error = classify(DB, ConnectionRefusedError(111, "Connect call failed ('10.0.0.1', 6543)"))
    assert isinstance(error, Unreachable)
    assert str(error) == "cannot reach PostgreSQL at db.example:6543/fleet (GPUPLACE_DATABASE_URL): connection refused"
    assert is_transient(error)  # services wait for it in process


def test_a_driver_error_wrapped_by_sqlalchemy_is_found_under_it() -> None:
    starting = asyncpg.CannotConnectNowError("the database system is starting up")
    wrapped = sa_exc.OperationalError("SELECT 1", {}, starting)
    error = classify(DB, wrapped)
    assert isinstance(error, Unreachable) and str(error).endswith("the database system is starting up")


def test_a_refusal_of_the_settings_is_misconfigured_and_not_transient() -> None:
    error = classify(DB, asyncpg.InvalidPasswordError('password authentication failed for user "gpuplace"'))
    assert isinstance(error, Misconfigured)
    assert str(error) == ('PostgreSQL at db.example:6543/fleet: password authentication failed for user "gpuplace" '
                          "(GPUPLACE_DATABASE_URL)")
    assert not is_transient(error)


def test_kafka_that_does_not_answer() -> None:
    error = classify(dependencies.kafka("k1:9092,k2:9092"), kafka_errors.KafkaConnectionError(
        "Unable to bootstrap from [('k1', 9092, <AddressFamily.AF_INET: 2>)]"))
    assert str(error) == "cannot reach Kafka at k1:9092,k2:9092 (GPUPLACE_KAFKA_BOOTSTRAP): no broker of the " \
                         "bootstrap list could be connected to (down, or refusing these TLS/SASL settings)"


def test_other_errors_pass_through_unchanged() -> None:
    bug = KeyError("x")
    assert classify(DB, bug) is bug
    with pytest.raises(KeyError), reaching(DB):
        raise bug


def test_reaching_keeps_the_original_as_the_cause() -> None:
    original = ConnectionRefusedError(111, "Connect call failed")
    with pytest.raises(Unreachable) as raised, reaching(DB):
        raise original
    assert raised.value.__cause__ is original
