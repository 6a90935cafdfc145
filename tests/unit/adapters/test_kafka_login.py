"""A refused SASL login is told from a Kafka that is down (issue 40: a wrong password was reported as "cannot
reach Kafka", and the service waited for a broker that was up). aiokafka's own connection is replaced by one that
fails as the broker would; the integration tests (test_kafka_security, test_startup_errors) use the real one."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import errors as kafka_errors
from pydantic import SecretStr

from gpuplace.adapters import dependencies, kafka
from gpuplace.adapters.kafka import login as kafka_login
from gpuplace.settings import KafkaAccess

SASL = KafkaAccess("kafka-0:9093,kafka-1:9093", "SASL_PLAINTEXT", "SCRAM-SHA-512", "placement", SecretStr("wrong"))


def connection_failing_with(error: BaseException, seen: list[dict[str, Any]]) -> Any:
    async def create_conn(host: str, port: int, **options: Any) -> Any:
        seen.append({"host": host, "port": port, **options})
        raise error
    return create_conn


async def test_a_refused_login_names_the_user_and_never_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    refused = kafka_errors.SaslAuthenticationFailed("Authentication failed: Invalid username or password")
    monkeypatch.setattr(kafka_login, "create_conn", connection_failing_with(refused, seen))
    reason = await kafka_login.refusal(SASL, kafka.client_options(SASL))
    assert reason == "refused the login for user placement (SASL authentication failed)"
    # the first bootstrap broker, logged in as the client would
    assert (seen[0]["host"], seen[0]["port"], seen[0]["sasl_plain_username"]) == ("kafka-0", 9093, "placement")


@pytest.mark.parametrize("error", [ConnectionRefusedError(111, "refused"), TimeoutError(),
                                   kafka_errors.KafkaConnectionError("closed")])
async def test_a_broker_that_does_not_answer_is_no_refusal(monkeypatch: pytest.MonkeyPatch,
                                                           error: BaseException) -> None:
    monkeypatch.setattr(kafka_login, "create_conn", connection_failing_with(error, []))
    assert await kafka_login.refusal(SASL, kafka.client_options(SASL)) is None


async def test_without_sasl_there_is_no_login_to_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(kafka_login, "create_conn", connection_failing_with(OSError(), seen))
    assert await kafka_login.refusal(KafkaAccess("kafka:9092"), {}) is None
    assert seen == []


async def test_reaching_turns_unable_to_bootstrap_into_a_refused_login_a_service_does_not_retry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    refused = kafka_errors.SaslAuthenticationFailed("Authentication failed")
    monkeypatch.setattr(kafka_login, "create_conn", connection_failing_with(refused, []))
    with pytest.raises(dependencies.Misconfigured) as caught:
        async with kafka.reaching(SASL):
            raise kafka_errors.KafkaConnectionError("Unable to bootstrap from [('kafka-0', 9093, 2)]")
    assert str(caught.value) == ("Kafka at kafka-0:9093,kafka-1:9093: refused the login for user placement (SASL "
                                 "authentication failed) (GPUPLACE_KAFKA_USERNAME, GPUPLACE_KAFKA_PASSWORD)")
    assert not kafka.is_transient(caught.value)  # raised from the Unreachable it looked like, yet not retried


async def test_reaching_leaves_an_outage_an_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_login, "create_conn", connection_failing_with(ConnectionRefusedError(), []))
    with pytest.raises(dependencies.Unreachable, match="cannot reach Kafka at kafka-0:9093"):
        async with kafka.reaching(SASL):
            raise kafka_errors.KafkaConnectionError("Unable to bootstrap from [('kafka-0', 9093, 2)]")
