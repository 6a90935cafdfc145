"""gpuplace's public event contracts (pydantic v2). Importable alone by subscribing teams."""

from gpuplace.contracts import topics
from gpuplace.contracts.envelope import Envelope, kafka_key
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
    "topics", "Envelope", "kafka_key", "TOPIC_MODELS", "DeadLetter", "GpuAssignment", "GpuRequest",
    "GpuTelemetry", "LatencyWindow", "NodeEvent", "PlacementEvent", "PlacementKind", "PodEvent", "Rejected",
]
