"""The fuzz corpus of `gpuplace bench chaos`: records every consuming service must dead-letter.

Pure and seeded on purpose: the bench matches each record to its dead letter by SHA-256, and a run that finds a
record which stalls a partition must be replayable record for record, so the corpus is a function of
(count, clusters, seed) alone. Each record starts from a valid event of its topic (built with the contract
models, so it tracks the schema) and is then broken one way, so that what is tested is the consumer's
rejection path and not a happy path by accident. Every record carries its index, so no two are alike.

Keys are `cluster/<entity>` of the run's clusters: the producer's cluster partitioner then puts each record on
the partition the run's consumers own, interleaved with that cluster's real events (DESIGN §4).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplace.adapters.kafka import JSON_HEADERS
from gpuplace.contracts import topics
from gpuplace.contracts.envelope import Envelope
from gpuplace.contracts.events import (
    GpuAssignment,
    GpuRequest,
    GpuTelemetry,
    LatencyWindow,
    NodeEvent,
    PlacementEvent,
    PodEvent,
)

# Every topic a service consumes (the dead-letter topic has no consumer, so nothing there is rejected).
FUZZ_TOPICS = (topics.PODS, topics.NODES, topics.TELEMETRY, topics.LATENCY, topics.PLACEMENTS)
# How often each kind is drawn; oversize records are rare because each is ~900 KB on the broker.
KIND_WEIGHTS = {"random-bytes": 4.0, "truncated-json": 3.0, "bad-json": 3.0, "wrong-shape": 3.0,
                "out-of-bounds": 5.0, "schema-version": 2.0, "oversize": 0.1}
KINDS = tuple(KIND_WEIGHTS)
JSON_HEADER = tuple((name, value.encode()) for name, value in JSON_HEADERS.items())  # as aiokafka takes headers
OVERSIZE_BYTES = (850_000, 900_000)  # Kafka's default message limit is 1 MB: the record itself must arrive
FUZZ_NAMESPACE = "chaos-fuzz"  # no real pod lives here, should a record ever be accepted
_EPOCH = "2025-01-01T00:00:00Z"  # a fixed occurred_at keeps the corpus byte-identical for a seed

# Literals json.dumps cannot write (1e400, which parses as inf, and NaN) go in as a marked string, unquoted later.
_RAW = re.compile(r'"@raw:([^"@]+)@"')


def _raw(literal: str) -> str:
    return f"@raw:{literal}@"


# Per topic: (path into the event, a value beyond the contract's bounds). Paths are keys, or ints into lists.
_OUT_OF_BOUNDS: dict[str, list[tuple[tuple[Any, ...], Any]]] = {
    topics.PODS: [
        (("priority",), 2**31), (("priority",), -(2**31) - 1), (("cpu_milli",), 9223372036854775807),
        (("memory_mib",), -1), (("gpu", "memory_mib_per_gpu"), _raw("1e400")),
        (("gpu", "memory_mib_per_gpu"), _raw("NaN")),
        (("gpu", "gpu_count"), -1), (("gpu", "gpu_count"), 65), (("deadline_ms",), _raw("NaN")),
        (("frame_rate_hz",), _raw("1e400")), (("extended",), {"nvidia.com/mig-1g.10gb": -1}),
    ],
    topics.NODES: [
        (("gpu_memory_mib",), _raw("1e400")), (("gpu_memory_mib",), _raw("NaN")), (("gpu_memory_mib",), 2**31),
        (("cpu_milli",), 9223372036854775807), (("gpu_count",), -1), (("max_pods",), -1),
        (("extended",), {"nvidia.com/gpu": 2**31}),
    ],
    topics.TELEMETRY: [
        (("memory_total_mib",), _raw("1e400")), (("memory_used_mib",), _raw("NaN")),
        (("utilization_pct",), _raw("NaN")),
        (("utilization_pct",), 101), (("gpu_index",), -1), (("memory_used_mib",), 2**31 - 1),
    ],
    topics.LATENCY: [
        (("frames",), -1), (("frames",), 2**31), (("p95_ms",), _raw("NaN")), (("window_s",), _raw("1e400")),
        (("deadline_misses",), -1), (("gpu_index",), 2**31), (("p50_ms",), 1e6),
    ],
    topics.PLACEMENTS: [
        (("gpus", 0, "memory_mib"), _raw("1e400")), (("gpus", 0, "index"), -1), (("gpus", 0, "share_milli"), 1001),
        (("gpus", 0, "memory_mib"), 2**31),
    ],
}


@dataclass(frozen=True)
class FuzzRecord:
    """One malformed record, ready to send: `topic` without the run's suffix."""

    index: int
    topic: str
    kind: str
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]

    @property
    def sha256(self) -> str:
        """What the dead letter's `original_sha256` says of this record."""
        return hashlib.sha256(self.value).hexdigest()

    @property
    def cluster(self) -> str:
        return self.key.split(b"/", 1)[0].decode()


