"""Copies of the records a consumer cannot handle, on `gpuplace.deadletter.v1`, with the reason.

Dead-letter copies fit Kafka's default 1 MB message: DeadLetter.of keeps the first 256 KiB of the original
with its full length and SHA-256.
"""

from __future__ import annotations

import logging

from faststream.kafka import KafkaBroker
from pydantic import ValidationError

from gpuplace.adapters.kafka.partitioning import cluster_of
from gpuplace.adapters.kafka.producer import publish_event
from gpuplace.contracts import topics
from gpuplace.contracts.events import DeadLetter

log = logging.getLogger(__name__)


async def dead_letter(broker: KafkaBroker, *, topic: str, consumer: str, reason: str, value: bytes,
                      key: bytes | None, partition: int | None, offset: int | None, suffix: str = "") -> None:
    letter = DeadLetter.of(cluster=cluster_of(key), source_topic=topic, consumer=consumer, reason=reason,
                           value=value, key=key, partition=partition, offset=offset)
    await publish_event(broker, letter, topic=topics.DEADLETTER + suffix)
    log.warning("dead-lettered %s[%s]@%s: %s", topic, partition, offset, reason)


def validation_reason(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())


def failure_reason(exc: BaseException, attempts: int) -> str:
    """The reason given for a record whose handler failed `attempts` times: the exception's class and message."""
    return f"handler failed {attempts} time(s): {type(exc).__module__}.{type(exc).__qualname__}: {exc}"


__all__ = ["dead_letter", "failure_reason", "validation_reason"]
