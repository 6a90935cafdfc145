"""The envelope every gpuplace event carries: identity, origin, time and schema version.

`event_id` is the idempotency key: consumers record it in the same transaction as the state it changes,
so a redelivered message changes nothing. The Kafka key is `cluster/<entity>`, which keeps every event
of one entity in one partition and therefore in order.

`schema` is the envelope's version: a reader refuses a version it does not know (SCHEMA_VERSIONS) rather than
read it as v1, so a consumer dead-letters it with that reason. Every integer of the events is bounded to what
PostgreSQL (INTEGER int32, BIGINT int64) and NumPy int64 sums hold, and floats are finite, so that an event
the schema accepts can always be stored (the bounds below).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA_VERSIONS = frozenset({1})  # envelope versions this package reads and writes

INT32_MAX = 2**31 - 1  # PostgreSQL INTEGER columns: GPU memory, counts, indexes, priority
INT32_MIN = -(2**31)
QUANTITY_MAX = 2**40  # BIGINT cpu_milli / memory_mib: ~1.1e12, so a sum over a million pods stays in int64
# Other resources in their base units (bytes of ephemeral-storage and hugepages, extended resource units): 256 TiB,
# so the requests of 32,768 pods on one node still sum within int64.
RESOURCE_MAX = 2**48


def _new_event_id() -> str:
    return uuid.uuid4().hex


def _now() -> datetime:
    return datetime.now(UTC)


class Envelope(BaseModel):
    """Fields shared by every event. Subclasses fix `kind` and add their payload fields."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    event_id: str = Field(default_factory=_new_event_id, min_length=1, max_length=128)
    cluster: str = Field(min_length=1, max_length=128, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    region: str = Field(default="local", min_length=1, max_length=64)
    occurred_at: datetime = Field(default_factory=_now)
    schema_version: int = Field(default=1, alias="schema", ge=1, le=INT32_MAX)

    @field_validator("schema_version")
    @classmethod
    def _known_schema(cls, version: int) -> int:
        if version not in SCHEMA_VERSIONS:
            raise ValueError(f"schema version {version} is not one this reader understands "
                             f"(reads {', '.join(map(str, sorted(SCHEMA_VERSIONS)))})")
        return version

    def entity(self) -> str:
        """The entity this event is about; subclasses override."""
        raise NotImplementedError

    def kafka_key(self) -> bytes:
        return kafka_key(self.cluster, self.entity())

    def digest(self) -> str:
        """SHA-256 of the event's content: consumers store it with the claimed `event_id`, so a redelivery
        (same id, same content) is skipped while the same id with other content is refused (contracts.Rejected)."""
        return hashlib.sha256(self.model_dump_json(by_alias=True).encode()).hexdigest()


E = TypeVar("E", bound=BaseModel)


def read_event(model: type[E], body: bytes | str) -> E:
    """Read a record's JSON as `model`, ignoring fields this model does not know (at any depth).

    Why not the models' own `extra="forbid"`: that strictness is for the producing side, where an unknown keyword
    is a typo in gpuplace's code. A reader must instead keep reading when a newer producer has added an optional
    field (the schema evolution rule, contracts/__init__.py): during a rolling upgrade the new cluster-watcher
    publishes the field before the last old placement worker is replaced, and a subscribing team upgrades on its
    own schedule. Every other check (types, bounds, the `schema` version) still applies."""
    return model.model_validate_json(body, extra="ignore")


def kafka_key(cluster: str, entity: str) -> bytes:
    """Kafka key rule: `cluster/<entity>` (DESIGN §4)."""
    return f"{cluster}/{entity}".encode()


__all__ = ["Envelope", "kafka_key", "read_event", "SCHEMA_VERSIONS", "INT32_MAX", "INT32_MIN", "QUANTITY_MAX"]
