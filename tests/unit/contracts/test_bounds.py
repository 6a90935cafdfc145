"""Every number an event carries fits where it is stored (PostgreSQL INTEGER/BIGINT, NumPy int64 sums), unknown
schema versions are refused, and a dead-letter copy of any record fits Kafka's default 1 MB message."""

import base64
import hashlib
import json

import pytest
from pydantic import ValidationError

from gpuplace.contracts.envelope import INT32_MAX, QUANTITY_MAX
from gpuplace.contracts.events import DeadLetter, GpuTelemetry, LatencyWindow, NodeEvent, PodEvent
from tests.builders import node_event, pod_event


def _pod(**changes) -> bytes:
    wire = json.loads(pod_event("p").model_dump_json(by_alias=True))
    return json.dumps({k: v for k, v in {**wire, **changes}.items() if v is not None}).encode()


@pytest.mark.parametrize(("changes", "field"), [
    ({"priority": 2**31}, "priority"),  # one past PostgreSQL INTEGER
    ({"priority": -(2**31) - 1}, "priority"),
    ({"cpu_milli": 9223372036854775807}, "cpu_milli"),  # what the apiserver accepts as a CPU request
    ({"memory_mib": QUANTITY_MAX + 1}, "memory_mib"),
    ({"gpu": {"gpu_count": 1, "memory_mib_per_gpu": 2**31}}, "gpu.memory_mib_per_gpu"),
    ({"extended": {"nvidia.com/mig-1g.5gb": 2**31}}, "extended.nvidia.com/mig-1g.5gb"),
    ({"deadline_ms": "Infinity"}, "deadline_ms"),
    ({"service_ms": "NaN"}, "service_ms"),
    ({"schema": 2}, "schema"),
])
def test_a_pod_event_out_of_bounds_is_refused_with_the_field_named(changes, field):
    with pytest.raises(ValidationError) as caught:
        PodEvent.model_validate_json(_pod(**changes))
    assert [".".join(map(str, e["loc"])) for e in caught.value.errors()] == [field]


def test_json_1e400_is_infinity_and_refused():
    with pytest.raises(ValidationError, match="finite"):
        PodEvent.model_validate_json(_pod(deadline_ms=None)[:-1] + b', "deadline_ms": 1e400}')


def test_an_unknown_schema_version_says_which_versions_are_read():
    with pytest.raises(ValidationError, match="schema version 2 is not one this reader understands .reads 1."):
        PodEvent.model_validate_json(_pod(schema=2))


def test_the_largest_accepted_values_are_still_accepted():
    # kube's system-node-critical priority class is 2000001000: above user priorities, inside int32
    pod = PodEvent.model_validate_json(_pod(priority=2_000_001_000, cpu_milli=QUANTITY_MAX, memory_mib=QUANTITY_MAX))
    assert pod.priority == 2_000_001_000
    node = node_event("n").model_copy(update={"gpu_memory_mib": INT32_MAX, "max_pods": INT32_MAX})
    assert NodeEvent.model_validate_json(node.model_dump_json(by_alias=True)).gpu_memory_mib == INT32_MAX


@pytest.mark.parametrize(("model", "wire"), [
    (NodeEvent, {"kind": "upsert", "cluster": "east", "name": "n1", "gpu_memory_mib": 2**31}),
    (NodeEvent, {"kind": "upsert", "cluster": "east", "name": "n1", "cpu_milli": 2**63 - 1}),
    (GpuTelemetry, {"cluster": "east", "node": "n1", "gpu_index": 0, "memory_total_mib": 2**31,
                    "memory_used_mib": 0}),
    (LatencyWindow, {"cluster": "east", "namespace": "ns", "pod": "p", "workload": "w", "window_s": "Infinity",
                     "frames": 5, "p50_ms": 1, "p95_ms": 2, "p99_ms": 3}),
])
def test_other_events_out_of_bounds_are_refused(model, wire):
    with pytest.raises(ValidationError):
        model.model_validate_json(json.dumps(wire))


def test_a_dead_letter_of_a_900_kb_record_keeps_256_kib_with_the_full_length_and_digest():
    value = b"x" * 900_000
    letter = DeadLetter.of(cluster="east", source_topic="gpuplace.pods.v1", consumer="placement",
                           reason="too big " * 10_000, value=value, key=b"k" * 100_000)
    wire = letter.model_dump_json(by_alias=True).encode()
    assert len(wire) < 400_000  # 256 KiB as base64 is 349,528 bytes: well under Kafka's 1,048,588
    assert base64.b64decode(letter.original_value_b64) == value[:DeadLetter.ORIGINAL_CAP]
    assert letter.original_size == 900_000
    assert letter.original_sha256 == hashlib.sha256(value).hexdigest()
    assert len(letter.reason) == 4000


def test_a_dead_letter_without_the_new_fields_still_reads():  # additive: v1 readers and writers agree
    old = {"cluster": "east", "source_topic": "t", "consumer": "c", "reason": "r", "original_value_b64": ""}
    letter = DeadLetter.model_validate(old)
    assert (letter.cluster, letter.source_topic, letter.consumer, letter.reason) == ("east", "t", "c", "r")
    assert letter.original_size is None


def test_an_oversize_pod_event_becomes_a_small_one_that_reports_it():
    from gpuplace.contracts.events import Requirement, SelectorTerm, encode_within

    # a 250 KB affinity value: the event is ~250 KB, over a 100 KB cap
    huge = SelectorTerm(match_expressions=(Requirement(key="zone", operator="In", values=("a" * 250_000,)),))
    pod = pod_event("big").model_copy(update={"required_terms": (huge,), "priority": 7})
    body = encode_within(pod, 100_000)
    small = PodEvent.model_validate_json(body)
    assert len(body) < 2_000
    assert (small.uid, small.name, small.event_id, small.priority, small.gpu) == (pod.uid, pod.name, pod.event_id,
                                                                                   7, pod.gpu)
    assert small.required_terms == () and "exceeds the 100000-byte event limit" in small.request_error
    fine = pod_event("fine")
    assert encode_within(fine, 100_000) == fine.model_dump_json(by_alias=True).encode()  # under the cap: as is


def test_an_oversize_node_event_is_refused_not_sent():
    from gpuplace.contracts.events import EventTooLarge, encode_within

    node = node_event("n").model_copy(update={"labels": {"big": "x" * 200_000}})
    with pytest.raises(EventTooLarge, match="NodeEvent n is"):
        encode_within(node, 100_000)
