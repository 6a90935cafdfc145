"""Every Kafka topic gpuplace reads or writes, in one place.

Topic names carry their schema's major version: a breaking change adds a topic, old ones stay readable.
"""

from __future__ import annotations

PODS = "gpuplace.pods.v1"
NODES = "gpuplace.nodes.v1"
TELEMETRY = "gpuplace.telemetry.v1"
LATENCY = "gpuplace.latency.v1"
PLACEMENTS = "gpuplace.placements.v1"
DEADLETTER = "gpuplace.deadletter.v1"
HINTS = "gpuplace.hints.v1"  # scale hints: a cluster's own topic, not a placement kind (a new kind breaks v1 readers)

INPUT_TOPICS = (PODS, NODES, TELEMETRY, LATENCY)
ALL_TOPICS = (*INPUT_TOPICS, PLACEMENTS, DEADLETTER, HINTS)

__all__ = ["PODS", "NODES", "TELEMETRY", "LATENCY", "PLACEMENTS", "DEADLETTER", "HINTS", "INPUT_TOPICS", "ALL_TOPICS"]
