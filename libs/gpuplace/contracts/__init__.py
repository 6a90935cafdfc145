"""gpuplace's public event contracts (pydantic v2). Importable alone by subscribing teams.

Schema evolution, the rule every change to these models follows (README, "Subscribing to placements"):

* Compatible, same topic, same `schema` version (1): adding an OPTIONAL field (one with a default), a new
  model in `$defs`, or a looser description. Readers ignore fields they do not know (read_event), so a consumer
  built against the older model keeps reading; the version does not move because readers refuse versions they
  do not know (envelope.SCHEMA_VERSIONS), which would turn an addition into an outage.
* Breaking, a new topic version: removing, renaming or retyping a field, making an optional field required (or
  the reverse), narrowing a bound, or changing an enum's values (a new `kind` included: an old reader's Literal
  refuses it). The new shape goes to a new topic (`gpuplace.placements.v2`, topics.py) with its own model in
  TOPIC_MODELS; producers publish BOTH topics while consumers move over, and stop the old one only when its
  last consumer has (the old topic stays readable for replay).

tests/unit/contracts/test_schema_evolution.py holds each topic's JSON Schema as checked in
(tests/data/schemas/) and fails on any change that is not additive.
"""

from gpuplace.contracts import topics
from gpuplace.contracts.envelope import Envelope, kafka_key, read_event
from gpuplace.contracts.events import (
    TOPIC_MODELS,
    DeadLetter,
    GpuAssignment,
    GpuRequest,
    GpuTelemetry,
    LatencyWindow,
    NodeEvent,
    PlacementEvent,
    PlacementKind,
    PodEvent,
)
from gpuplace.contracts.rejected import Rejected

__all__ = [
    "topics", "Envelope", "kafka_key", "read_event", "TOPIC_MODELS", "DeadLetter", "GpuAssignment", "GpuRequest",
    "GpuTelemetry", "LatencyWindow", "NodeEvent", "PlacementEvent", "PlacementKind", "PodEvent", "Rejected",
]
