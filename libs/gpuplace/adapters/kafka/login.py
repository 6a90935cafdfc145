"""Tell a refused Kafka login from a Kafka that is down.

aiokafka logs a broker's refusal of the SASL login and then raises only "Unable to bootstrap", the error it
raises when no broker answers at all; `dependencies` then words it as an outage ("cannot reach Kafka"), and a
service with a wrong or rotated password waited for a Kafka that was up (issue 40). One more connection to the
first bootstrap broker, made as aiokafka makes its own, shows which it was: a refusal is a setting to fix, and
the service should say so and stop rather than wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from aiokafka import errors as kafka_errors
from aiokafka.conn import create_conn

from gpuplace.settings import KafkaAccess

# What a broker answers a wrong user or password with (SaslAuthenticate's error 58, or the older handshake's)
LOGIN_REFUSED = (kafka_errors.SaslAuthenticationFailed, kafka_errors.AuthenticationFailedError)
_SECURITY = ("security_protocol", "ssl_context", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password")


def _first_broker(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    return host.strip("[]") or "localhost", int(port or 9092)


async def refusal(access: KafkaAccess, options: Mapping[str, object], timeout_s: float = 10.0) -> str | None:
    """Why the first bootstrap broker refused `access`'s SASL login, or None: no SASL, the login passes, or the
    broker does not answer (an outage, which the caller reports as one). `options` are the client's own
    (adapters/kafka/connection.client_options); the password in them is never part of what this returns."""
    if not access.security_protocol.startswith("SASL_"):
        return None
    host, port = _first_broker(access.bootstrap)
    try:
        conn = await asyncio.wait_for(create_conn(host, port, request_timeout_ms=int(timeout_s * 1000),
                                                  **{k: options[k] for k in _SECURITY if k in options}), timeout_s)
    except LOGIN_REFUSED:
        return f"refused the login for user {access.username} (SASL authentication failed)"
    except (OSError, TimeoutError, kafka_errors.KafkaError, ValueError):
        return None
    conn.close()
    return None


__all__ = ["LOGIN_REFUSED", "refusal"]
