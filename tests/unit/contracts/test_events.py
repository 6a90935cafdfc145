"""The public event schema: round trips, keys, validation at the edge, the package's public names."""

import importlib

import pytest
from pydantic import ValidationError

import gpuplace.contracts as contracts
from gpuplace.contracts import GpuRequest, LatencyWindow, PodEvent


def test_an_event_round_trips_through_json_with_its_schema_version():
    event = PodEvent(cluster="east", kind="pending", namespace="robots", name="slam-0", uid="u1",
                     gpu=GpuRequest(gpu_count=1, memory_mib_per_gpu=9420), deadline_ms=80)
    wire = event.model_dump_json(by_alias=True)
    assert '"schema":1' in wire
    assert PodEvent.model_validate_json(wire) == event
    assert event.kafka_key() == b"east/robots/slam-0"


@pytest.mark.parametrize("bad", [
    {"cluster": "East_1"},  # not a DNS label
    {"deadline_ms": 0},
    {"gpu": {"gpu_count": 2, "share_milli_per_gpu": 500}},  # a fraction spans one GPU only
    {"unknown_field": 1},  # extra fields are refused, not silently dropped
])
def test_invalid_events_are_refused(bad):
    fields = {"cluster": "east", "kind": "pending", "namespace": "robots", "name": "p", "uid": "u", **bad}
    with pytest.raises(ValidationError):
        PodEvent.model_validate(fields)


def test_latency_percentiles_must_be_ordered():
    with pytest.raises(ValidationError, match="p50 <= p95 <= p99"):
        LatencyWindow(cluster="east", namespace="ns", pod="p", workload="w", window_s=10, frames=300,
                      p50_ms=9, p95_ms=3, p99_ms=12)


@pytest.mark.parametrize("package", ["gpuplace.contracts"])
def test_public_names_are_listed_and_exist(package):
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(set(module.__all__))
    assert all(hasattr(module, name) for name in module.__all__)
    assert contracts.TOPIC_MODELS.keys() == set(contracts.topics.ALL_TOPICS)
