"""Start-up failures are one line naming the setting and the address (issue 15), run as an operator would:
the `gpuplace` command in a subprocess, against the real PostgreSQL, Kafka and apiserver of the local stack.

The line is what `gpuplace: error: ...` prints; nothing of a traceback may appear unless `--debug` is given,
and a password in GPUPLACE_DATABASE_URL never appears at all.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from gpuplace.harness.kafka_users import kafka_env
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import KafkaSettings

pytestmark = pytest.mark.integration
GPUPLACE = [sys.executable, "-m", "gpuplace.cli.app"]


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gpuplace(*args: str, timeout_s: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLACE_")}
    return subprocess.run([*GPUPLACE, *args], env={**clean, **env}, capture_output=True, text=True,
                          timeout=timeout_s, cwd=Path(__file__).parents[2])


def stack_kafka(**changes: str) -> dict[str, str]:
    """The stack's Kafka settings as the environment has them (tests/integration/conftest), for a child whose
    GPUPLACE_* variables are otherwise only its own: services default to SASL_SSL and need a user."""
    return {**kafka_env(KafkaSettings().kafka), **changes}


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("gpuplace: error: ")]
    assert len(errors) == 1, result.stderr[-2000:]
    return errors[0]


def test_migrate_with_the_database_away_names_the_setting_and_the_address() -> None:
    port = closed_port()
    line = error_line(gpuplace("migrate", GPUPLACE_DATABASE_URL=f"postgresql+asyncpg://gpuplace:s3cret@127.0.0.1:{port}/db"))
    assert line == (f"gpuplace: error: cannot reach PostgreSQL at 127.0.0.1:{port}/db (GPUPLACE_DATABASE_URL): "
                    "connection refused")


def test_a_wrong_password_or_database_is_named_and_the_password_is_not(database_url: str) -> None:
    url = make_url(database_url)
    wrong_password = url.set(password="n0t-the-password").render_as_string(hide_password=False)
    line = error_line(gpuplace("migrate", GPUPLACE_DATABASE_URL=wrong_password))
    assert line.startswith(f"gpuplace: error: PostgreSQL at {url.host}:{url.port}/{url.database}: ")
    assert "password authentication failed" in line and line.endswith("(GPUPLACE_DATABASE_URL)")
    assert "n0t-the-password" not in line
    no_database = url.set(database="gpuplace_no_such_db").render_as_string(hide_password=False)
    line = error_line(gpuplace("migrate", GPUPLACE_DATABASE_URL=no_database))
    assert 'database "gpuplace_no_such_db" does not exist' in line


def test_up_with_kafka_away_names_the_bootstrap_setting(database_url: str) -> None:
    port = closed_port()
    kafka = stack_kafka(GPUPLACE_KAFKA_BOOTSTRAP=f"127.0.0.1:{port}")
    result = gpuplace("up", GPUPLACE_DATABASE_URL=database_url, **kafka)
    assert error_line(result) == (f"gpuplace: error: cannot reach Kafka at 127.0.0.1:{port} "
                                  "(GPUPLACE_KAFKA_BOOTSTRAP): no broker of the bootstrap list could be "
                                  "connected to (down, or refusing these TLS/SASL settings)")


def test_cluster_watcher_without_its_kubeconfig_file(database_url: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    missing = tmp_path / "east.kubeconfig"
    result = gpuplace("service", "cluster-watcher", GPUPLACE_KUBECONFIG=str(missing),
                      GPUPLACE_DATABASE_URL=database_url, **stack_kafka(GPUPLACE_KAFKA_BOOTSTRAP=kafka_bootstrap))
    assert error_line(result) == (f"gpuplace: error: kubeconfig at {missing}: no such file: {missing} "
                                  "(KUBECONFIG, GPUPLACE_KUBECONFIG or GPUPLACE_KUBECONFIGS)")


def test_cluster_watcher_whose_lease_namespace_does_not_exist(kafka_bootstrap: str, kube_clusters: dict) -> None:
    run = uuid.uuid4().hex[:6]
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    result = gpuplace("service", "cluster-watcher", GPUPLACE_KUBECONFIG=kubeconfig, GPUPLACE_CLUSTER=f"east-{run}",
                      **stack_kafka(GPUPLACE_KAFKA_BOOTSTRAP=kafka_bootstrap),
                      GPUPLACE_LEADER_ELECTION_NAMESPACE=f"absent-{run}",
                      GPUPLACE_TOPIC_SUFFIX=f".startup-{run}", GPUPLACE_NODE_LABEL_SELECTOR=f"gpuplace.io/fleet={run}")
    assert error_line(result) == (
        f"gpuplace: error: leader election at cluster east-{run}: cannot create Lease absent-{run}/gpuplace-cluster-"
        f"watcher-east-{run}-startup-{run}: namespace absent-{run} does not exist (namespaces \"absent-{run}\" not "
        "found); create it, or elect in a namespace that exists (GPUPLACE_LEADER_ELECTION_NAMESPACE; "
        "GPUPLACE_LEADER_ELECTION=false runs one replica without a Lease)")


def test_invalid_settings_are_listed_by_variable_without_their_values() -> None:
    result = gpuplace("service", "placement", GPUPLACE_HANDLER_ATTEMPTS="0", GPUPLACE_LOG_LEVEL="loud",
                      GPUPLACE_DATABASE_URL="not a url s3cret")
    line = error_line(result)
    assert line.startswith("gpuplace: error: invalid settings: ")
    assert "GPUPLACE_HANDLER_ATTEMPTS: Input should be greater than or equal to 1" in line
    assert "GPUPLACE_LOG_LEVEL: Input should be 'DEBUG'" in line
    assert "loud" not in line and "s3cret" not in line


def test_debug_shows_the_traceback_with_the_cause() -> None:
    port = closed_port()
    result = gpuplace("--debug", "migrate", GPUPLACE_DATABASE_URL=f"postgresql+asyncpg://u:p@127.0.0.1:{port}/db")
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ConnectionRefusedError" in result.stderr
    assert f"Unreachable: cannot reach PostgreSQL at 127.0.0.1:{port}/db" in result.stderr


def test_a_service_waiting_for_its_database_says_which_in_json_lines() -> None:
    """Services wait for a dependency in process (services/runtime.keep_running); each try is one log line,
    and with GPUPLACE_LOG_FORMAT=json each line is a JSON object."""
    import json

    port = closed_port()
    kubeconfig = next(iter(cluster_kubeconfigs().values()))  # CI finds the stack's through its env file only
    process = subprocess.Popen([*GPUPLACE, "service", "placement"], stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "GPUPLACE_LOG_FORMAT": "json", "GPUPLACE_KUBECONFIG": kubeconfig,
                                    "GPUPLACE_DATABASE_URL": f"postgresql+asyncpg://u:p@127.0.0.1:{port}/db"})
    try:
        assert process.stderr is not None
        for line in process.stderr:
            entry = json.loads(line)
            if entry["logger"] == "services.runtime":
                break
    finally:
        process.kill()
        process.wait()
    assert entry["level"] == "WARNING"
    assert f"cannot reach PostgreSQL at 127.0.0.1:{port}/db (GPUPLACE_DATABASE_URL): connection refused" in \
        entry["message"]
    assert set(entry) == {"time", "level", "logger", "message"}


def test_a_service_without_its_kubeconfig_says_which_settings(database_url: str) -> None:
    # KUBECONFIG emptied, not just left unset: the developer's shell may have the stack's env file sourced
    result = gpuplace("service", "placement", GPUPLACE_DATABASE_URL=database_url, KUBECONFIG="", **stack_kafka())
    assert error_line(result) == ("gpuplace: error: placement needs KUBECONFIG or GPUPLACE_KUBECONFIGS for the "
                                  "clusters it binds in")


def test_a_service_given_a_wrong_kafka_password_says_the_login_was_refused(kafka_bootstrap: str,
                                                                            database_url: str) -> None:
    """Not "cannot reach Kafka": the broker answered and refused the user (issue 40), so the service stops at
    once and names the user, never the password."""
    kubeconfig = next(iter(cluster_kubeconfigs().values()))
    kafka = stack_kafka(GPUPLACE_KAFKA_USERNAME="placement", GPUPLACE_KAFKA_PASSWORD="n0t-the-password")
    result = gpuplace("service", "placement", GPUPLACE_DATABASE_URL=database_url, GPUPLACE_KUBECONFIG=kubeconfig,
                      GPUPLACE_TOPIC_SUFFIX=f".login-{uuid.uuid4().hex[:6]}", **kafka)
    assert error_line(result) == (f"gpuplace: error: Kafka at {kafka_bootstrap}: refused the login for user "
                                  "placement (SASL authentication failed) (GPUPLACE_KAFKA_USERNAME, "
                                  "GPUPLACE_KAFKA_PASSWORD)")
    assert "n0t-the-password" not in result.stderr


def test_a_service_given_no_kafka_protocol_asks_for_a_user_rather_than_going_plaintext(database_url: str) -> None:
    """`gpuplace service` and `gpuplace up` default to SASL_SSL: with no Kafka settings at all they stop and
    name the variables, instead of connecting without authentication (issue 40)."""
    result = gpuplace("up", GPUPLACE_DATABASE_URL=database_url)
    line = error_line(result)
    assert "GPUPLACE_KAFKA_SECURITY_PROTOCOL=SASL_SSL needs GPUPLACE_KAFKA_USERNAME and GPUPLACE_KAFKA_PASSWORD" in line
