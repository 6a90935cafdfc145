"""A service a harness starts logs in to Kafka as its own user where the local stack gave it one, so the stack's
ACLs are tried by the services themselves (harness/kafka_users); otherwise it gets the harness's own settings."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from gpuplace.harness.kafka_users import kafka_env, password_variable
from gpuplace.settings import KafkaAccess

ADMIN = KafkaAccess("127.0.0.1:29092", "SASL_SSL", "PLAIN", "admin", SecretStr("admin-pw"), "/stack/ca.crt")


@pytest.fixture(autouse=True)
def no_stack(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("GPUPLACE_STACK_DIR", str(tmp_path))  # no env file there


def test_a_child_gets_the_harness_settings_in_full() -> None:
    assert kafka_env(ADMIN) == {
        "GPUPLACE_KAFKA_BOOTSTRAP": "127.0.0.1:29092", "GPUPLACE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "GPUPLACE_KAFKA_SASL_MECHANISM": "PLAIN", "GPUPLACE_KAFKA_USERNAME": "admin",
        "GPUPLACE_KAFKA_PASSWORD": "admin-pw", "GPUPLACE_KAFKA_CA_FILE": "/stack/ca.crt"}


def test_a_service_with_a_stack_user_logs_in_as_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(password_variable("cluster-watcher"), "watcher-pw")
    env = kafka_env(ADMIN, "cluster-watcher")
    assert password_variable("cluster-watcher") == "GPUPLACE_STACK_KAFKA_PASSWORD_CLUSTER_WATCHER"
    assert (env["GPUPLACE_KAFKA_USERNAME"], env["GPUPLACE_KAFKA_PASSWORD"]) == ("cluster-watcher", "watcher-pw")
    assert env["GPUPLACE_KAFKA_CA_FILE"] == "/stack/ca.crt"


def test_without_its_password_or_sasl_a_service_keeps_the_harness_user(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kafka_env(ADMIN, "placement")["GPUPLACE_KAFKA_USERNAME"] == "admin"  # the stack gave no password
    monkeypatch.setenv(password_variable("placement"), "placement-pw")
    plain = kafka_env(KafkaAccess("kafka:9092"), "placement")
    assert "GPUPLACE_KAFKA_USERNAME" not in plain and plain["GPUPLACE_KAFKA_SECURITY_PROTOCOL"] == "PLAINTEXT"
    assert kafka_env(ADMIN, "topics")["GPUPLACE_KAFKA_USERNAME"] == "admin"  # not a service with a user