def corpus(count: int, *, clusters: Sequence[str], seed: int,
           topic_names: Sequence[str] = FUZZ_TOPICS) -> list[FuzzRecord]:
    """`count` malformed records over `topic_names` and `clusters`; the first len(KINDS) cover every kind."""
    return list(records(count, clusters=clusters, seed=seed, topic_names=topic_names))


def records(count: int, *, clusters: Sequence[str], seed: int,
            topic_names: Sequence[str] = FUZZ_TOPICS) -> Iterator[FuzzRecord]:
    """The corpus one record at a time (a 5,000-record corpus with its oversize records is ~40 MB)."""
    if not clusters:
        raise ValueError("the fuzz corpus needs at least one cluster to key its records by")
    rng = random.Random(seed)
    weights = [KIND_WEIGHTS[k] for k in KINDS]
    for index in range(count):
        kind = KINDS[index] if index < len(KINDS) else rng.choices(KINDS, weights)[0]
        topic = topic_names[index % len(topic_names)] if index < len(topic_names) else rng.choice(topic_names)
        yield _record(rng, index, kind, topic, rng.choice(list(clusters)))


def valid_event(topic: str, cluster: str, index: int, event_id: str) -> Envelope:
    """A valid event of `topic`, the starting point every malformed record breaks."""
    common: dict[str, Any] = {"event_id": event_id, "cluster": cluster, "occurred_at": _EPOCH}
    node, pod = f"fuzz-node-{index}", f"fuzz-{index}"
    builders: dict[str, Callable[[], Envelope]] = {
        topics.PODS: lambda: PodEvent(
            **common, kind="pending", namespace=FUZZ_NAMESPACE, name=pod, uid=f"fuzz-uid-{index}", cpu_milli=100,
            memory_mib=64, gpu=GpuRequest(gpu_count=1, memory_mib_per_gpu=1024), deadline_ms=33.0,
            frame_rate_hz=30.0),
        topics.NODES: lambda: NodeEvent(**common, kind="upsert", name=node, cpu_milli=96_000, memory_mib=786_432,
                                        gpu_count=8, gpu_memory_mib=24_576, max_pods=110),
        topics.TELEMETRY: lambda: GpuTelemetry(**common, node=node, gpu_index=0, memory_total_mib=24_576,
                                               memory_used_mib=1024, utilization_pct=10.0),
        topics.LATENCY: lambda: LatencyWindow(
            **common, namespace=FUZZ_NAMESPACE, pod=pod, workload="slam", node=node, gpu_index=0, window_s=10.0,
            frames=300, p50_ms=10.0, p95_ms=20.0, p99_ms=25.0, deadline_ms=33.0),
        topics.PLACEMENTS: lambda: PlacementEvent(  # the kind placement reads there (services/placement/app.py)
            **common, kind="slo_violation", namespace=FUZZ_NAMESPACE, pod=pod, node=node,
            gpus=(GpuAssignment(index=0, memory_mib=1024, share_milli=0),)),
    }
    return builders[topic]()


def _record(rng: random.Random, index: int, kind: str, topic: str, cluster: str) -> FuzzRecord:
    event = valid_event(topic, cluster, index, event_id=f"fuzz-{rng.getrandbits(64):016x}-{index}")
    body = json.loads(event.model_dump_json(by_alias=True))
    value, headers = _BREAKERS[kind](rng, body, topic, index)
    return FuzzRecord(index=index, topic=topic, kind=kind, key=event.kafka_key(), value=value, headers=headers)


