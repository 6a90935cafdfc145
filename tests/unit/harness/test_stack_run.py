"""`settings_from_stack`: the local stack's env file fills only what the environment leaves unset, and the
process environment is left as it was (an in-process command must not leak the stack's KUBECONFIG)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuplace.harness.stack_run import settings_from_stack


@pytest.fixture
def stack_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "env").write_text("export GPUPLACE_KAFKA_BOOTSTRAP=127.0.0.1:39092\n"
                                  "export GPUPLACE_DATABASE_URL='postgresql+asyncpg://u:p@127.0.0.1:1/db'\n"
                                  "export KUBECONFIG=/stack/east.kubeconfig\n")
    monkeypatch.setenv("GPUPLACE_STACK_DIR", str(tmp_path))
    for key in ("GPUPLACE_KAFKA_BOOTSTRAP", "GPUPLACE_DATABASE_URL", "KUBECONFIG", "GPUPLACE_KUBECONFIG"):
        monkeypatch.delenv(key, raising=False)
    return tmp_path


def test_unset_settings_come_from_the_stack_and_the_environment_is_untouched(stack_dir: Path) -> None:
    before = dict(os.environ)
    settings = settings_from_stack()
    assert settings.kafka_bootstrap == "127.0.0.1:39092"
    assert settings.database_url.get_secret_value() == "postgresql+asyncpg://u:p@127.0.0.1:1/db"
    assert settings.kubeconfig == "/stack/east.kubeconfig"
    assert dict(os.environ) == before


def test_the_environment_wins_over_the_stack(stack_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPLACE_KUBECONFIG", "/mine.kubeconfig")
    monkeypatch.setenv("GPUPLACE_KAFKA_BOOTSTRAP", "kafka:9092")
    settings = settings_from_stack()
    assert (settings.kubeconfig, settings.kafka_bootstrap) == ("/mine.kubeconfig", "kafka:9092")


def test_kafka_comes_from_the_stack_whole_or_not_at_all(stack_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stack's broker with the stack's admin user; a bootstrap set in the environment is another broker,
    which the stack's password would not open, so none of the stack's Kafka settings is taken then."""
    (stack_dir / "env").write_text("export GPUPLACE_KAFKA_BOOTSTRAP=127.0.0.1:39092\n"
                                   "export GPUPLACE_KAFKA_SECURITY_PROTOCOL=SASL_SSL\n"
                                   "export GPUPLACE_KAFKA_SASL_MECHANISM=PLAIN\n"
                                   "export GPUPLACE_KAFKA_USERNAME=admin\n"
                                   "export GPUPLACE_KAFKA_PASSWORD=stack-pw\n"
                                   "export GPUPLACE_KAFKA_CA_FILE=/stack/ca.crt\n")
    kafka = settings_from_stack().kafka
    assert (kafka.bootstrap, kafka.security_protocol, kafka.sasl_mechanism, kafka.username, kafka.ca_file) == (
        "127.0.0.1:39092", "SASL_SSL", "PLAIN", "admin", "/stack/ca.crt")
    assert kafka.password is not None and kafka.password.get_secret_value() == "stack-pw"
    monkeypatch.setenv("GPUPLACE_KAFKA_BOOTSTRAP", "kafka:9092")
    kafka = settings_from_stack().kafka
    assert (kafka.bootstrap, kafka.security_protocol, kafka.username) == ("kafka:9092", "PLAINTEXT", None)
