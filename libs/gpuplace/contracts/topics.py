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

INPUT_TOPICS = (PODS, NODES, TELEMETRY, LATENCY)
ALL_TOPICS = (*INPUT_TOPICS, PLACEMENTS, DEADLETTER)

__all__ = ["PODS", "NODES", "TELEMETRY", "LATENCY", "PLACEMENTS", "DEADLETTER", "INPUT_TOPICS", "ALL_TOPICS"]