def _any_header(rng: random.Random) -> tuple[tuple[str, bytes], ...]:
    """Bad bytes must be rejected whatever the content-type says (FastStream decodes JSON by that header)."""
    return JSON_HEADER if rng.random() < 0.5 else ()


def _dumps(body: Any) -> str:
    """JSON text with raw literals (1e400, NaN) spliced in where a marker stands."""
    return _RAW.sub(r"\1", json.dumps(body, separators=(",", ":")))


def _random_bytes(rng: random.Random, body: dict[str, Any], topic: str, index: int) -> tuple[bytes, Any]:
    return rng.randbytes(rng.randint(16, 4096)) + f"#{index}".encode(), _any_header(rng)


def _truncated_json(rng: random.Random, body: dict[str, Any], topic: str, index: int) -> tuple[bytes, Any]:
    text = _dumps(body)  # cut after the event_id, which carries the index: no two records alike
    return text[:rng.randint(text.index('"cluster"'), len(text) - 1)].encode(), _any_header(rng)


def _bad_json(rng: random.Random, body: dict[str, Any], topic: str, index: int) -> tuple[bytes, Any]:
    text = _dumps(body)
    broken = rng.choice([
        text[:-1] + ",}",  # trailing comma
        text.replace('"', "'"),  # single quotes
        text.replace('"cluster":', "cluster:", 1),  # unquoted key
        text + "}",  # trailing characters
        text.replace(":", "=", 1),  # not a separator
        "{/* comment */" + text[1:],  # comments are not JSON
    ])
    return broken.encode(), _any_header(rng)


def _wrong_shape(rng: random.Random, body: dict[str, Any], topic: str, index: int) -> tuple[bytes, Any]:
    other = rng.choice([t for t in FUZZ_TOPICS if t != topic])
    foreign = json.loads(valid_event(other, body["cluster"], index, body["event_id"]).model_dump_json(by_alias=True))
    shaped = rng.choice([
        [body, index], f"fuzz-{index}", index,  # not an object at all
        foreign,  # another topic's valid event
        {k: v for k, v in body.items() if k != "cluster"},  # a required field missing
        # (not a field the contract lacks: consumers read past added fields, the schema evolution rule)
        {**body, "cluster": index},  # a field of the wrong type
        {**body, "occurred_at": f"not-a-time-{index}"},
    ])
    return _dumps(shaped).encode(), JSON_HEADER


def _out_of_bounds(rng: random.Random, body: dict[str, Any], topic: str, index: int) -> tuple[bytes, Any]:
    path, value = rng.choice(_OUT_OF_BOUNDS[topic])
    return _dumps(_set(body, path, value)).encode(), JSON_HEADER


def _schema_version(rng: random.Random, body: dict[str, Any], topic: str, index: int) -> tuple[bytes, Any]:
    return _dumps({**body, "schema": rng.choice([0, 2, 3, 99, 2**31])}).encode(), JSON_HEADER


def _oversize(rng: random.Random, body: dict[str, Any], topic: str, index: int) -> tuple[bytes, Any]:
    """~900 KB that fits Kafka's 1 MB limit but not the contract (a field it does not have, or a bound)."""
    path, value = rng.choice(_OUT_OF_BOUNDS[topic])
    broken = _set(body, path, value)
    size = rng.randint(*OVERSIZE_BYTES)
    padded = {**broken, "padding": "x" * max(0, size - len(_dumps(broken)) - 14)}
    return _dumps(padded).encode(), JSON_HEADER


def _set(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A deep copy of `body` with `value` at `path`."""
    copy = json.loads(json.dumps(body))
    target: Any = copy
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return copy


_BREAKERS: dict[str, Callable[[random.Random, dict[str, Any], str, int], tuple[bytes, Any]]] = {
    "random-bytes": _random_bytes, "truncated-json": _truncated_json, "bad-json": _bad_json,
    "wrong-shape": _wrong_shape, "out-of-bounds": _out_of_bounds, "schema-version": _schema_version,
    "oversize": _oversize,
}

__all__ = ["FuzzRecord", "corpus", "records", "valid_event", "FUZZ_TOPICS", "KINDS", "KIND_WEIGHTS", "JSON_HEADER"]
