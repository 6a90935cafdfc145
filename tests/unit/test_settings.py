"""Settings refuse an incomplete Kafka security configuration at start-up, with the variable to set, and keep
the Kafka password out of repr() like the database's; the database URL providers hand out (postgresql://) is taken,
and a malformed one, or GPUPLACE_KUBECONFIGS that is not JSON, is one line naming the variable."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuplace.adapters.kafka import client_options
from gpuplace.cli.errors import one_line
from gpuplace.settings import Settings


def test_sasl_without_credentials_names_the_missing_variables():
    with pytest.raises(ValidationError, match="needs GPUPLACE_KAFKA_USERNAME and GPUPLACE_KAFKA_PASSWORD"):
        Settings(kafka_security_protocol="SASL_SSL")


def test_tls_files_without_a_tls_protocol_are_refused():
    with pytest.raises(ValidationError, match="does not use TLS"):
        Settings(kafka_ca_file="/etc/ssl/ca.crt")
    with pytest.raises(ValidationError, match="go together"):
        Settings(kafka_security_protocol="SSL", kafka_cert_file="/etc/ssl/client.crt")


def test_the_kafka_password_is_never_in_the_settings_repr_and_reaches_only_the_client():
    settings = Settings(kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_mechanism="SCRAM-SHA-256",
                        kafka_username="gpuplace", kafka_password="s3cret-Kafka")
    assert "s3cret-Kafka" not in repr(settings) and "s3cret-Kafka" not in repr(settings.kafka)
    options = client_options(settings.kafka)
    assert options == {"bootstrap_servers": "127.0.0.1:29092", "security_protocol": "SASL_PLAINTEXT",
                       "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "gpuplace",
                       "sasl_plain_password": "s3cret-Kafka"}


def test_a_bare_bootstrap_list_is_reached_with_the_environments_kafka_security(monkeypatch, tmp_path):
    """Tests and a bench's probes pass a bootstrap string; the stack's broker wants a login, so the string gets
    the GPUPLACE_KAFKA_* settings a service would have (adapters/kafka), never a silent PLAINTEXT."""
    assert client_options("kafka:9092") == {"bootstrap_servers": "kafka:9092", "security_protocol": "PLAINTEXT"}
    monkeypatch.setenv("GPUPLACE_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("GPUPLACE_KAFKA_SASL_MECHANISM", "PLAIN")
    monkeypatch.setenv("GPUPLACE_KAFKA_USERNAME", "admin")
    monkeypatch.setenv("GPUPLACE_KAFKA_PASSWORD", "env-pw")
    assert client_options("kafka:9092") == {"bootstrap_servers": "kafka:9092", "security_protocol": "SASL_PLAINTEXT",
                                            "sasl_mechanism": "PLAIN", "sasl_plain_username": "admin",
                                            "sasl_plain_password": "env-pw"}


def test_services_default_to_sasl_ssl_unless_a_protocol_is_named(monkeypatch):
    """`gpuplace service` and `gpuplace up` (cli/services.service_settings): no protocol given is SASL_SSL, which
    without a user stops at start-up naming the variables; a protocol given by name is kept."""
    from gpuplace.cli.services import service_settings

    with pytest.raises(ValidationError, match="SASL_SSL needs GPUPLACE_KAFKA_USERNAME and GPUPLACE_KAFKA_PASSWORD"):
        service_settings()
    monkeypatch.setenv("GPUPLACE_KAFKA_USERNAME", "placement")
    monkeypatch.setenv("GPUPLACE_KAFKA_PASSWORD", "pw")
    assert service_settings().kafka_security_protocol == "SASL_SSL"
    monkeypatch.setenv("GPUPLACE_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")
    assert service_settings().kafka_security_protocol == "PLAINTEXT"


def test_a_missing_ca_file_is_named():
    settings = Settings(kafka_security_protocol="SSL", kafka_ca_file="/nonexistent/ca.crt")
    with pytest.raises(ValueError, match="/nonexistent/ca.crt does not exist"):
        client_options(settings.kafka)


def test_retention_defaults_outlast_kafkas_default_log_and_bad_values_name_their_variable(monkeypatch):
    from gpuplace.usecases.ports import Retained
    from services.placement.app import pruner
    from tests.fakes import FakeUnitOfWorkFactory

    settings = Settings()
    # Kafka keeps a record up to retention.ms + segment.ms after its append: 7 + 7 days by default
    assert settings.retention_processed_events_days > 14
    policy = pruner(settings, FakeUnitOfWorkFactory()).policy
    assert policy.keep_s[Retained.DELETED_PODS] == policy.keep_s[Retained.DECISIONS] == 14 * 86_400
    monkeypatch.setenv("GPUPLACE_RETENTION_DECISIONS_DAYS", "-1")
    with pytest.raises(ValidationError, match="retention_decisions_days"):
        Settings()
    monkeypatch.setenv("GPUPLACE_RETENTION_DECISIONS_DAYS", "0")  # 0: kept for ever
    assert Retained.DECISIONS not in pruner(Settings(), FakeUnitOfWorkFactory()).policy.keep_s


# The URL forms PostgreSQL providers hand out, and what asyncpg's dialect is given for them.
@pytest.mark.parametrize("given, used", [
    ("postgresql://app:pw@db.example.com:5432/gpuplace", "postgresql+asyncpg://app:pw@db.example.com:5432/gpuplace"),
    ("postgres://app:pw@db.example.com/gpuplace", "postgresql+asyncpg://app:pw@db.example.com/gpuplace"),
    ("postgresql://app:p%40ss@db:5432/gpuplace?sslmode=verify-full",
     "postgresql+asyncpg://app:p%40ss@db:5432/gpuplace?ssl=verify-full"),
    ("postgresql+asyncpg://app:pw@db/gpuplace?ssl=require", "postgresql+asyncpg://app:pw@db/gpuplace?ssl=require"),
])
def test_a_plain_postgresql_url_is_taken_as_asyncpg(given, used):
    assert Settings(database_url=given).database_url.get_secret_value() == used


@pytest.mark.parametrize("variable, value, message", [
    ("GPUPLACE_DATABASE_URL", "db.example.com:5432/gpuplace", "not a database URL; expected postgresql+asyncpg://"),
    ("GPUPLACE_DATABASE_URL", "postgresql://app:hunter2@db:port/gpuplace", "not a database URL"),
    ("GPUPLACE_DATABASE_URL", "mysql://app:hunter2@db/gpuplace", "mysql:// is not a PostgreSQL URL"),
    ("GPUPLACE_DATABASE_URL", "postgresql://app:hunter2@db/gpuplace?sslmode=require&channel_binding=require",
     "channel_binding"),
    ("GPUPLACE_KUBECONFIGS", '{"east": "/etc/east.kubeconfig"', "not JSON"),
    ("GPUPLACE_KUBECONFIGS", '["/etc/east.kubeconfig"]', "Input should be a valid dictionary"),
])
def test_a_malformed_setting_is_one_line_naming_its_variable_and_not_the_password(monkeypatch, variable, value,
                                                                                  message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    line = one_line(caught.value)
    assert line.startswith(f"invalid settings: {variable}: ") and message in line
    assert "hunter2" not in line and "\n" not in line


def test_kubeconfigs_json_is_read(monkeypatch):
    monkeypatch.setenv("GPUPLACE_KUBECONFIGS", '{"east": "/etc/east.kubeconfig", "west": "/etc/west.kubeconfig"}')
    assert Settings().cluster_kubeconfigs() == {"east": "/etc/east.kubeconfig", "west": "/etc/west.kubeconfig"}
