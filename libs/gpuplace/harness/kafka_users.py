"""The Kafka settings a child service process gets from the harness that starts it (bench pipeline, bench chaos,
the tests): the harness's own TLS and SASL settings, and where the local stack gave the service a Kafka user of
its own, that user.

The stack's broker authorizes every request (deploy/local/kafka/acls.txt): cluster-watcher alone may write the
pods and nodes topics, placement alone the placements topic. A service run under its own user is what shows the
table is enough for it; under the harness's admin user it would pass whatever the table says. Children start
from a clean environment (chaos_faults.service_env), so these variables are all they know about Kafka.
"""

from __future__ import annotations

from gpuplace.harness import stack_env
from gpuplace.settings import KafkaAccess

# The services that have a user of their own on the local stack (its name is the service's).
SERVICE_USERS = ("cluster-watcher", "placement", "telemetry-ingest", "latency-ingest", "gpu-agent")


def password_variable(user: str) -> str:
    """Where the stack's env file gives a user's password: GPUPLACE_STACK_KAFKA_PASSWORD_CLUSTER_WATCHER."""
    return "GPUPLACE_STACK_KAFKA_PASSWORD_" + user.upper().replace("-", "_")


def kafka_env(access: KafkaAccess, service: str | None = None) -> dict[str, str]:
    """GPUPLACE_KAFKA_* for a child process: `access` as it is, or, for a `service` the stack gave a user of
    its own (its password in the environment or the stack's env file), the same broker as that user."""
    env = {"GPUPLACE_KAFKA_BOOTSTRAP": access.bootstrap, "GPUPLACE_KAFKA_SECURITY_PROTOCOL": access.security_protocol,
           "GPUPLACE_KAFKA_SASL_MECHANISM": access.sasl_mechanism}
    optional = {"GPUPLACE_KAFKA_USERNAME": access.username,
                "GPUPLACE_KAFKA_PASSWORD": access.password.get_secret_value() if access.password else None,
                "GPUPLACE_KAFKA_CA_FILE": access.ca_file, "GPUPLACE_KAFKA_CERT_FILE": access.cert_file,
                "GPUPLACE_KAFKA_KEY_FILE": access.key_file}
    env.update({k: v for k, v in optional.items() if v})
    own = stack_env.resolve(password_variable(service)) if service in SERVICE_USERS else None
    if service and own and access.security_protocol.startswith("SASL_"):
        env.update(GPUPLACE_KAFKA_USERNAME=service, GPUPLACE_KAFKA_PASSWORD=own)
    return env


__all__ = ["SERVICE_USERS", "kafka_env", "password_variable"]
